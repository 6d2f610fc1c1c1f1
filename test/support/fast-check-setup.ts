// fast-check's seed, for every property in the suite (a vitest setup file: runs in each worker
// before each test file).
//
// Under CI (`CI` set: .ci/run exports CI=true) every property runs from ONE fixed seed, CI_SEED, so
// the landing gate judges exactly the inputs a developer ran with `CI=true npm test` before pushing: a new
// counterexample found by chance on the gate would block a change that did not cause it (it happened:
// a random seed once found a hole in the consumer property's oracle). Locally, without CI, every run
// draws new seeds and keeps exploring; a failure prints its seed and path, and
// `FC_SEED=<seed> npx vitest run <file>` replays it (a property's own `seed` parameter wins).
// Counterexamples worth keeping go into that property's `examples`, played on every run.
import fc from 'fast-check';

/** The gate's seed. Changing it is a change like any other: run `CI=true npm test` with the new one first. */
const CI_SEED = 20261201;

const explicit = process.env.FC_SEED;
const seed = explicit !== undefined && explicit !== '' ? Number(explicit) : process.env.CI ? CI_SEED : undefined;
if (seed !== undefined) {
  if (!Number.isInteger(seed)) throw new Error(`FC_SEED must be an integer (a seed printed by fast-check), got ${JSON.stringify(explicit)}`);
  fc.configureGlobal({ ...fc.readConfigureGlobal(), seed });
}
