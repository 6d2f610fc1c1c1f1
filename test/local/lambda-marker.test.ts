// The local runtime runs the real handlers in-process with local overrides (the fake Stripe over http
// on 127.0.0.1, the fake EventBridge), which the handlers refuse where Lambda's marker,
// AWS_LAMBDA_FUNCTION_NAME, is set. So the runtime never sets it, and refuses to start under it —
// before anything is started. (That it runs with its overrides: test/local/pipeline-none.test.ts.)
import { afterEach, describe, expect, it } from 'vitest';
import { startPipeline } from '../../local/pipeline.ts';

describe('the local runtime is not Lambda', () => {
  afterEach(() => {
    delete process.env.AWS_LAMBDA_FUNCTION_NAME;
  });

  it('refuses to start where AWS_LAMBDA_FUNCTION_NAME is set, in the shell or in its env option, saying what to unset', async () => {
    const options = { postgres: { kind: 'server', adminUrl: 'postgres://nobody@127.0.0.1:1/none' }, stripe: { kind: 'fake' } } as const;
    await expect(startPipeline({ ...options, env: { AWS_LAMBDA_FUNCTION_NAME: 'charge' } })).rejects.toThrow(/^AWS_LAMBDA_FUNCTION_NAME is set: .*unset it to run the pipeline locally/);
    process.env.AWS_LAMBDA_FUNCTION_NAME = 'charge';
    await expect(startPipeline(options)).rejects.toThrow(/^AWS_LAMBDA_FUNCTION_NAME is set/);
  });
});
