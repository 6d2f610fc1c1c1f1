// `node scripts/check-node.mjs`: exit 1 with one line on stderr when this Node.js cannot run the
// project (see node-version.mjs). Run by npm before start, test, produce, ops, soak and synth.
import { nodeVersionProblem } from './node-version.mjs';

const problem = nodeVersionProblem(process.versions.node);
if (problem !== undefined) {
  process.stderr.write(problem + '\n');
  process.exit(1);
}
