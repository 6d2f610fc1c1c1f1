// The Lambda bundles as the deploy builds them, for bench:cold and its test: every pipeline handler,
// bundled with the esbuild options lib/pipeline-function.ts gives NodejsFunction (ESM, node24,
// minified, the createRequire banner, everything bundled but pg-native), plus two references:
//   empty — an empty module: what a fresh Node process costs before any of our code;
//   floor — just `stripe`, `pg` and `@aws-sdk/client-eventbridge`: what any charge function pays.
// Sizes are deterministic (same sources, same lock file); times are measured by scripts/bench-cold.ts.
import { mkdir, writeFile } from 'node:fs/promises';
import path from 'node:path';
import { build, type BuildOptions, type Metafile } from 'esbuild';
import { handlerEntry, PIPELINE_HANDLERS, PROJECT_ROOT } from '../lib/pipeline-function.ts';

/** The banner of lib/pipeline-function.ts: esbuild's CommonJS shims call `require` for Node built-ins. */
const ESM_REQUIRE_BANNER =
  "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);";

/** lib/pipeline-function.ts `bundling`, as esbuild options (sourceMap only with `sourceMaps`). */
export function deployBuildOptions(sourceMaps: boolean): BuildOptions {
  return {
    bundle: true,
    platform: 'node',
    format: 'esm',
    target: 'node24',
    mainFields: ['module', 'main'],
    banner: { js: ESM_REQUIRE_BANNER },
    minify: true,
    external: ['pg-native'],
    ...(sourceMaps ? { sourcemap: 'external' as const, sourcesContent: false } : {}),
    metafile: true,
    logLevel: 'error',
  };
}

export const REFERENCE_BUNDLES = {
  empty: 'export {};\n',
  floor: [
    "import Stripe from 'stripe';",
    "import pg from 'pg';",
    "import { EventBridgeClient, PutEventsCommand } from '@aws-sdk/client-eventbridge';",
    'export { Stripe, pg, EventBridgeClient, PutEventsCommand };',
    '',
  ].join('\n'),
} as const;

export interface ColdBundle {
  /** `empty`, `floor`, or a handler folder under lambdas/. */
  readonly name: string;
  readonly kind: 'reference' | 'function';
  /** The bundle on disk (…/<name>/index.mjs, as in the Lambda asset). */
  readonly file: string;
  readonly bytes: number;
  readonly metafile: Metafile;
}

/**
 * Bundle the references and every pipeline handler into `outDir`/<name>/index.mjs. With `baseline`
 * (another checkout of this repository, e.g. an earlier commit extracted with `git archive`, its
 * node_modules linked to these): its handlers too, named `<handler>@baseline`, for a before/after
 * table from one interleaved run.
 */
export async function buildColdBundles(outDir: string, options: { sourceMaps?: boolean; baseline?: string } = {}): Promise<ColdBundle[]> {
  const common = deployBuildOptions(options.sourceMaps ?? false);
  const jobs: { name: string; kind: ColdBundle['kind']; input: BuildOptions; root?: string }[] = [
    ...Object.entries(REFERENCE_BUNDLES).map(([name, contents]) => ({
      name,
      kind: 'reference' as const,
      input: { stdin: { contents, resolveDir: PROJECT_ROOT, sourcefile: `${name}.ts`, loader: 'ts' as const } },
    })),
    ...PIPELINE_HANDLERS.map((handler) => ({ name: handler, kind: 'function' as const, input: { entryPoints: [handlerEntry(handler)] } })),
    ...(options.baseline === undefined
      ? []
      : PIPELINE_HANDLERS.map((handler) => ({
          name: `${handler}@baseline`,
          kind: 'function' as const,
          input: { entryPoints: [path.join(path.resolve(options.baseline!), 'lambdas', handler, 'handler.ts')] },
          root: path.resolve(options.baseline!),
        }))),
  ];
  const bundles: ColdBundle[] = [];
  // One after another: the machine is shared, and esbuild already uses every core for each build.
  for (const job of jobs) {
    const dir = path.join(outDir, job.name);
    await mkdir(dir, { recursive: true });
    const file = path.join(dir, 'index.mjs');
    const root = job.root ?? PROJECT_ROOT;
    const result = await build({ ...common, ...job.input, outfile: file, absWorkingDir: root });
    const output = result.metafile!.outputs[path.relative(root, file)];
    if (!output) throw new Error(`esbuild wrote no ${file}`);
    bundles.push({ name: job.name, kind: job.kind, file, bytes: output.bytes, metafile: result.metafile! });
  }
  await writeFile(path.join(outDir, 'package.json'), '{"type":"module"}\n');
  return bundles;
}

/** Bytes of `bundle` per package (node_modules/<name>) or per first two path segments of our own files. */
export function bytesByPackage(bundle: ColdBundle): { name: string; bytes: number }[] {
  const output = Object.values(bundle.metafile.outputs).find((o) => o.entryPoint !== undefined || Object.keys(o.inputs).length > 0);
  const totals = new Map<string, number>();
  for (const [input, { bytesInOutput }] of Object.entries(output?.inputs ?? {})) {
    const pkg = input.match(/node_modules\/((?:@[^/]+\/)?[^/]+)/)?.[1];
    const name = pkg ?? input.split('/').slice(0, 2).join('/');
    totals.set(name, (totals.get(name) ?? 0) + bytesInOutput);
  }
  return [...totals].map(([name, bytes]) => ({ name, bytes })).sort((a, b) => b.bytes - a.bytes);
}
