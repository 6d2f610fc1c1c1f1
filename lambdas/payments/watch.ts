// The watch after a re-issue, as pure decisions: what one look at a re-issued operation's objects at
// Stripe means, and when to look again. No I/O here (watcher.ts is the I/O, watch-store.ts the SQL).
//
// Why a watch: a re-issue sends a new key because List proved twice that nothing of the old one
// exists. That proof is only as good as "Stripe has finished with the old key". A request Stripe
// answered with a 500 or a timeout may still be committed later; then the order is charged (or
// refunded) twice — and with Stripe events off (polling only) nothing else would ever look again,
// because a final operation is never claimed. So every re-issued operation is looked at again:
//
//   re-issue ─ REISSUE_WATCH_FIRST_AFTER_MS (1 h) ─▶ look ─ … ─▶ look once the retired generation's key
//   is past Stripe's retention (REISSUE_WATCH_FINAL_AFTER_MS = 25 h after its first send) ─▶ closed
//
// and for as long as any object it finds may still move money (processing, pending). A look lists the
// kind's objects from the operation's first send to the moment of the look (every generation), and:
//   - a charge that succeeded with one PaymentIntent: any other succeeded PaymentIntent of the
//     operation is handed to the duplicate-charge remedy (decisions.ts judgeDuplicateCharge, the one
//     rule); one it refuses (another amount, customer) is a finding;
//   - a charge that failed: a succeeded PaymentIntent of the operation is a finding (the order was
//     announced failed and is charged);
//   - a charge, succeeded or failed: another PaymentIntent of it held (`requires_capture`, a manual
//     capture's late first commit) is a finding at once — the customer's funds are held twice, and
//     nothing here captures or releases another PaymentIntent — and the watch goes on until it settles;
//   - a refund: a second Refund of the operation that is or may become money back is a finding
//     (`refunded_twice`) and an alarm — no machine can take a refund back (docs/runbook.md);
//   - an operation still open is not judged: the engine's own evidence (its List reads every
//     generation) covers it; the watch looks again later;
//   - an operation in review is looked at and changes nothing: every object of it that holds or may
//     move money is a finding (its review may rest on a proof of absence that a late commit has since
//     contradicted — the person deciding must see what Stripe holds now), and the watch goes on every
//     REISSUE_WATCH_FIRST_AFTER_MS for as long as the review lasts.
// Events make this faster (a late object's webhook reaches the remedy in seconds); the watch makes it
// correct without them.
import { backoffDelay, DEFAULT_POLICY, formatDuration, judgeDuplicateCharge, KIND_RULES, type DuplicateRemedy, type EnginePolicy, type ListWindow } from './decisions.ts';
import type { ListAnswer } from './gateway.ts';
import type { Operation, PaymentIntentView } from './types.ts';

/** A watch row as the look sees it (payment_operation_watches). */
export interface WatchState {
  readonly operationId: string;
  /** The operation's earliest send (key generation 0's first): every look lists from here. */
  readonly watchedFrom: Date;
  readonly reissuedAt: Date;
  readonly finalCheckAt: Date;
  /** Looks made so far (a look deferred because the operation was open does not count). */
  readonly checks: number;
  /** Looks in a row that could not read their list to its end. */
  readonly failures: number;
}

/** A watched operation claimed for one look, with the database clock at the claim. */
export interface WatchedOperation {
  readonly watch: WatchState;
  readonly op: Operation;
  /** For a refund: its charge's PaymentIntent (what a refund of the charge refunds). */
  readonly chargePaymentIntentId: string | null;
  readonly claimedAt: Date;
  readonly leaseToken: string;
}

/** Something a look found that a person must see. One per object (kind, object id), like an event's finding. */
export interface WatchFinding {
  readonly kind: 'contradiction' | 'refunded_twice' | 'watch_blind';
  /** The object the finding is about (a PaymentIntent or a Refund id), or the operation's id when there is none. */
  readonly objectId: string;
  readonly amount: number | null;
  readonly currency: string | null;
  readonly status: string | null;
  readonly reason: string;
}

