// Every entry point refuses a Node.js that cannot run the project with one line naming the version
// and how to get it: npm runs scripts/check-node.mjs before start, test, produce, ops, soak and synth.
// The refusal is checked in a real node process told it is Node 20 (a preload rewrites
// process.versions), the way the machine's default Node 20 would run it.
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { MINIMUM_NODE_MAJOR, nodeVersionProblem } from '../../scripts/node-version.mjs';

const ENTRY_POINTS = ['start', 'test', 'produce', 'ops', 'soak', 'synth'];
const CHECK = 'node scripts/check-node.mjs';

function runCheckAs(version: string) {
  const preload = `data:text/javascript,Object.defineProperty(process,'versions',{value:{...process.versions,node:${JSON.stringify(version)}}})`;
  return spawnSync(process.execPath, ['--import', preload, 'scripts/check-node.mjs'], { encoding: 'utf8' });
}

describe('the Node.js version guard', () => {
  it('runs before every entry point', () => {
    const scripts = (JSON.parse(readFileSync('package.json', 'utf8')) as { scripts: Record<string, string> }).scripts;
    for (const name of ENTRY_POINTS) {
      expect(scripts[name], name).toBeDefined();
      expect(scripts[`pre${name}`], `pre${name}`).toBe(CHECK);
    }
  });

  it('agrees with package.json engines', () => {
    const engines = (JSON.parse(readFileSync('package.json', 'utf8')) as { engines: { node: string } }).engines.node;
    expect(engines).toBe(`>=${MINIMUM_NODE_MAJOR}`);
  });

  it('refuses Node 20 in one line naming Node 22+ and how to get it, exit 1', () => {
    const run = runCheckAs('20.20.2');
    expect(run.status).toBe(1);
    expect(run.stdout).toBe('');
    const lines = run.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(1);
    expect(lines[0]).toMatch(/needs Node\.js 22 or newer/);
    expect(lines[0]).toContain('this is Node.js 20.20.2');
    expect(lines[0]).toContain('nvm install 24');
  });

  it('lets this Node (and 22) through silently', () => {
    const run = spawnSync(process.execPath, ['scripts/check-node.mjs'], { encoding: 'utf8' });
    expect({ status: run.status, stderr: run.stderr }).toEqual({ status: 0, stderr: '' });
    expect(runCheckAs('22.0.0').status).toBe(0);
    expect(nodeVersionProblem('18.19.0')).toMatch(/Node\.js 18\.19\.0/);
    expect(nodeVersionProblem('24.22.3')).toBeUndefined();
  });
});
