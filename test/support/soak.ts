// The short chaos soak both soak tests run — test/proof/soak.test.ts with Stripe events on,
// test/stripe-events/soak.test.ts with them off — so that the promise is checked both ways under the
// same kills, restarts and faults: the fast time-lapse clock, many small batches (so that ~100
// orders still give every kill point a few chances), a quarter of the attempts killed, one database
// restart and one crash, a short visibility timeout, and the outbox drained before the check.
import { DEFAULT_SOAK, FAST_TIME_LAPSE, type SoakOptions } from '../../local/soak/soak.ts';

export const SHORT_CHAOS_SOAK: Omit<SoakOptions, 'orders' | 'seed'> = {
  ...DEFAULT_SOAK,
  timeLapse: FAST_TIME_LAPSE,
  batchSize: 4,
  killRate: 0.25,
  randomKillRate: 0.05,
  pgRestarts: 1,
  pgCrashes: 1,
  visibilityTimeoutSeconds: 3,
  awaitOutbox: true,
  quiescenceTimeoutMs: 90_000,
};