export type WatchLook =
  /** Not looked at (the operation is open or in review): look again at `nextCheckAt`. */
  | { readonly kind: 'later'; readonly nextCheckAt: Date; readonly reason: string }
  /** Looked: what it found, and the next look (null: the watch is over). */
  | {
      readonly kind: 'looked';
      readonly remedies: readonly DuplicateRemedy[];
      readonly findings: readonly WatchFinding[];
      /** Objects of the operation that may still move money: the watch stays until they settle. */
      readonly unsettled: readonly string[];
      readonly nextCheckAt: Date | null;
      /** The last look, moved later when a newer generation's key must age too. */
      readonly finalCheckAt: Date;
      readonly detail: Readonly<Record<string, unknown>>;
    }
  /** The list could not be read to its end: look again; after MAX_WATCH_FAILURES in a row, a finding and the watch closes. */
  | { readonly kind: 'failed'; readonly nextCheckAt: Date | null; readonly finding: WatchFinding | null; readonly reason: string };

/** Looks in a row that could not read their list before the watch gives up with a finding (a person looks by hand). */
export const MAX_WATCH_FAILURES = 5;

const WATCH_POLICY_FIELDS = ['watchFirstAfterMs', 'watchFinalAfterFirstSendMs', 'listWindowMarginMs', 'unsettledReviewAfterMs', 'backoff'] as const;
export type WatchPolicy = Pick<EnginePolicy, (typeof WATCH_POLICY_FIELDS)[number]>;

/** A look's List range: from the operation's first send to the moment of the look, widened by the margin. */
export function watchListWindow(w: Pick<WatchedOperation, 'watch' | 'claimedAt'>, policy: WatchPolicy = DEFAULT_POLICY): ListWindow {
  return {
    createdGte: Math.floor((w.watch.watchedFrom.getTime() - policy.listWindowMarginMs) / 1000),
    createdLte: Math.ceil((w.claimedAt.getTime() + policy.listWindowMarginMs) / 1000),
  };
}

/** The kind's List scope for the watched operation; null when a refund names no PaymentIntent (nothing to list). */
export function watchListScope(w: Pick<WatchedOperation, 'op' | 'chargePaymentIntentId'>): Readonly<Record<string, string>> | null {
  if (w.op.kind === 'charge') return { customer: w.op.customerId };
  const pi = w.op.refund?.paymentIntentId ?? w.chargePaymentIntentId;
  return pi ? { payment_intent: pi } : null;
}

/** Statuses in which a PaymentIntent never moves money again. */
const PAYMENT_INTENT_DONE = new Set(['succeeded', 'canceled', 'requires_payment_method']);
/** Statuses in which a Refund never gives money back. */
const REFUND_DONE_WITHOUT_MONEY = new Set(['failed', 'canceled']);

const describe = (o: PaymentIntentView) => `${o.id} (${o.status}, ${o.amount} ${o.currency}, key generation ${o.metadata.key_generation ?? '?'})`;

/** Why another PaymentIntent of a charge, held (requires_capture), is a finding. */
const heldReason = (op: Operation, o: PaymentIntentView) =>
  `the watch after a re-issue found PaymentIntent ${describe(o)} of this operation, ` +
  (op.status === 'succeeded'
    ? `which succeeded with ${op.externalId}: a second authorization holds the customer's funds until it is canceled or its authorization expires at Stripe; not released automatically: cancel it by hand`
    : `which failed: the order was announced failed and the customer's funds are held by it; cancel it by hand`);

/** The key generation an object's metadata names, or -1. */
function generationOf(o: PaymentIntentView): number {
  const g = Number(o.metadata.key_generation);
  return Number.isInteger(g) && g >= 0 ? g : -1;
}

/**
 * One look at a watched operation: its objects listed from the first send to now (`answer`), judged.
 * Pure; `w.claimedAt` is the database clock of the look.
 */
