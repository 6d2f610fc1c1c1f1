// No import cycles among the repository's own modules, so that a reader can walk the code from the
// bottom up: every module can be read knowing only the modules it imports.
//
// The graph is the static one: every `import … from './x'`, `import './x'`, `export … from './x'` and
// `import x = require('./x')` with a relative specifier, in the TypeScript and JavaScript modules under
// the source folders below (tests are left out: they import the code, the code never imports them).
// Dynamic `import()` is left out: it is a deliberate, late edge, not a dependency of the module's body.
//
// Type-only imports (`import type`, `export type … from`, `import { type X }`) are INCLUDED. They are
// erased at run time, so they cannot cause an initialisation-order cycle, but they tangle reading just
// as much: to understand engine.ts you must read errors.ts and to understand errors.ts, engine.ts.
//
// The failure lists every strongly connected component of more than one module (Tarjan's algorithm)
// with one cycle through it, so a break can be aimed at a real edge.
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const SOURCE_FOLDERS = ['lambdas', 'lib', 'local', 'bin', 'scripts', 'bench'];
const EXTENSIONS = ['.ts', '.mts', '.cts', '.mjs', '.js', '.cjs'];

function sourceFiles(folder: string): string[] {
  const out: string[] = [];
  if (!existsSync(folder)) return out;
  for (const name of readdirSync(folder)) {
    if (name === 'node_modules' || name.startsWith('.')) continue;
    const path = join(folder, name);
    if (statSync(path).isDirectory()) out.push(...sourceFiles(path));
    else if (EXTENSIONS.some((ext) => name.endsWith(ext)) && !name.endsWith('.d.ts')) out.push(path);
  }
  return out;
}

// The clause between `import`/`export` and `from`: names, braces, commas, `*`, `type`, `as` and
// comments, nothing else, so a statement like `export const x = …` never reaches a later `from '…'`.
const CLAUSE = String.raw`(?:[\w\s{},*$]|//[^\n]*|/\*[\s\S]*?\*/)*?`;
const STATIC_IMPORT = [
  new RegExp(String.raw`^[ \t]*(?:import|export)\b${CLAUSE}\bfrom\s*['"]([^'"\n]+)['"]`, 'gm'),
  new RegExp(String.raw`^[ \t]*import\s*['"]([^'"\n]+)['"]`, 'gm'),
  new RegExp(String.raw`^[ \t]*(?:export\s+)?import\s+\w+\s*=\s*require\(\s*['"]([^'"\n]+)['"]\s*\)`, 'gm'),
];

/**
 * Relative specifiers of a module's static imports and re-exports (type-only ones included). A
 * statement must start its line, so imports quoted inside comments (` * import …`) are not taken.
 * The project's TypeScript is the native compiler (7.x), which has no JavaScript parser API, hence
 * the scanner.
 */
function relativeSpecifiers(path: string): string[] {
  const text = readFileSync(path, 'utf8');
  const specifiers: string[] = [];
  for (const pattern of STATIC_IMPORT) {
    for (const match of text.matchAll(pattern)) if (match[1]!.startsWith('.')) specifiers.push(match[1]!);
  }
  return specifiers;
}

/** The file a relative specifier names: as written, with an extension added, or a folder's index. */
function resolveSpecifier(from: string, specifier: string): string | undefined {
  const base = resolve(dirname(from), specifier);
  const candidates = [
    base,
    base.replace(/\.js$/, '.ts'),
    base.replace(/\.mjs$/, '.mts'),
    ...EXTENSIONS.map((ext) => base + ext),
    ...EXTENSIONS.map((ext) => join(base, `index${ext}`)),
  ];
  return candidates.find((candidate) => existsSync(candidate) && statSync(candidate).isFile());
}

function importGraph(): Map<string, string[]> {
  const files = SOURCE_FOLDERS.flatMap((folder) => sourceFiles(join(ROOT, folder)));
  const known = new Set(files);
  const graph = new Map<string, string[]>();
  for (const file of files) {
    const targets = relativeSpecifiers(file)
      .map((specifier) => resolveSpecifier(file, specifier))
      .filter((target): target is string => target !== undefined && known.has(target));
    graph.set(file, [...new Set(targets)]);
  }
  return graph;
}

