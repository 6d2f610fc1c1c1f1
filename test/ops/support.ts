// Shared by the ops tests: the CLI run in-process against a test database and the fake Stripe, and
// the scenarios that put an operation into review through the REAL engine (never hand-written rows).
import { idempotencyKey } from '../../lambdas/payments/decisions.ts';
import type { ChargeEngine, EngineOptions } from '../../lambdas/payments/engine.ts';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { main } from '../../lambdas/ops/cli.ts';
import type { OpsResponse } from '../../lambdas/ops/commands.ts';
import type { ResultOf } from '../../lambdas/ops/results.ts';
import type { TestDatabase } from '../support/db.ts';
import type { StripeHarness } from '../support/stripe.ts';
import { testEngine } from '../support/engine.ts';
import { chargeOrder } from '../support/orders.ts';

export interface CliRun {
  readonly code: number;
  readonly stdout: string;
  readonly stderr: string;
}

export interface Harness {
  readonly db: TestDatabase;
  readonly stripe: StripeHarness;
}

/** The environment an operator's shell would have, pointed at the test database and the fake. */
export function opsEnv(h: Harness, extra: Record<string, string> = {}): NodeJS.ProcessEnv {
  return {
    DATABASE_URL: h.db.url,
    STRIPE_SECRET_KEY: 'sk_test_ops',
    STRIPE_API_BASE: h.stripe.fake.url,
    STRIPE_MAX_NETWORK_RETRIES: '0',
    STRIPE_TIMEOUT_MS: '3000',
    // The fake's Search has no lag unless a test sets one; the settle wait is tested on its own.
    OPS_SEARCH_SETTLE_MS: '0',
    USER: 'alice',
    ...extra,
  };
}

