// The real engine on a test file's world, and what the tests build with it.
import { expect } from 'vitest';
import { DEFAULT_POLICY, type EnginePolicy } from '../../lambdas/payments/decisions.ts';
import { ChargeEngine, type EngineOptions } from '../../lambdas/payments/engine.ts';
import type { ChargeInput } from '../../lambdas/payments/types.ts';
import { chargeOrder } from './orders.ts';
import type { World } from './world.ts';

/** The engine as the tests run it: a fixed jitter (random 0.5), actor 'test' unless a file names its own. */
export function testEngine(world: World, options: Partial<EngineOptions> = {}): ChargeEngine {
  return new ChargeEngine({ db: world.db.pool, gateway: world.stripe.gateway, actor: 'test', random: () => 0.5, ...options });
}

/**
 * The List-evidence policy with its durations shortened (settle 150 ms, proofs 200 ms apart,
 * re-issue 400 ms after the last send, backoffs of tens of ms): the tests wait on the database's
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
