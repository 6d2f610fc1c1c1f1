// The order in which `npm test` hands files to its workers: longest first, so that with two workers
// the run does not end on one long file started last while the other worker idles (the classic
// longest-processing-time-first rule). It changes the ORDER only: every file still runs, once.
//
// Why not vitest's own order: without a results cache (a fresh clone, CI) vitest sorts by file SIZE,
// which put the two soaks, the shutdown test and the end-to-end pipelines — small files, long runs —
// at the end of the run (measured 2026-12-01: the last 90 s of a 325 s run were those files, often
// on one worker). With a cache it sorts by the previous durations, which this sequencer also uses for
// every file the table below does not name.
//
// The table is a measurement, not a promise: seconds a file took in a full run on the 2-CPU machine,
// two workers, others' tests running too (wall from a worker taking it to its end, import and
// collect included: `--reporter=./test/support/timing-reporter.ts`, 2026-12-01, rounded).
// Only the relative order matters; a file missing here, or a stale figure, costs wall time, never a check.
import { stat } from 'node:fs/promises';
import path from 'node:path';
import { BaseSequencer, type TestSpecification } from 'vitest/node';

export const EXPECTED_SECONDS: Readonly<Record<string, number>> = {
  'test/proof/soak.test.ts': 94,
  'test/stripe-events/soak.test.ts': 78,
  'test/proof/model.test.ts': 42,
  'test/package/pack.test.ts': 34,
  'test/bench/peers.test.ts': 23,
  'test/local/consumers.test.ts': 23,
  'test/local/shutdown.test.ts': 21,
  'test/stripe-events/pipeline.test.ts': 18,
  'test/handlers/reconcile.test.ts': 12,
  'test/infra/outcome-consumer.test.ts': 11,
  'test/local/pipeline-chaos.test.ts': 11,
  'test/handlers/charge-outage.test.ts': 11,
  'test/meta/exit-code.test.ts': 11,
  'test/ops/cli-process.test.ts': 10,
  'test/local/pipeline-flaky.test.ts': 10,
  'test/local/event-source.test.ts': 10,
  'test/proof/fuzz.test.ts': 10,
  'test/runtime/database-tls.test.ts': 9,
  'test/producer.test.ts': 7,
  'test/evidence.test.ts': 7,
  'test/runtime/database-roles.test.ts': 6,
  'test/infra/alarms.test.ts': 6,
  'test/ops/review.test.ts': 5,
  'test/engine.test.ts': 5,
  'test/proof/postgres-crash.test.ts': 5,
};

export default class LongestFirstSequencer extends BaseSequencer {
  override async sort(files: TestSpecification[]): Promise<TestSpecification[]> {
    const root = this.ctx.config.root;
    const estimate = new Map<TestSpecification, number>();
    const size = new Map<TestSpecification, number>();
    for (const spec of files) {
      const relative = path.relative(root, spec.moduleId).split(path.sep).join('/');
      const cached = this.ctx.cache.getTestSpecificationResult(spec)?.duration; // ms, tests and hooks
      estimate.set(spec, EXPECTED_SECONDS[relative] ?? (cached !== undefined ? cached / 1000 : 0));
      size.set(spec, await stat(spec.moduleId).then((s) => s.size, () => 0));
    }
    return [...files].sort((a, b) => estimate.get(b)! - estimate.get(a)! || size.get(b)! - size.get(a)! || (a.moduleId < b.moduleId ? -1 : 1));
  }
}
