// The real engine on a test file's world, and what the tests build with it.
import type { Pool } from 'pg';
import { expect } from 'vitest';
import { DEFAULT_POLICY, type EnginePolicy } from '../../lambdas/payments/decisions.ts';
import { ChargeEngine, type EngineOptions } from '../../lambdas/payments/engine.ts';
import type { Execution } from '../../lambdas/payments/request-results.ts';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { chargeOrder } from './orders.ts';
import type { World } from './world.ts';

/** The engine as the tests run it: a fixed jitter (random 0.5), actor 'test' unless a file names its own. */
export function testEngine(world: World, options: Partial<EngineOptions> = {}): ChargeEngine {
  return new ChargeEngine({ db: world.db.pool, gateway: world.stripe.gateway, actor: 'test', random: () => 0.5, ...options });
}

/**
 * The List-evidence policy with its durations shortened (settle 150 ms, proofs 200 ms apart,
 * a re-issue at 400 ms after the last send, backoffs of tens of ms): the tests wait on the database's
 * clock until an operation is due, never assert on time.
 */
export const FAST_LIST_POLICY: Partial<EnginePolicy> = {
  listSettleMs: 150,
  listWindowMarginMs: 2_000,
  proofSpacingMs: 200,
  reissueAfterLastSendMs: 400,
  backoff: { ...DEFAULT_POLICY.backoff, ambiguous: { baseMs: 20, capMs: 50 }, rateLimited: { baseMs: 20, capMs: 50 }, configuration: { baseMs: 20, capMs: 50 } },
};

/** An order charged (succeeded) through the engine: requested, executed, and the success asserted. */
export async function chargedOrder(engine: ChargeEngine, input: ChargeInput = chargeOrder()): Promise<{ input: ChargeInput; chargeId: string }> {
  const chargeId = await engine.requestCharge(input);
  expect((await engine.executeCharge(chargeId)).status).toBe('succeeded');
  return { input, chargeId };
}

/** Wait (database clock) until `sql` — a boolean query about `id` — holds, or give up after ~10 s: never an assertion on time. */
export async function untilTrue(db: Pool, sql: string, id: string, what: string): Promise<void> {
  for (let i = 0; i < 500; i++) {
    const { rows } = await db.query<{ ok: boolean }>(sql, [id]);
    if (rows[0]?.ok) return;
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
  throw new Error(`${what} (${id}) never came`);
}

/** Wait until the operation is due (database clock). */
export const untilOperationDue = (db: Pool, id: string) =>
  untilTrue(db, 'SELECT next_attempt_at IS NULL OR next_attempt_at <= now() AS ok FROM payment_operations WHERE id = $1', id, 'operation due');

/** Run the operation the way the reconciler would, claim after claim, until final or in review. */
export async function driveOperation(db: Pool, engine: ChargeEngine, id: string, maxClaims = 60): Promise<Execution[]> {
  const executions: Execution[] = [];
  for (let i = 0; i < maxClaims; i++) {
    await untilOperationDue(db, id);
    executions.push(await engine.executeCharge(id));
    const { rows } = await db.query<{ status: string; review_reason: string | null }>('SELECT status, review_reason FROM payment_operations WHERE id = $1', [id]);
    const r = rows[0]!;
    if (r.status === 'succeeded' || r.status === 'failed' || r.review_reason !== null) return executions;
  }
  throw new Error(`operation ${id} still open after ${maxClaims} claims: ${executions.map((x) => x.step ?? x.disposition).join(' → ')}`);
}

/** The steps a drive took ('wait' for a deferred claim). */
export const stepsOf = (executions: readonly Execution[]) => executions.map((x) => (x.disposition === 'deferred' ? 'wait' : (x.step ?? x.disposition)));
