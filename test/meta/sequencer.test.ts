// The suite's file order (test/support/sequencer.ts) may only reorder: every file runs, once. And its
// table of expected durations must name files that exist, or a renamed slow file would quietly lose
// its place at the front (wall time, not a check — but the table would be lying).
import { existsSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import type { TestSpecification } from 'vitest/node';
import LongestFirstSequencer, { EXPECTED_SECONDS } from '../support/sequencer.ts';

const ROOT = path.resolve(import.meta.dirname, '../..');

function testFiles(): string[] {
  return (readdirSync(path.join(ROOT, 'test'), { recursive: true }) as string[])
    .filter((f) => f.endsWith('.test.ts'))
    .map((f) => path.join(ROOT, 'test', f));
}

/** The part of vitest's context the sequencer reads: the root and the previous run's durations. */
function sequencer(cachedMs: Record<string, number> = {}): LongestFirstSequencer {
  const ctx = {
    config: { root: ROOT },
    cache: { getTestSpecificationResult: (spec: TestSpecification) => (spec.moduleId in cachedMs ? { duration: cachedMs[spec.moduleId]!, failed: false } : undefined) },
  };
  return new LongestFirstSequencer(ctx as never);
}

const spec = (moduleId: string) => ({ moduleId }) as TestSpecification;

describe('the longest-first sequencer', () => {
  it('names only test files that exist', () => {
    const missing = Object.keys(EXPECTED_SECONDS).filter((file) => !existsSync(path.join(ROOT, file)));
    expect(missing).toEqual([]);
    expect(Object.keys(EXPECTED_SECONDS).length).toBeGreaterThan(5);
  });

  it('hands out every file exactly once, the longest expected first', async () => {
    const files = testFiles().map(spec);
    expect(files.length).toBeGreaterThan(50);
    const sorted = await sequencer().sort([...files].reverse());
    expect(sorted.map((s) => s.moduleId).sort()).toEqual(files.map((s) => s.moduleId).sort());
    const expected = sorted.map((s) => EXPECTED_SECONDS[path.relative(ROOT, s.moduleId)] ?? 0);
    expect(expected).toEqual([...expected].sort((a, b) => b - a));
    const longest = Object.entries(EXPECTED_SECONDS).sort((a, b) => b[1] - a[1])[0]![0];
    expect(path.relative(ROOT, sorted[0]!.moduleId)).toBe(longest);
  });

  it('orders the files the table does not name by the previous run\'s durations', async () => {
    const a = path.join(ROOT, 'test/config.test.ts');
    const b = path.join(ROOT, 'test/decisions.test.ts');
    const named = path.join(ROOT, Object.keys(EXPECTED_SECONDS)[0]!);
    const sorted = await sequencer({ [a]: 1_000, [b]: 3_000 }).sort([spec(a), spec(b), spec(named)]);
    expect(sorted.map((s) => s.moduleId)).toEqual([named, b, a]);
  });
});
