// One workload and one fault schedule for every contestant of bench:peers.
//
// The fake Stripe draws its random faults keyed by ORDER (faults.keyBy = 'order'): the k-th create
// request that names an order meets the same fault whichever contestant sends it and whatever
// idempotency key (or none) it uses. faultFor() is that same draw, so a test can say in advance
// which order meets what.
import { mulberry32 } from '../../local/random.ts';
import { drawRandomFault } from '../../local/fake-stripe/faults.ts';
import type { FaultKind, FaultRates } from '../../local/fake-stripe/types.ts';
import type { ChargeRequest } from '../../lambdas/payments/message.ts';

/**
 * Per create request. Every fault the issue names (lost answer after commit, 500 before and after
 * commit, 429, a hang past the client timeout, processing), declines, and the crash: a worker frozen
 * after Stripe executed and before it could write (stall_after_commit, see local/fake-stripe/types.ts).
 */
export const PEER_FAULT_RATES = {
  lost_response_after_commit: 0.03,
  error_500_after_commit: 0.02,
  error_500_before_commit: 0.01,
  rate_limited_429: 0.03,
  hang: 0.01,
  processing: 0.02,
  decline: 0.03,
  stall_after_commit: 0.01,
} as const satisfies FaultRates;

/** The fault the fake gives the `sighting`-th create request naming `orderId` (1 = the first). */
export function faultFor(seed: number, orderId: string, sighting: number, rates: FaultRates = PEER_FAULT_RATES): FaultKind | null {
  return drawRandomFault(seed, rates, `order:${orderId}`, sighting);
}

export interface Send {
  readonly orderId: string;
  /** 0 for the first send of the order, 1 and 2 for the producer's duplicates. */
  readonly copy: number;
}

export interface Workload {
  readonly seed: number;
  readonly orders: readonly ChargeRequest[];
  /** Every message, in the order they are sent (duplicates spread through the run). */
  readonly sends: readonly Send[];
}

/** N orders, each sent 1–3 times, shuffled; the same seed gives the same workload. */
export function makeWorkload(seed: number, n: number, options: { readonly duplicates?: boolean } = {}): Workload {
  const random = mulberry32(seed);
  const orders: ChargeRequest[] = [];
  const sends: Send[] = [];
  for (let i = 0; i < n; i++) {
    const orderId = `peer-${seed}-${String(i).padStart(6, '0')}`;
    orders.push({ orderId, amount: 1000 + Math.floor(random() * 9000), currency: 'eur', customerId: 'cus_peers', paymentMethod: 'pm_card_visa' });
    const copies = options.duplicates === false ? 1 : 1 + Math.floor(random() * 3);
    for (let copy = 0; copy < copies; copy++) sends.push({ orderId, copy });
  }
  for (let i = sends.length - 1; i > 0; i--) {
    const j = Math.floor(random() * (i + 1));
    [sends[i], sends[j]] = [sends[j]!, sends[i]!];
  }
  return { seed, orders, sends };
}
