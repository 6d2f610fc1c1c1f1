// What the demo's sender plans and reports, shared by the sender (demo.ts) and the ledgers that judge
// a run (ledger.ts, refund-ledger.ts): the refund scenarios a refunded order goes through, and the
// SendReport the sender fills in as it goes (the progress view reads it too).
import type { SentRefund } from './invariants.ts';

/**
 * What a refunded order goes through, and what must come of it (test/local/pipeline-*.test.ts and the
 * ledger judge the end state against it):
 *
 *   partial         one refund of part of the amount                     → one Refund at Stripe
 *   full            one refund of the whole amount                       → net 0
 *   split           two refunds (ids -r1, -r2) summing to the amount     → two Refunds, net 0
 *   repeat          one refund sent three times: twice by the producer (SQS drops the second, same
 *                   deduplication id), once as if after SQS's 5-minute window (a fresh one)
 *                                                                        → one operation, one Refund
 *   conflict        a refund, then the same refund id with another amount (after the window)
 *                                                                        → refund_conflict recorded, nothing sent for it
 *   over_refund     one refund of more than was charged                  → refund_rejected, no Stripe call
 *   before_final    a refund right behind its charge, on a pm_fake_processing order when there is
 *                   one (its charge stays open for a while): it waits, durably, and goes once the
 *                   charge is final                                      → one Refund
 *   failed_charge   a refund of a declined order                         → refund_rejected (or, if it arrived
 *                                                                          while the charge was open, a failed
 *                                                                          refund operation), never sent
 *
 * Every scenario's outcome depends on the charge succeeding (a fault profile may decline any charge):
 * the judgement is always "the net amount is the amount asked minus the refunds made, or zero".
 */
export const REFUND_SCENARIOS = ['partial', 'full', 'split', 'repeat', 'conflict', 'over_refund', 'before_final', 'failed_charge'] as const;
export type RefundScenario = (typeof REFUND_SCENARIOS)[number];

export interface SendReport {
  /** Distinct orders the workload holds (what "settled n / N" counts towards). */
  ordersPlanned: number;
  /** Distinct orders SQS accepted. */
  ordersSent: number;
  /** Orders SQS did not accept after the client's retries (they were never in the pipeline). */
  sendFailures: number;
  /** Their ids, for the lost-order check: every one must end somewhere visible. */
  readonly sentOrderIds: string[];
  /** The refund requests SQS accepted (repeats included), for the lost-refund check: each must end as its refund operation or its rejection. */
  readonly sentRefunds: SentRefund[];
  duplicateSends: number;
  /** Duplicate sends SQS answered with the original MessageId: dropped by FIFO deduplication. */
  duplicatesDroppedBySqs: number;
  lateDuplicates: number;
  readonly badMessages: Record<string, number>;
  /** Refund requests sent (repeats included) and how each scenario's went. */
  readonly refunds: {
    sent: number;
    /** Repeats SQS answered with the original MessageId (deduplicated). */
    droppedBySqs: number;
    /** Sent as if after SQS's window (a fresh deduplication id): the database must absorb them. */
    late: number;
    failures: number;
    /** Refunded order → its scenario (the ledger labels its rows with it). */
    readonly scenarios: Record<string, RefundScenario>;
  };
  /** Order → the second PaymentIntent made behind the pipeline's back (the duplicate remedy's input). */
  readonly duplicateCharges: Record<string, string>;
  /** Messages that really went onto the queue. */
  messagesEnqueued: number;
  firstSendAt: Date | null;
  lastSendAt: Date | null;
  done: boolean;
}

export function emptySendReport(): SendReport {
  return {
    ordersPlanned: 0,
    ordersSent: 0,
    sendFailures: 0,
    sentOrderIds: [],
    sentRefunds: [],
    duplicateSends: 0,
    duplicatesDroppedBySqs: 0,
    lateDuplicates: 0,
    badMessages: {},
    refunds: { sent: 0, droppedBySqs: 0, late: 0, failures: 0, scenarios: {} },
    duplicateCharges: {},
    messagesEnqueued: 0,
    firstSendAt: null,
    lastSendAt: null,
    done: false,
  };
}