export async function cli(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<CliRun> {
  const out: string[] = [];
  const err: string[] = [];
  const code = await main(argv, env, { out: (l) => out.push(l), err: (l) => err.push(l) });
  return { code, stdout: out.join('\n'), stderr: err.join('\n') };
}

/** Run with --json and return the parsed OpsResponse (and the exit code). */
export async function cliJson(argv: readonly string[], env: NodeJS.ProcessEnv): Promise<{ code: number; response: OpsResponse }> {
  const run = await cli([...argv, '--json'], env);
  return { code: run.code, response: JSON.parse(run.stdout) as OpsResponse };
}

/** The result of a successful command, typed; fails the test with the error otherwise. */
export function resultOf<K extends keyof ResultOf>(response: OpsResponse, command: K): ResultOf[K] {
  if (!response.ok) throw new Error(`expected ${command} to succeed, got ${response.error.code}: ${response.error.message}`);
  if (response.command !== command) throw new Error(`expected ${command}, got ${response.command}`);
  return response.result as ResultOf[K];
}

export const order = (overrides: Partial<ChargeInput> = {}): ChargeInput => chargeOrder(overrides);

export function engine(h: Harness, options: Partial<EngineOptions> = {}): ChargeEngine {
  return testEngine(h, { actor: 'test-engine', ...options });
}

/** Pretend the first send happened a day ago: the key window is over, the next claim searches. */
export const windowExpired = (h: Harness, id: string) =>
  h.db.pool.query(`UPDATE payment_operations SET first_attempted_at = now() - interval '24 hours', next_attempt_at = now() WHERE id = $1`, [id]);

export async function reviewReason(h: Harness, id: string): Promise<string | null> {
  const { rows } = await h.db.pool.query<{ review_reason: string | null }>('SELECT review_reason FROM payment_operations WHERE id = $1', [id]);
  return rows[0]!.review_reason;
}

/**
 * Nothing was charged: the first create met a 500 before Stripe executed it (and the 500 is replayed
 * for the key's life), the key was pruned, the window expired, Search found nothing → review.
 */
export async function intoReviewNothingCharged(h: Harness, input: ChargeInput = order()): Promise<string> {
  // The Search path (AMBIGUOUS_RESOLUTION=review): with List evidence the machine would re-issue itself.
  const e = engine(h, { policy: { ambiguousResolution: 'review' } });
  const id = await e.requestCharge(input);
  h.stripe.fake.injectFault({ operationId: id }, 'error_500_before_commit');
  await e.executeCharge(id);
  h.stripe.fake.pruneKeys();
  await windowExpired(h, id);
  await e.executeCharge(id);
  if (!(await reviewReason(h, id))?.includes('found no PaymentIntent')) throw new Error('scenario did not reach review');
  return id;
}

/**
 * Charged, but the engine could not see it: the answer was lost after Stripe committed, and when the
 * window expired Search lagged behind and found nothing → review, while a succeeded PaymentIntent exists.
 */
export async function intoReviewChargedUnseen(h: Harness, input: ChargeInput = order()): Promise<{ id: string; paymentIntentId: string }> {
  // The Search path (AMBIGUOUS_RESOLUTION=review): List, being real time, would have found the charge.
  const e = engine(h, { policy: { ambiguousResolution: 'review' } });
  const id = await e.requestCharge(input);
  h.stripe.fake.injectFault({ operationId: id }, 'truncated_response_after_commit');
  await e.executeCharge(id);
  h.stripe.fake.pruneKeys();
  await windowExpired(h, id);
  h.stripe.fake.setSearchLag(3_600_000);
  try {
    await e.executeCharge(id);
  } finally {
    h.stripe.fake.setSearchLag(0);
  }
  if (!(await reviewReason(h, id))?.includes('found no PaymentIntent')) throw new Error('scenario did not reach review');
  const pis = h.stripe.fake.paymentIntents({ operationId: id });
  if (pis.length !== 1 || pis[0]!.status !== 'succeeded') throw new Error('expected one succeeded PaymentIntent');
  return { id, paymentIntentId: pis[0]!.id };
}

/** A PaymentIntent that stays `processing` past the engine's patience → review with its external id. */
export async function intoReviewProcessing(h: Harness): Promise<{ id: string; paymentIntentId: string }> {
  const e = engine(h, { policy: { unsettledReviewAfterMs: 0 } });
  const id = await e.requestCharge(order({ paymentMethod: 'pm_fake_processing' }));
  await e.executeCharge(id);
  if (!(await reviewReason(h, id))?.includes('still processing')) throw new Error('scenario did not reach review');
  return { id, paymentIntentId: h.stripe.fake.paymentIntents({ operationId: id })[0]!.id };
}

/**
 * Somebody used the operation's key with another amount (a bug in key use): Stripe made a
 * PaymentIntent for THAT request; the engine's create meets idempotency_error → review.
 */
export async function intoReviewKeyMisused(h: Harness): Promise<{ id: string; input: ChargeInput; roguePaymentIntentId: string }> {
  const input = order();
  const e = engine(h);
  const id = await e.requestCharge(input);
  const rogue = await h.stripe.gateway.createPaymentIntent({
    idempotencyKey: idempotencyKey(id, 0),
    amount: input.amount + 100,
    currency: input.currency,
    customerId: input.customerId,
    paymentMethod: input.paymentMethod,
    metadata: { operation_id: id, order_id: input.orderId, key_generation: '0' },
  });
  if (!rogue.ok) throw new Error('rogue create failed');
  await e.executeCharge(id);
  if (!(await reviewReason(h, id))?.includes('idempotency key')) throw new Error('scenario did not reach review');
  return { id, input, roguePaymentIntentId: rogue.value.id };
}

export async function auditEvents(h: Harness, id: string) {
  const { rows } = await h.db.pool.query<{
    id: string;
    actor: string;
    action: string;
    from_status: string | null;
    to_status: string | null;
    key_generation: number | null;
    external_id: string | null;
    detail: Record<string, unknown>;
  }>('SELECT * FROM payment_operation_events WHERE operation_id = $1 ORDER BY id', [id]);
  return rows;
}

export async function operationRow(h: Harness, id: string) {
  const { rows } = await h.db.pool.query('SELECT * FROM payment_operations WHERE id = $1', [id]);
  return rows[0];
}

export async function outboxRows(h: Harness, id: string) {
  const { rows } = await h.db.pool.query<{ event_id: string; event_type: string; payload: Record<string, unknown>; published_at: Date | null }>(
    'SELECT e.*, e.payload FROM outcome_events e WHERE operation_id = $1 ORDER BY created_at, event_id',
    [id],
  );
  return rows;
}

/** Creates sent to Stripe for the operation, with their idempotency keys, in order. */
export const createKeys = (h: Harness, id: string) =>
  h.stripe.fake
    .requests()
    .filter((r) => r.endpoint === 'create' && r.operationId === id)
    .map((r) => r.idempotencyKey);
