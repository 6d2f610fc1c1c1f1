// npx tsx scripts/bench-consumer-login.ts — what one outcome consumer's login adds to a migrate run on
// this machine (figures, not assertions): the median of N runs of migrate() over an already-migrated
// database, without and with one consumer login (CREATE ROLE … if missing, the grants, the search-path
// pin, and its password as a SCRAM verifier: PBKDF2, 4096 iterations, computed by the runner).
import os from 'node:os';
import path from 'node:path';
import { parseArgs } from 'node:util';
import { createDatabase, startEmbeddedPostgres } from '../local/postgres.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';

const { values: args } = parseArgs({ options: { runs: { type: 'string', default: '20' } } });
const runs = Number(args.runs);
const postgres = await startEmbeddedPostgres({ dataDir: path.join(os.tmpdir(), `bench-consumer-login-${process.pid}`) });
try {
  await createDatabase(postgres.adminUrl, 'bench');
  const url = postgres.urlFor('bench');
  const files = await loadMigrations(path.resolve(import.meta.dirname, '..', 'migrations'));
  await migrate(url, files);
  const login = { role: 'bench_consumer', password: 'bench-password-000001', schemas: ['outcome_consumer', 'receipts'] };
  const time = async (options: Parameters<typeof migrate>[3]) => {
    const start = performance.now();
    await migrate(url, files, () => {}, options);
    return performance.now() - start;
  };
  const plain: number[] = [];
  const withLogin: number[] = [];
  for (let i = 0; i < runs; i++) {
    plain.push(await time({}));
    withLogin.push(await time({ consumerLogins: [login] }));
  }
  const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)]!;
  console.log(`migrate, nothing to apply: median ${median(plain).toFixed(1)} ms; with one consumer login: median ${median(withLogin).toFixed(1)} ms (${runs} runs each, ${os.cpus().length} CPUs)`);
} finally {
  await postgres.stop();
}
