// bench:cold's bundles and its table. Sizes are deterministic (same sources, same lock file), so the
// charge bundle's budget is asserted here; times are not (a shared machine): only that the bench
// runs and prints a row for every function and both references.
import { execFile } from 'node:child_process';
import { mkdtemp, rm, stat } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, test } from 'vitest';
import { PIPELINE_HANDLERS, PROJECT_ROOT } from '../../lib/pipeline-function.ts';
import { buildColdBundles, bytesByPackage, type ColdBundle } from '../../scripts/cold-bundles.ts';

const MiB = 1024 * 1024;

describe('bench:cold bundles (the deploy\'s esbuild options)', () => {
  let dir: string;
  let bundles: ColdBundle[];
  beforeAll(async () => {
    dir = await mkdtemp(path.join(os.tmpdir(), 'cold-test-'));
    bundles = await buildColdBundles(dir);
  }, 120_000);
  afterAll(() => rm(dir, { recursive: true, force: true }));
  const named = (name: string) => bundles.find((b) => b.name === name)!;

  test('one bundle per pipeline function plus the empty and floor references, each written where it says', async () => {
    expect(bundles.map((b) => b.name)).toEqual(['empty', 'floor', ...PIPELINE_HANDLERS]);
    for (const b of bundles) expect((await stat(b.file)).size, b.name).toBe(b.bytes);
  });

  test('the charge bundle is at most 1 MiB, without the classic zod build', () => {
    const charge = named('charge');
    expect(charge.bytes).toBeLessThanOrEqual(MiB);
    // What esbuild put into the output (metafile.inputs also lists files it read and dropped).
    const inputs = Object.values(charge.metafile.outputs).flatMap((o) => Object.entries(o.inputs).filter(([, v]) => v.bytesInOutput > 0).map(([i]) => i));
    expect(inputs.some((i) => i.includes('node_modules/zod/'))).toBe(true); // zod/mini is there
    expect(inputs.filter((i) => i.includes('node_modules/zod/v4/classic/'))).toEqual([]);
    // No locale but English (the classic build's namespace import drags in all of them).
    expect(inputs.filter((i) => /node_modules\/zod\/v4\/locales\/(?!en\.js|index\.js)/.test(i))).toEqual([]);
  });

  test('the floor holds stripe, pg and the EventBridge client, and the charge bundle all of them', () => {
    const floor = bytesByPackage(named('floor')).map((p) => p.name);
    const charge = bytesByPackage(named('charge')).map((p) => p.name);
    for (const pkg of ['stripe', 'pg', '@aws-sdk/client-eventbridge']) {
      expect(floor, pkg).toContain(pkg);
      expect(charge, pkg).toContain(pkg);
    }
  });
});

test('npm run bench:cold -- --processes 2 prints a row per bundle', async () => {
  const { stdout } = await promisify(execFile)(process.execPath, ['--import', 'tsx', 'scripts/bench-cold.ts', '--processes', '2'], {
    cwd: PROJECT_ROOT,
    timeout: 120_000,
  });
  const lines = stdout.split('\n');
  expect(lines[1]).toMatch(/^bundle\s+KiB\s+bytes\s+min ms\s+median ms\s+max ms\s+median − empty\s+× floor\s+CPU ms\s+CPU − empty\s+CPU × floor$/);
  for (const name of ['empty', 'floor', ...PIPELINE_HANDLERS]) {
    const row = lines.find((l) => l.startsWith(`${name} `));
    const ms = String.raw`\d+\.\d`;
    const over = String.raw`(—|-?\d+\.\d)`;
    const ratio = String.raw`(—|-?\d+\.\d\d)`;
    expect(row, name).toMatch(new RegExp(String.raw`^\S+\s+[\d,]+\s+[\d,]+\s+${ms}\s+${ms}\s+${ms}\s+${over}\s+${ratio}\s+${ms}\s+${over}\s+${ratio}$`));
  }
  expect(lines.find((l) => l.startsWith('floor '))).toMatch(/\s1\.00\s+[\d.]+\s+[\d.]+\s+1\.00$/);
}, 150_000);
