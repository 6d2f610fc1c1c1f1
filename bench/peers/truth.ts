// The ground truth of bench:peers: the fake Stripe's record of every PaymentIntent, set against
// what each contestant's own store says about each order. One checker for every store layout —
// each contestant only translates its rows into a Belief per order.
import type { PaymentIntentRecord } from '../../local/fake-stripe/types.ts';

export type BeliefState = 'succeeded' | 'failed' | 'open' | 'review';

export interface Belief {
  readonly state: BeliefState;
  /** When the store reached a final state or review (epoch ms); null while open. */
  readonly finishedAtMs: number | null;
}

/**
 * What became of one order, worst first:
 * - double: more than one succeeded PaymentIntent;
 * - lost: nothing charged and the store does not know it must still act (it says succeeded, or has
 *   no record and no open work: the message went to a DLQ or was dropped);
 * - unrecorded: charged once, and the store has no record of it (the customer paid; nobody knows);
 * - wrongly_failed: the store says failed, but Stripe charged, or never declined;
 * - open: the store still holds it as pending/unknown/in progress after quiescence;
 * - review: the store handed it to a human;
 * - ok: charged once and recorded as succeeded, or declined and recorded as failed.
 */
export type Verdict = 'double' | 'lost' | 'unrecorded' | 'wrongly_failed' | 'open' | 'review' | 'ok';

export const VERDICTS: readonly Verdict[] = ['double', 'lost', 'unrecorded', 'wrongly_failed', 'open', 'review', 'ok'];

export function judgeOrder(pis: readonly PaymentIntentRecord[], belief: Belief | undefined): Verdict {
  const succeeded = pis.filter((pi) => pi.status === 'succeeded').length;
  if (succeeded > 1) return 'double';
  const declined = pis.some((pi) => pi.status === 'requires_payment_method' || pi.status === 'canceled');
  const state = belief?.state;
  if (state === 'review') return 'review';
  if (state === 'open') return 'open';
  if (succeeded === 1) {
    if (state === 'succeeded') return 'ok';
    if (state === 'failed') return 'wrongly_failed';
    return 'unrecorded';
  }
  // Nothing charged (yet: a processing PaymentIntent counts as not charged).
  if (state === 'failed') return declined ? 'ok' : 'wrongly_failed';
  return 'lost';
}

export interface Judgement {
  readonly counts: Readonly<Record<Verdict, number>>;
  readonly byOrder: ReadonlyMap<string, Verdict>;
}

export function judge(orderIds: readonly string[], paymentIntents: readonly PaymentIntentRecord[], beliefs: ReadonlyMap<string, Belief>): Judgement {
  const byOrderPis = new Map<string, PaymentIntentRecord[]>();
  for (const pi of paymentIntents) {
    const orderId = pi.metadata.order_id;
    if (orderId === undefined) continue;
    const list = byOrderPis.get(orderId) ?? [];
    list.push(pi);
    byOrderPis.set(orderId, list);
  }
  const counts = Object.fromEntries(VERDICTS.map((v) => [v, 0])) as Record<Verdict, number>;
  const byOrder = new Map<string, Verdict>();
  for (const orderId of orderIds) {
    const verdict = judgeOrder(byOrderPis.get(orderId) ?? [], beliefs.get(orderId));
    counts[verdict] += 1;
    byOrder.set(orderId, verdict);
  }
  return { counts, byOrder };
}
