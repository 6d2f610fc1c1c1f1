// What the Lambda service gives a handler, locally: the context object (request id, names, the
// clock of getRemainingTimeInMillis) and the timeout. The handlers run UNCHANGED in this process:
// same module, same environment variables, called with the same arguments as on AWS.
//
// One difference cannot be emulated in-process: when an invocation times out, Lambda stops the
// runtime and its pending work dies with it; here the handler's promise keeps running in the
// background (a "zombie"). Its late writes are what the lease fence exists for, so the product copes
// either way; the runtime keeps track of such promises so that a shutdown still waits for them.
import { randomUUID } from 'node:crypto';
import type { Context } from 'aws-lambda';

/** The account id fauxqs and the fakes use in their ARNs. */
export const LOCAL_ACCOUNT_ID = '000000000000';

export interface FunctionSettings {
  readonly functionName: string;
  readonly region: string;
  readonly timeoutMs: number;
  readonly memoryLimitInMB?: number;
}

export function createLambdaContext(settings: FunctionSettings, requestId: string = randomUUID()): Context {
  const deadline = Date.now() + settings.timeoutMs;
  const name = settings.functionName;
  const day = new Date().toISOString().slice(0, 10).replaceAll('-', '/');
  const unsupported = (what: string) => () => {
    throw new Error(`context.${what}() is a Node 0.10 callback API the local runtime does not emulate: return a promise`);
  };
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: name,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:${settings.region}:${LOCAL_ACCOUNT_ID}:function:${name}`,
    memoryLimitInMB: String(settings.memoryLimitInMB ?? 1024),
    awsRequestId: requestId,
    logGroupName: `/aws/lambda/${name}`,
    logStreamName: `${day}/[$LATEST]${requestId.replaceAll('-', '')}`,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: unsupported('done'),
    fail: unsupported('fail'),
    succeed: unsupported('succeed'),
  };
}

export class FunctionTimeoutError extends Error {
  override readonly name = 'FunctionTimeoutError';
  constructor(functionName: string, timeoutMs: number) {
    // The message Lambda writes to the function's log.
    super(`${functionName}: Task timed out after ${(timeoutMs / 1000).toFixed(2)} seconds`);
  }
}

export type InvocationResult<T> =
  | { readonly kind: 'returned'; readonly value: T; readonly durationMs: number }
  | { readonly kind: 'threw'; readonly error: unknown; readonly durationMs: number }
  | { readonly kind: 'timed_out'; readonly error: FunctionTimeoutError; readonly durationMs: number };

/**
 * Runs one invocation under the function's timeout. Never throws. `background` receives the handler's
 * own promise when it outlives the timeout, so a caller can wait for it at shutdown.
 */
export async function invoke<E, T>(
  handler: (event: E, context: Context) => Promise<T>,
  event: E,
  settings: FunctionSettings,
  background?: (stillRunning: Promise<unknown>) => void,
): Promise<InvocationResult<T>> {
  const context = createLambdaContext(settings);
  const started = performance.now();
  const elapsed = () => Math.round(performance.now() - started);
  let running: Promise<T>;
  try {
    running = Promise.resolve(handler(event, context));
  } catch (error) {
    // A handler that throws synchronously (not async) fails the invocation the same way.
    return { kind: 'threw', error, durationMs: elapsed() };
  }
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<'timeout'>((resolve) => {
    timer = setTimeout(() => resolve('timeout'), settings.timeoutMs);
  });
  try {
    const first = await Promise.race([running.then((value) => ({ value })), timeout]);
    if (first === 'timeout') {
      background?.(running.catch(() => undefined));
      return { kind: 'timed_out', error: new FunctionTimeoutError(settings.functionName, settings.timeoutMs), durationMs: elapsed() };
    }
    return { kind: 'returned', value: first.value, durationMs: elapsed() };
  } catch (error) {
    return { kind: 'threw', error, durationMs: elapsed() };
  } finally {
    clearTimeout(timer);
  }
}
