import { defineConfig } from 'vitest/config';
import LongestFirstSequencer from './test/support/sequencer.ts';

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    // One embedded PostgreSQL 18 for the whole run; every test file gets its own database cloned
    // from a migrated template (see test/support/global-setup.ts and test/support/db.ts).
    globalSetup: ['test/support/global-setup.ts'],
    // fast-check: one fixed seed under CI, new seeds locally (see the file).
    setupFiles: ['test/support/fast-check-setup.ts'],
    pool: 'forks',
    // vitest's default is one worker fewer than the CPUs: ONE on a 2-CPU machine, which ran the
    // files one after the other while the CPU sat ~40 % idle (most files wait on sockets, child
    // processes and real clocks). Files are independent (a database each, their own servers on port
    // 0, their own temporary folders), so two run at once. Measured on the 2-CPU machine (full runs,
    // results cache removed, others' tests running too, 2026-12-01): 1 worker 348 s (load ≈ 2);
    // 2 workers 290 s and 237 s (load 5-7); 3 workers 261 s, 283 s and 221 s (load 7-13) — faster,
    // but the extra CPU contention made an arrival-time assertion fail once (reconcile rate test,
    // 1328 ms against ≥ 1340). That test now runs on the sweep's own clock (2026-12-02); two stay the
    // default until three are measured again.
    // `--maxWorkers=N` or vitest's own VITEST_MAX_WORKERS=N overrides it.
    maxWorkers: 2,
    // Longest files first, so that the run does not end on a long file started last (see the file).
    sequence: { sequencer: LongestFirstSequencer },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    teardownTimeout: 30_000,
  },
});
