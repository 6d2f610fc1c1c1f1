// `npm run migrate`: applies migrations/ (or MIGRATIONS_DIR) to DATABASE_URL. Exit code 0 when the
// database is up to date, 1 with a one-line reason otherwise (no stack, no password).
import { defaultMigrationsDir, loadMigrations, migrate } from './migrations.ts';
import { redact } from './observability.ts';

async function main(): Promise<number> {
  const url = process.env.DATABASE_URL;
  if (!url) {
    console.error('migrate: DATABASE_URL is not set (e.g. DATABASE_URL=postgres://user:pass@127.0.0.1:5432/charges npm run migrate)');
    return 1;
  }
  const dir = defaultMigrationsDir();
  try {
    const files = await loadMigrations(dir);
    if (files.length === 0) {
      console.error(`migrate: no migration files in ${dir}`);
      return 1;
    }
    const result = await migrate(url, files, (line) => console.log(`migrate: ${line}`));
    console.log(
      result.applied.length > 0
        ? `migrate: applied ${result.applied.join(', ')} (${result.alreadyApplied.length} already applied)`
        : `migrate: up to date (${result.alreadyApplied.length} applied before)`,
    );
    return 0;
  } catch (error) {
    const message = error instanceof Error ? `${error.name}: ${error.message}` : String(error);
    console.error(`migrate: failed: ${redact(message)}`);
    return 1;
  }
}

process.exitCode = await main();