export function judgeWatch(w: WatchedOperation, answer: ListAnswer<PaymentIntentView>, policy: WatchPolicy = DEFAULT_POLICY, random: () => number = Math.random): WatchLook {
  const { op, watch } = w;
  const now = w.claimedAt.getTime();
  if (!answer.complete) return failedLook(w, `the List stopped before its end (${answer.pages} page(s))`, policy, random);
  const objectName = KIND_RULES[op.kind].objectName;
  const ours = answer.items.filter((o) => o.metadata.operation_id === op.id);
  const others = ours.filter((o) => o.id !== op.externalId);
  const remedies: DuplicateRemedy[] = [];
  const findings: WatchFinding[] = [];
  const unsettled: string[] = [];
  const finding = (kind: WatchFinding['kind'], o: PaymentIntentView, reason: string): WatchFinding => ({ kind, objectId: o.id, amount: o.amount, currency: o.currency, status: o.status, reason });

  if (op.reviewReason !== null && (op.status === 'pending' || op.status === 'unknown')) return reviewLook(w, answer, ours, policy);

  for (const o of others) {
    if (op.kind === 'charge') {
      if (!PAYMENT_INTENT_DONE.has(o.status)) {
        unsettled.push(o.id);
        // A hold: the customer's funds are taken until someone captures or cancels it, or Stripe's
        // authorization window ends. Nothing here captures or releases another PaymentIntent of an
        // operation, so a person is told at this look, as a Stripe event of it would (event-decisions.ts).
        if (o.status === 'requires_capture') findings.push(finding('contradiction', o, heldReason(op, o)));
        continue;
      }
      if (o.status !== 'succeeded') continue;
      if (op.status === 'succeeded') {
        const verdict = judgeDuplicateCharge(op, o);
        if (verdict.kind === 'refund') remedies.push({ refundId: verdict.refundId, paymentIntentId: verdict.paymentIntentId, amount: verdict.amount });
        else findings.push(finding('contradiction', o, `the watch after a re-issue found PaymentIntent ${describe(o)} of this operation, which succeeded with ${op.externalId}; not refunded automatically: ${verdict.reason}`));
      } else {
        findings.push(finding('contradiction', o, `the watch after a re-issue found PaymentIntent ${describe(o)} of this operation, which failed: the order was announced failed and is charged — refund it by hand`));
      }
    } else {
      if (REFUND_DONE_WITHOUT_MONEY.has(o.status)) continue;
      if (o.status !== 'succeeded') unsettled.push(o.id);
      const twice = op.status === 'succeeded';
      findings.push(finding(twice ? 'refunded_twice' : 'contradiction', o,
        twice
          ? `the watch after a re-issue found a second Refund ${describe(o)} of this refund operation, which succeeded with ${op.externalId}: the customer is refunded twice, and no machine can take that back`
          : `the watch after a re-issue found Refund ${describe(o)} of this refund operation, which failed: money was given back that the ledger says was not`));
    }
  }

  // The last look must also come after the key of the generation the operation settled with has aged,
  // when it kept an OLDER generation's object while its current generation had been sent (a List that
  // adopted a late first-generation PaymentIntent while the re-issued create was still ambiguous).
  const kept = ours.find((o) => o.id === op.externalId);
  const currentSent = op.firstAttemptedAt !== null && (kept === undefined || generationOf(kept) !== op.keyGeneration);
  const finalCheckAt = new Date(Math.max(watch.finalCheckAt.getTime(), currentSent ? op.firstAttemptedAt!.getTime() + policy.watchFinalAfterFirstSendMs : 0));

  let nextCheckAt: Date | null;
  if (unsettled.length > 0) {
    const age = now - watch.watchedFrom.getTime();
    if (age >= policy.unsettledReviewAfterMs) {
      for (const id of unsettled) {
        if (findings.some((f) => f.objectId === id)) continue;
        const o = others.find((x) => x.id === id)!;
        findings.push(finding('contradiction', o, `the watch after a re-issue found ${objectName} ${describe(o)} of this operation still not settled ${formatDuration(age)} after the first send; the watch ends here: look it up by hand`));
      }
      nextCheckAt = null;
    } else {
      nextCheckAt = new Date(Math.min(now + backoffDelay(watch.checks + 1, policy.backoff.unsettled, random), Math.max(finalCheckAt.getTime(), now + 1)));
    }
  } else {
    nextCheckAt = finalCheckAt.getTime() > now ? finalCheckAt : null;
  }
  // A refund found while another is still pending: the finding is made once per Refund, but the watch
  // goes on until the pending one settles (it may still fail, which the operator wants to know).
  return {
    kind: 'looked',
    remedies,
    findings,
    unsettled,
    nextCheckAt,
    finalCheckAt,
    detail: {
      look: watch.checks + 1,
      objects: ours.map((o) => ({ id: o.id, status: o.status, amount: o.amount, currency: o.currency, keyGeneration: o.metadata.key_generation ?? null })),
      pages: answer.pages,
      requestIds: answer.requestIds,
      ...(remedies.length > 0 ? { duplicatesRefunded: remedies.map((r) => r.paymentIntentId) } : {}),
      ...(findings.length > 0 ? { findings: findings.map((f) => ({ kind: f.kind, objectId: f.objectId })) } : {}),
      ...(unsettled.length > 0 ? { unsettled } : {}),
      nextCheckAt: nextCheckAt?.toISOString() ?? null,
    },
  };
}

