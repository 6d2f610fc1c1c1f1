// bench:peers' dependencies are devDependencies for the benchmark only: no Lambda bundle may contain
// them (nor anything under bench/). Each handler is bundled with esbuild the way PipelineFunction
// bundles it (ESM, node24, everything bundled but pg-native) and its metafile inputs are checked.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { build } from 'esbuild';
import { describe, expect, test } from 'vitest';
import { handlerEntry, PIPELINE_HANDLERS, PROJECT_ROOT } from '../../lib/pipeline-function.ts';

const PEER_ONLY = ['@aws-lambda-powertools/batch', '@aws-lambda-powertools/idempotency', '@aws-sdk/client-dynamodb', '@aws-sdk/util-dynamodb', 'dynalite', '@dbos-inc/dbos-sdk', '@aws/durable-execution-sdk-js', '@aws/durable-execution-sdk-js-testing'];

describe('bench:peers dependencies stay out of the Lambda bundles', () => {
  test('they are devDependencies, and bench/ is not in the published package', () => {
    const pkg = JSON.parse(readFileSync(path.join(PROJECT_ROOT, 'package.json'), 'utf8')) as {
      dependencies?: Record<string, string>;
      peerDependencies?: Record<string, string>;
      devDependencies: Record<string, string>;
      files?: string[];
    };
    for (const name of PEER_ONLY) {
      expect(pkg.dependencies?.[name], name).toBeUndefined();
      expect(pkg.peerDependencies?.[name], name).toBeUndefined();
      expect(pkg.devDependencies[name], name).toBeDefined();
    }
    expect((pkg.files ?? []).filter((f) => f.startsWith('bench'))).toEqual([]);
  });

  test.each(PIPELINE_HANDLERS)('the %s bundle', async (handler) => {
    const result = await build({
      entryPoints: [handlerEntry(handler)],
      bundle: true,
      platform: 'node',
      format: 'esm',
      target: 'node24',
      mainFields: ['module', 'main'],
      external: ['pg-native'],
      write: false,
      metafile: true,
      logLevel: 'silent',
    });
    const inputs = Object.keys(result.metafile.inputs);
    expect(inputs.some((i) => i.startsWith('lambdas/'))).toBe(true); // the check sees real inputs
    const leaked = inputs.filter((i) => i.startsWith('bench/') || PEER_ONLY.some((name) => i.includes(`node_modules/${name}/`)));
    expect(leaked).toEqual([]);
  }, 60_000);
});
