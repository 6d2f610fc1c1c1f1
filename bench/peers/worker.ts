// One fault run in a process of its own (the local pipeline's environment is process-wide, so two
// contestants cannot share a process): bench:peers starts one per contestant at once, and their
// quiet phases — waiting for key windows to pass — overlap instead of adding up.
//   tsx bench/peers/worker.ts <contestant> <adminUrl> <orders> <seed> <pollers>   → one JSON line on stdout
import { CONTESTANTS } from './bench.ts';
import { runContestant } from './run.ts';
import { makeWorkload } from './schedule.ts';
import { startDynalite } from './stores.ts';

const [id, adminUrl, orders, seed, pollers] = process.argv.slice(2);
const contestant = CONTESTANTS.find((c) => c.id === id);
if (!contestant || !adminUrl) throw new Error('usage: worker.ts <contestant> <adminUrl> <orders> <seed> <pollers>');
const dynamo = await startDynalite();
try {
  const result = await runContestant({
    adminUrl,
    dynamoEndpoint: dynamo.endpoint,
    dynamoRequests: dynamo.requests,
    contestant,
    workload: makeWorkload(Number(seed), Number(orders)),
    faults: true,
    latencyMs: 0,
    pollers: Number(pollers),
    log: (line) => process.stderr.write(`${line}\n`),
  });
  process.stdout.write(`${JSON.stringify({ ...result, judgement: { counts: result.judgement.counts, byOrder: Object.fromEntries(result.judgement.byOrder) } })}\n`);
} finally {
  await dynamo.stop();
}