/**
 * A look at an operation in review: no remedy, no state change — a person decides. Each object of it
 * that holds money or may still move it is a finding (one per object), so the review queue's "no
 * PaymentIntent exists" is never the last word after a late commit; look again in an "hour".
 */
function reviewLook(w: WatchedOperation, answer: ListAnswer<PaymentIntentView>, ours: readonly PaymentIntentView[], policy: WatchPolicy): WatchLook {
  const { op, watch } = w;
  const objectName = KIND_RULES[op.kind].objectName;
  const holding = ours.filter((o) => (op.kind === 'charge' ? o.status === 'succeeded' || !PAYMENT_INTENT_DONE.has(o.status) : !REFUND_DONE_WITHOUT_MONEY.has(o.status)));
  const findings: WatchFinding[] = holding.map((o) => ({
    kind: 'contradiction',
    objectId: o.id,
    amount: o.amount,
    currency: o.currency,
    status: o.status,
    reason:
      `the watch after a re-issue found ${objectName} ${describe(o)} of this operation while it is in review (${op.reviewReason}): ` +
      `Stripe holds ${holding.length} ${objectName}(s) of it now — resolve the review on what Stripe shows (review show), not on the reason it went to review with`,
  }));
  const nextCheckAt = new Date(w.claimedAt.getTime() + policy.watchFirstAfterMs);
  return {
    kind: 'looked',
    remedies: [],
    findings,
    unsettled: [],
    nextCheckAt,
    finalCheckAt: watch.finalCheckAt,
    detail: {
      look: watch.checks + 1,
      inReview: true,
      objects: ours.map((o) => ({ id: o.id, status: o.status, amount: o.amount, currency: o.currency, keyGeneration: o.metadata.key_generation ?? null })),
      pages: answer.pages,
      requestIds: answer.requestIds,
      ...(findings.length > 0 ? { findings: findings.map((f) => ({ kind: f.kind, objectId: f.objectId })) } : {}),
      nextCheckAt: nextCheckAt.toISOString(),
    },
  };
}

/** The operation is open: nothing is judged; look again later (the engine has it). */
export function deferLook(w: WatchedOperation, policy: WatchPolicy = DEFAULT_POLICY): WatchLook {
  const why = w.op.reviewReason !== null ? 'in review: the operator decides on the evidence of every generation' : `still ${w.op.status}: the engine's own evidence reads every generation`;
  return { kind: 'later', nextCheckAt: new Date(w.claimedAt.getTime() + policy.watchFirstAfterMs), reason: `operation ${why}` };
}

/** A look whose list failed or stopped short: again with backoff; after MAX_WATCH_FAILURES in a row, a finding and the end. */
export function failedLook(w: WatchedOperation, reason: string, policy: WatchPolicy = DEFAULT_POLICY, random: () => number = Math.random): WatchLook {
  const failures = w.watch.failures + 1;
  if (failures >= MAX_WATCH_FAILURES) {
    const what = w.op.kind === 'charge' ? `PaymentIntents of customer ${w.op.customerId}` : 'Refunds of the PaymentIntent';
    return {
      kind: 'failed',
      nextCheckAt: null,
      reason: `${reason}; ${failures} looks in a row could not be completed`,
      finding: {
        kind: 'watch_blind',
        objectId: w.op.id,
        amount: w.op.amount,
        currency: w.op.currency,
        status: w.op.status,
        reason: `the watch after a re-issue could not list the ${what} ${failures} times in a row (last: ${reason}): whether the old key was committed late is not known — look the operation's objects up by hand (metadata.operation_id ${w.op.id}), then resolve this finding`,
      },
    };
  }
  return { kind: 'failed', nextCheckAt: new Date(w.claimedAt.getTime() + backoffDelay(failures, policy.backoff.ambiguous, random)), finding: null, reason };
}