/** Tarjan's strongly connected components. */
function stronglyConnected(graph: Map<string, string[]>): string[][] {
  let next = 0;
  const index = new Map<string, number>();
  const low = new Map<string, number>();
  const stack: string[] = [];
  const onStack = new Set<string>();
  const components: string[][] = [];
  const visit = (node: string): void => {
    index.set(node, next);
    low.set(node, next);
    next += 1;
    stack.push(node);
    onStack.add(node);
    for (const target of graph.get(node) ?? []) {
      if (!index.has(target)) {
        visit(target);
        low.set(node, Math.min(low.get(node)!, low.get(target)!));
      } else if (onStack.has(target)) {
        low.set(node, Math.min(low.get(node)!, index.get(target)!));
      }
    }
    if (low.get(node) === index.get(node)) {
      const component: string[] = [];
      let member: string;
      do {
        member = stack.pop()!;
        onStack.delete(member);
        component.push(member);
      } while (member !== node);
      components.push(component);
    }
  };
  for (const node of [...graph.keys()].sort()) if (!index.has(node)) visit(node);
  return components;
}

/** One cycle through the component's first module (shortest, by breadth-first search inside it). */
function oneCycle(graph: Map<string, string[]>, component: string[]): string[] {
  const members = new Set(component);
  const start = [...component].sort()[0]!;
  const parent = new Map<string, string>();
  const queue = [start];
  while (queue.length > 0) {
    const node = queue.shift()!;
    for (const target of graph.get(node) ?? []) {
      if (!members.has(target)) continue;
      if (target === start) {
        const path = [node];
        while (path[0] !== start) path.unshift(parent.get(path[0]!)!);
        return [...path, start];
      }
      if (!parent.has(target)) {
        parent.set(target, node);
        queue.push(target);
      }
    }
  }
  return [start];
}

describe('the import graph of lambdas, lib, local, bin, scripts and bench', () => {
  const graph = importGraph();

  it('takes multi-line, type-only, side-effect and re-export statements, not quoted ones', () => {
    const folder = mkdtempSync(join(tmpdir(), 'import-cycles-'));
    const file = join(folder, 'sample.ts');
    writeFileSync(
      file,
      [
        "import {",
        "  a, // the first",
        "  type B,",
        "} from './one.ts';",
        "import type { C } from './two.ts';",
        "import './three.ts';",
        "export * from './four.ts';",
        "export { type D } from '../five.ts';",
        "import x = require('./six.js');",
        "import { readFileSync } from 'node:fs';",
        "// import { no } from './comment.ts';",
        " * import { no } from './doc-comment.ts';",
        "export const text = `import nothing`; const y = Array.from('./not-a-module');",
        "const later = await import('./dynamic.ts');",
      ].join('\n'),
    );
    try {
      expect(relativeSpecifiers(file).sort()).toEqual(
        ['../five.ts', './four.ts', './one.ts', './six.js', './three.ts', './two.ts'].sort(),
      );
    } finally {
      rmSync(folder, { recursive: true, force: true });
    }
  });

  it('is read from the real files (the scanner sees the imports)', () => {
    expect(graph.size).toBeGreaterThan(50);
    const edges = [...graph.values()].reduce((sum, targets) => sum + targets.length, 0);
    expect(edges).toBeGreaterThan(500);
  });

  it('has no cycles', () => {
    const name = (path: string) => relative(ROOT, path);
    const cycles = stronglyConnected(graph)
      .filter((component) => component.length > 1)
      .map((component) => {
        const members = component.map(name).sort().join(', ');
        return `${component.length} modules: ${members}\n    e.g. ${oneCycle(graph, component).map(name).join(' → ')}`;
      })
      .sort();
    expect(cycles, `import cycles:\n${cycles.join('\n')}`).toEqual([]);
  });
});
