// docs/configuration.md is checked against the code, not against a list kept beside it: every
// environment variable a function (or a CLI under lambdas/) reads, and every prop of the
// ChargePipeline construct, must have its row there. The names are read from the source text.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DOCS_DIR, PROJECT_ROOT, proseLines } from './markdown.ts';

const doc = readFileSync(path.join(DOCS_DIR, 'configuration.md'), 'utf8');

/** Names in backticks on the table rows of the page (`| \`NAME\` | …`, also `\`A\`, \`B\`` in one cell). */
function documentedNames(markdown: string): Set<string> {
  const names = new Set<string>();
  for (const { text } of proseLines(markdown)) {
    const firstCell = /^\|\s*([^|]+?)\s*\|/.exec(text)?.[1];
    if (!firstCell) continue;
    for (const m of firstCell.matchAll(/`([^`]+)`/g)) names.add(m[1]!);
  }
  return names;
}

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { recursive: true, withFileTypes: true })
    .filter((entry) => entry.isFile() && entry.name.endsWith('.ts'))
    .map((entry) => path.join(entry.parentPath, entry.name));
}

/**
 * Environment variables read in a source text: `process.env.NAME`, `env.NAME`, `env['NAME']`, and
 * the config helpers' `(env, 'NAME', …)` (lambdas/runtime/config.ts reads most values that way).
 */
export function environmentVariablesRead(source: string): Set<string> {
  const names = new Set<string>();
  const patterns = [
    /\benv\.([A-Z][A-Z0-9_]*)\b/g,
    /\benv\[\s*['"]([A-Z][A-Z0-9_]*)['"]\s*\]/g,
    /\(\s*env\s*,\s*['"]([A-Z][A-Z0-9_]*)['"]/g,
  ];
  for (const pattern of patterns) for (const m of source.matchAll(pattern)) names.add(m[1]!);
  return names;
}

/** The property names of an exported interface, from its source text. */
export function interfaceProps(source: string, name: string): string[] {
  const start = source.indexOf(`export interface ${name} {`);
  if (start < 0) throw new Error(`interface ${name} not found`);
  const end = source.indexOf('\n}', start);
  const body = source.slice(start, end);
  return [...body.matchAll(/^\s*readonly\s+(\w+)\??\s*:/gm)].map((m) => m[1]!);
}

const lambdaSources = sourceFiles(path.join(PROJECT_ROOT, 'lambdas'));
const variables = [...new Set(lambdaSources.flatMap((file) => [...environmentVariablesRead(readFileSync(file, 'utf8'))]))].sort();
const props = interfaceProps(readFileSync(path.join(PROJECT_ROOT, 'lib/charge-pipeline-props.ts'), 'utf8'), 'ChargePipelineProps');
const documented = documentedNames(doc);

describe('reading the names from the source', () => {
  it('finds every way the code reads a variable', () => {
    const sample = [
      "const a = process.env.ALPHA_ONE;",
      "integer(env, 'BRAVO_MS', 10, 1);",
      "oneOf(env, 'CHARLIE', ['x'], 'x');",
      "const d = env['DELTA'];",
      "const e = someEnv.NOT_THIS; const f = environment.NOR_THIS;",
    ].join('\n');
    expect([...environmentVariablesRead(sample)].sort()).toEqual(['ALPHA_ONE', 'BRAVO_MS', 'CHARLIE', 'DELTA']);
  });

  it('finds the variables of lambdas/runtime/config.ts and the construct props', () => {
    const config = environmentVariablesRead(readFileSync(path.join(PROJECT_ROOT, 'lambdas/runtime/config.ts'), 'utf8'));
    for (const known of ['DATABASE_URL', 'DB_POOL_MAX', 'KEY_WINDOW_MS', 'RECONCILE_MAX_RPS', 'RETRY_BACKOFF_SCALE']) expect(config).toContain(known);
    expect(config.size).toBeGreaterThan(30);
    expect(props).toEqual(expect.arrayContaining(['vpc', 'chargeMaxConcurrency', 'logRetention']));
    expect(props.length).toBeGreaterThan(30);
  });

  it('reads only the first cell of a table row as the documented name', () => {
    const names = documentedNames('| `A` | `B` default |\n| `C`, `D` | x |\ntext `E`\n```\n| `F` |\n```\n');
    expect([...names].sort()).toEqual(['A', 'C', 'D']);
  });
});

describe('docs/configuration.md', () => {
  it('has a row for every environment variable read under lambdas/', () => {
    expect(variables.filter((name) => !documented.has(name))).toEqual([]);
  });

  it('has a row for every prop of ChargePipelineProps', () => {
    expect(props.filter((name) => !documented.has(name))).toEqual([]);
  });
});
