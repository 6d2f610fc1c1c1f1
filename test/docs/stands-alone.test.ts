// The repository stands alone: no file in it points at something a reader of the repository cannot
// open — a design document kept elsewhere, section numbers of an outside text, issue or work-item
// numbers, a sibling folder outside the checkout (the patterns are below). A reference goes
// to a docs page or section, a decision record, a test or a source file, or is said in plain words.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOTS = ['README.md', 'docs', 'lambdas', 'lib', 'local', 'bench', 'scripts', 'test', 'bin', 'examples', 'migrations', 'schemas'];
const TEXT = /\.(ts|mts|mjs|js|md|sql|json|sh)$/;

/** What a reader cannot open. Built from parts so that this file does not match itself. */
const FORBIDDEN: readonly [string, RegExp][] = [
  ['a design document kept elsewhere', new RegExp(['DES', 'IGN'].join(''))],
  // No word boundary: a re-issue command followed by an operation id reads as an issue number to a
  // plain grep, so the docs put the id after the options.
  ['an issue number', new RegExp(String.raw`[Ii]ssue #?\d`)],
  ['a numbered stop', new RegExp(String.raw`\b[Ss]to` + String.raw`p \d`)],
  ['a work item', new RegExp(['task', ' item'].join(''))],
  ['a folder outside the checkout', new RegExp(String.raw`\.\./sha` + 'red')],
  ['a section of an outside text', new RegExp('\u00a7')],
];

function files(entry: string): string[] {
  if (statSync(entry).isFile()) return [entry];
  return readdirSync(entry, { withFileTypes: true }).flatMap((d) => {
    const full = path.join(entry, d.name);
    if (d.isDirectory()) return d.name === 'node_modules' ? [] : files(full);
    return TEXT.test(d.name) ? [full] : [];
  });
}

describe('the repository stands alone', () => {
  const all = ROOTS.flatMap(files);

  it('reads the folders it guards', () => {
    expect(all.length).toBeGreaterThan(100);
    expect(all).toContain(path.join('test', 'docs', 'stands-alone.test.ts'));
  });

  it.each(FORBIDDEN)('no file points at %s', (_what, pattern) => {
    const hits = all.flatMap((file) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .flatMap((line, i) => (pattern.test(line) ? [`${file}:${i + 1}: ${line.trim().slice(0, 120)}`] : [])),
    );
    expect(hits).toEqual([]);
  });
});
