// fast-check's seed, for every property in the suite (a vitest setup file: runs in each worker
// before each test file).
//
// Under CI (`CI` set, as .ci/run does) every property runs from ONE fixed seed, so the landing gate
// judges exactly the inputs a developer ran with `CI=true npm test` before pushing: a new
// counterexample found by chance on the gate would block a change that did not cause it (stop 19:
// a random seed found a hole in the consumer property's oracle). Locally, without CI, every run
// draws new seeds and keeps exploring; a failure prints its seed and path, and
// `FC_SEED=<seed> npx vitest run <file>` replays it (a property's own `seed` parameter wins).
// Counterexamples worth keeping go into that property's `examples`, played on every run.
import fc from 'fast-check';

const explicit = process.env.FC_SEED;
const seed = explicit !== undefined && explicit !== '' ? Number(explicit) : process.env.CI ? 20261201 : undefined; // .ci/run exports FC_SEED=20261201;
if (seed !== undefined) {
  if (!Number.isInteger(seed)) throw new Error(`FC_SEED must be an integer (a seed printed by fast-check), got ${JSON.stringify(explicit)}`);
  fc.configureGlobal({ ...fc.readConfigureGlobal(), seed });
}
