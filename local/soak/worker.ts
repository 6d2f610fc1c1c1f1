// A soak worker: one "Lambda container" in its own process, running the UNCHANGED charge or reconcile
// handler (lambdas/*/handler.ts, configured from the environment it inherits). The soak's parent
// sends it one invocation at a time over IPC and SIGKILLs it — or tells it where to SIGKILL itself:
//
//   before_claim   just before the statement that claims (request_and_claim, request_refund_and_claim,
//                  claim_due) is sent
//   after_claim    after the claim committed, just before the first Stripe request leaves
//   in_flight      once the first Stripe request is on the wire (the fake holds its key meanwhile)
//   after_answer   after Stripe answered, just before the outcome statement (record_outcomes) is sent
//
// The points are found from outside the product code: the pg client's named statements and the
// http.request that stripe-node makes (stripe-node itself supports patching http.request — it reads
// `http.default` for that reason). A kill is a real SIGKILL: no finally, no socket close, no rollback.
import http from 'node:http';
import path from 'node:path';
import pg from 'pg';
import type { Context } from 'aws-lambda';

export type KillPoint = 'before_claim' | 'after_claim' | 'in_flight' | 'after_answer';

export interface InvokeMessage {
  readonly type: 'invoke';
  readonly id: number;
  readonly fn: 'charge' | 'reconcile';
  readonly event: unknown;
  readonly remainingMs: number;
  /** Die at this point of this invocation (if it gets there). */
  readonly killAt: KillPoint | null;
}

export type WorkerReply =
  | { readonly type: 'ready' }
  | { readonly type: 'result'; readonly id: number; readonly ok: true; readonly value: unknown }
  | { readonly type: 'result'; readonly id: number; readonly ok: false; readonly error: string }
  /** Sent just before a planned self-kill (may not arrive: the parent also reads the exit signal). */
  | { readonly type: 'dying'; readonly id: number; readonly point: KillPoint };

// A refund request is made durable and claimed by its own statement (operations-store.ts requestRefundAndClaim).
const CLAIM_STATEMENTS = new Set(['payments.request_and_claim', 'payments.request_and_claim_on_conflict', 'payments.request_refund_and_claim', 'payments.claim_due']);
const RECORD_STATEMENT = 'payments.record_outcomes';

let current: InvokeMessage | null = null;

function die(point: KillPoint): never {
  if (current) process.send?.({ type: 'dying', id: current.id, point } satisfies WorkerReply);
  process.kill(process.pid, 'SIGKILL');
  // Unreachable: SIGKILL cannot be caught. Keep the type checker (and any surprise) honest.
  throw new Error('SIGKILL did not kill');
}

// ── The hooks ────────────────────────────────────────────────────────────────────────────────────

const originalQuery = pg.Client.prototype.query;
pg.Client.prototype.query = function patchedQuery(this: pg.Client, ...args: unknown[]) {
  const config = args[0] as { name?: unknown } | string | undefined;
  const name = typeof config === 'object' && config !== null && typeof config.name === 'string' ? config.name : null;
  if (current?.killAt === 'before_claim' && name !== null && CLAIM_STATEMENTS.has(name)) die('before_claim');
  if (current?.killAt === 'after_answer' && name === RECORD_STATEMENT) die('after_answer');
  return (originalQuery as (...a: unknown[]) => unknown).apply(this, args);
} as typeof pg.Client.prototype.query;

const stripeBase = process.env.STRIPE_API_BASE ? new URL(process.env.STRIPE_API_BASE) : null;
const originalRequest = http.request;
http.request = function patchedRequest(...args: unknown[]) {
  const options = args[0] as { host?: string; hostname?: string; port?: number | string; path?: string } | undefined;
  const toStripe =
    stripeBase !== null &&
    typeof options === 'object' &&
    options !== null &&
    String(options.port) === stripeBase.port &&
    (options.host === stripeBase.hostname || options.hostname === stripeBase.hostname) &&
    typeof options.path === 'string' &&
    options.path.startsWith('/v1/');
  if (toStripe && current?.killAt === 'after_claim') die('after_claim');
  const req = (originalRequest as (...a: unknown[]) => http.ClientRequest).apply(http, args);
  if (toStripe && current?.killAt === 'in_flight') {
    // The whole request is written: a moment later it is at the fake, which holds its key while it works.
    const id = current.id;
    req.once('finish', () =>
      setTimeout(() => {
        if (current?.id === id) die('in_flight');
      }, 2),
    );
  }
  return req;
} as typeof http.request;

// ── The container ────────────────────────────────────────────────────────────────────────────────

type Handler = (event: unknown, context: Context) => Promise<unknown>;

const lambdasDir = process.env.SOAK_LAMBDAS_DIR ?? path.resolve(import.meta.dirname, '..', '..', 'lambdas');
const handlers = new Map<string, Promise<Handler>>();
function load(fn: 'charge' | 'reconcile'): Promise<Handler> {
  let loaded = handlers.get(fn);
  if (!loaded) {
    loaded = import(path.join(lambdasDir, fn, 'handler.ts')).then((m: { handler: Handler }) => m.handler);
    handlers.set(fn, loaded);
  }
  return loaded;
}

function context(fn: string, id: number, remainingMs: number): Context {
  const deadline = Date.now() + remainingMs;
  const requestId = `soak-${process.pid}-${id}`;
  const no = () => {
    throw new Error('callback API not supported');
  };
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: fn,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:us-east-1:000000000000:function:${fn}`,
    memoryLimitInMB: '1024',
    awsRequestId: requestId,
    logGroupName: `/aws/lambda/${fn}`,
    logStreamName: requestId,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: no,
    fail: no,
    succeed: no,
  };
}

process.on('message', (message: InvokeMessage) => {
  if (message?.type !== 'invoke') return;
  current = message;
  void (async () => {
    let reply: WorkerReply;
    try {
      const handler = await load(message.fn);
      const value = await handler(message.event, context(message.fn, message.id, message.remainingMs));
      reply = { type: 'result', id: message.id, ok: true, value: value ?? null };
    } catch (error) {
      reply = { type: 'result', id: message.id, ok: false, error: error instanceof Error ? `${error.name}: ${error.message}` : String(error) };
    }
    current = null;
    process.send?.(reply);
  })();
});

// Warm up (a cold start loads the AWS SDK, Powertools, stripe…), then say so.
const warm = process.env.SOAK_WORKER_FN === 'reconcile' ? 'reconcile' : 'charge';
void load(warm).then(
  () => process.send?.({ type: 'ready' } satisfies WorkerReply),
  (error: unknown) => {
    console.error(`soak worker: cannot load the ${warm} handler:`, error);
    process.exit(1);
  },
);
