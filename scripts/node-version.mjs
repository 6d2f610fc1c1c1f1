// The Node.js versions this project runs on, checked before every entry point (`npm start`, `test`,
// `produce`, `ops`, `soak`, `synth` run `scripts/check-node.mjs` first, as npm "pre" scripts). Plain
// JavaScript with nothing newer than Node 12 can parse, so that an old Node reaches the check and
// prints its one line instead of failing somewhere else — on Node 20, `npm start` printed nothing and
// exited 0 (`import.meta.main` is undefined there).

/** The oldest major version that runs everything (package.json `engines`). */
export const MINIMUM_NODE_MAJOR = 22;

/**
 * The one line to print when `version` (as in `process.versions.node`, e.g. "20.11.1") cannot run
 * the project, or undefined when it can.
 */
export function nodeVersionProblem(version) {
  const major = Number(String(version).split('.')[0]);
  if (Number.isInteger(major) && major >= MINIMUM_NODE_MAJOR) return undefined;
  return (
    'error: this project needs Node.js ' + MINIMUM_NODE_MAJOR + ' or newer (24 is what CI and the Lambda runtime use); ' +
    'this is Node.js ' + version + '. Install Node 24 (`nvm install 24 && nvm use 24`, or https://nodejs.org/en/download) and run again.'
  );
}
