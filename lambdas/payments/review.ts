// The human review queue: what an operator may decide about an operation no machine could settle,
// on which evidence, and the SQL that writes the decision.
//
// The rule of every decision: Stripe is asked first, with no transaction open; the evidence is judged
// by the pure functions below; then ONE fenced statement writes the new state, its audit event and
// (for a final state) its outbox event. The fence is the operation as the operator saw it — still in
// review, same status, same review reason, same key generation, no lease — so anything that changed
// it in between (another operator, a reissue) makes the write match no row instead of overwriting.
//
//   operator A: read ─ Stripe look-ups ……………………………… judge ─ write(fenced on gen 0) ✗ conflict, nothing written
//   operator B:        read ─ Stripe ─ judge ─ write(gen 0 → 1) ✓
//
// Nobody else sends for an operation in review: claims skip it (review_reason IS NOT NULL) and its
// lease is null. What can still surprise the look-ups is a request sent BEFORE it entered review:
// for a charge, a PaymentIntent Search does not show yet; for a refund (List is real time), a
// request that may still be running — until its claim's lease end if it recorded no outcome, and at
// Stripe for LIST_SETTLE_MS after our client gave up. `judgeNoEffect` waits out that window.
//
// Kinds: the judgements are shared; what differs is the evidence reader (EVIDENCE_READERS) — a
// charge's PaymentIntents by Search + retrieve, a refund's Refunds by List of the refunded
// PaymentIntent + retrieve — and a few facts of the kind (REVIEW_KINDS: which objects are its own,
// which flag names the proof, how long its evidence lags).
import { AUDIT_DETAIL, lastPossibleSendAt, type AuditEvent } from './audit-trail.ts';
import type { Db } from './db.ts';
import { DEFAULT_POLICY, KIND_RULES, type WatchTimings } from './decisions.ts';
import type { AccountScope, GatewayResult } from './gateway.ts';
import { outboxInsertSql, PAYMENT_INTENT_OF_REFUND, REISSUE_SET, toOperation, watchOnReissueSql } from './operations-store.ts';
import type { Operation, OperationKind, OperationStatus, PaymentIntentView } from './types.ts';

type OperationRow = Parameters<typeof toOperation>[0];

// ── Evidence ─────────────────────────────────────────────────────────────────────────────────────

/** A PaymentIntent as Stripe holds it now. */
export interface StripePaymentIntent extends PaymentIntentView {
  /** When Stripe created it (ISO 8601), if the answer said. */
  readonly created: string | null;
}

/** A Refund as Stripe holds it now (the same fields as a PaymentIntent, plus the PaymentIntent it refunds). */
export interface StripeRefund extends StripePaymentIntent {
  readonly paymentIntent: string | null;
}

/**
 * What the operator tool asks Stripe. The adapter is lambdas/ops/stripe-lookup.ts (the real SDK).
 * `scope.account`: asked AS that connected account (an operation on one has its objects only there:
 * asked on the platform, its PaymentIntent would look absent — and absence is what a re-issue rests on).
 */
export interface PaymentIntentLookup {
  retrieve(id: string, scope?: AccountScope): Promise<GatewayResult<StripePaymentIntent>>;
  /**
   * Every PaymentIntent whose metadata.operation_id is this operation, WHATEVER its key generation.
   * `complete: false` when the answer was cut off (more pages than the adapter reads).
   */
  searchByOperation(operationId: string, scope?: AccountScope): Promise<GatewayResult<{ readonly paymentIntents: readonly StripePaymentIntent[]; readonly complete: boolean }>>;
}

/** The refund kind's look-ups (read-only). Same adapter. */
export interface RefundLookup {
  /** GET /v1/refunds/:id */
  retrieveRefund(id: string, scope?: AccountScope): Promise<GatewayResult<StripeRefund>>;
  /**
   * GET /v1/refunds?payment_intent=… — every refund of the PaymentIntent, whatever its operation or
   * key generation, newest first, real time. `complete: false` when the adapter stopped before the end.
   */
  listRefunds(paymentIntentId: string, scope?: AccountScope): Promise<GatewayResult<{ readonly refunds: readonly StripeRefund[]; readonly pages: number; readonly complete: boolean }>>;
}

export type StripeLookup = PaymentIntentLookup & RefundLookup;

/** How an object was found: by Search (charges), by List (refunds), by retrieving an id we hold. */
export type FoundBy = 'search' | 'list' | 'retrieve';

export interface PaymentIntentEvidence extends StripePaymentIntent {
  readonly foundBy: readonly FoundBy[];
}

export interface RefundEvidence extends StripeRefund {
  readonly foundBy: readonly FoundBy[];
}

export interface StripeEvidence {
  /** Whose evidence this is: a charge's (PaymentIntents) or a refund's (Refunds). */
  readonly kind: OperationKind;
  /**
   * A charge: every PaymentIntent found for the operation — metadata.operation_id is this operation,
   * or metadata.order_id is its order (the promise is one charge per ORDER) — as retrieved just now.
   * A refund: empty.
   */
  readonly paymentIntents: readonly PaymentIntentEvidence[];
  /**
   * A refund: every Refund whose metadata.operation_id is this operation (any key generation), from
   * the List of the refunded PaymentIntent's refunds and the retrieve of every id we hold. The
   * order's other refunds carry its order_id too and are not this operation's: they are `unrelated`.
   * A charge: empty.
   */
  readonly refunds: readonly RefundEvidence[];
  /** A refund: the PaymentIntent whose refunds were listed (the charge's, or the duplicate remedy's extra one). */
  readonly refundedPaymentIntent: string | null;
  /** Objects we looked at that are not the operation's (an id an operator typed, another refund of the PaymentIntent, a Dashboard refund). */
  readonly unrelated: readonly (PaymentIntentEvidence | RefundEvidence)[];
  /** Ids we hold (external_id, the audit trail) that Stripe says do not exist. */
  readonly missing: readonly string[];
  /** False when a look-up failed or Search / List was cut off: then the absence of an effect is not shown. */
  readonly complete: boolean;
  readonly problems: readonly string[];
  readonly checkedAt: string;
}

/** Every id with this prefix that the operation's row and audit trail mention (external_id, search and list hits, mismatches, earlier look-ups). */
function knownObjectIds(op: Operation, events: readonly AuditEvent[], prefix: 'pi_' | 're_'): string[] {
  const ids = new Set<string>();
  const add = (value: unknown) => {
    if (typeof value === 'string' && value.startsWith(prefix)) ids.add(value);
  };
  add(op.externalId);
  for (const event of events) {
    add(event.externalId);
    const detail = event.detail as {
      searchHits?: unknown;
      listHits?: unknown;
      paymentIntent?: { id?: unknown };
      evidence?: { paymentIntents?: unknown; refunds?: unknown };
    };
    if (Array.isArray(detail.searchHits)) for (const hit of detail.searchHits) add((hit as { id?: unknown }).id);
    // What the engine's List found and would not adopt (several, or a mismatch).
    if (Array.isArray(detail.listHits)) for (const hit of detail.listHits) add((hit as { id?: unknown }).id);
    // A mismatch the engine refused to adopt (decisions.ts fromPaymentIntent names a Refund so too).
    add(detail.paymentIntent?.id);
    // Earlier operator look-ups: what they found is retrieved again (its status may have moved).
    for (const list of [detail.evidence?.paymentIntents, detail.evidence?.refunds]) {
      if (Array.isArray(list)) for (const found of list) add((found as { id?: unknown }).id);
    }
  }
  return [...ids];
}

/** Every PaymentIntent id the operation's row and audit trail mention (external_id, search and list hits, mismatches). */
export const knownPaymentIntentIds = (op: Operation, events: readonly AuditEvent[]): string[] => knownObjectIds(op, events, 'pi_');

/** Every Refund id a refund operation's row and audit trail mention. */
export const knownRefundIds = (op: Operation, events: readonly AuditEvent[]): string[] => knownObjectIds(op, events, 're_');

/** Objects found by several look-ups, merged: a retrieve is fresher than a search or list hit, its fields win. */
class Found<T extends { readonly id: string }> {
  readonly #byId = new Map<string, T & { readonly foundBy: readonly FoundBy[] }>();

  note(object: T, by: FoundBy): void {
    const seen = this.#byId.get(object.id);
    const base = by === 'retrieve' || !seen ? object : seen;
    this.#byId.set(object.id, { ...base, foundBy: [...new Set([...(seen?.foundBy ?? []), by])].sort() });
  }

  ids(): string[] {
    return [...this.#byId.keys()];
  }

  all(): (T & { readonly foundBy: readonly FoundBy[] })[] {
    return [...this.#byId.values()];
  }
}

/** Retrieve every id: found ones noted, 404s listed as missing, other failures recorded as problems (the evidence is then incomplete). */
async function retrieveEach<T extends { readonly id: string }>(
  ids: Iterable<string>,
  retrieve: (id: string) => Promise<GatewayResult<T>>,
  found: Found<T>,
  missing: string[],
  problems: string[],
): Promise<boolean> {
  let complete = true;
  for (const id of new Set(ids)) {
    const got = await retrieve(id);
    if (got.ok) found.note(got.value, 'retrieve');
    else if (got.failure.kind === 'not_found') missing.push(id);
    else {
      complete = false;
      problems.push(`retrieving ${id} failed: ${got.failure.errorClass} ${got.failure.message}`.trim());
    }
  }
  return complete;
}

export interface GatherOptions {
  /** Ids the operator named (`--payment-intent`, `--refund`): retrieved too. */
  readonly extraIds?: readonly string[];
  /**
   * A refund: the PaymentIntent it refunds (the duplicate remedy's named one, else its charge's
   * external id — read by the caller from the charge's row). Null: not known, the evidence is incomplete.
   */
  readonly refundedPaymentIntent?: string | null;
  readonly now?: () => Date;
}

/** A kind's evidence reader: everything Stripe holds for one operation. Never throws for a Stripe failure. */
type EvidenceReader = (lookup: StripeLookup, op: Operation, events: readonly AuditEvent[], options: GatherOptions) => Promise<StripeEvidence>;

/**
 * A charge: a Search by metadata.operation_id across all key generations, plus a retrieve of every id
 * we already know (Search lags; a retrieve does not, and it gives the current status).
 */
const gatherPaymentIntentEvidence: EvidenceReader = async (lookup, op, events, options) => {
  const problems: string[] = [];
  let complete = true;
  const found = new Found<StripePaymentIntent>();
  const scope = { account: op.account ?? null };
  const searched = await lookup.searchByOperation(op.id, scope);
  if (searched.ok) {
    for (const pi of searched.value.paymentIntents) found.note(pi, 'search');
    if (!searched.value.complete) {
      complete = false;
      problems.push('Search returned more PaymentIntents than were read; the list is cut off');
    }
  } else {
    complete = false;
    problems.push(`Search failed: ${searched.failure.errorClass} ${searched.failure.message}`.trim());
  }
  const missing: string[] = [];
  const ids = [...knownPaymentIntentIds(op, events), ...(options.extraIds ?? []), ...found.ids()];
  if (!(await retrieveEach(ids, (id) => lookup.retrieve(id, scope), found, missing, problems))) complete = false;
  const all = found.all();
  const related = (pi: PaymentIntentEvidence) => pi.metadata.operation_id === op.id || pi.metadata.order_id === op.orderId;
  return {
    kind: op.kind,
    paymentIntents: all.filter(related),
    refunds: [],
    refundedPaymentIntent: null,
    unrelated: all.filter((pi) => !related(pi)),
    missing,
    complete,
    problems,
    checkedAt: (options.now ?? (() => new Date()))().toISOString(),
  };
};

/**
 * A refund: List of the refunded PaymentIntent's refunds (real time, every page: a PaymentIntent has
 * a handful of refunds, so absence is shown over its whole life and all key generations — the
 * engine's own evidence step, docs/model.md), plus a retrieve of every Refund id we hold (one made
 * against another PaymentIntent by a misused key shows only so). Ours: metadata.operation_id.
 */
const gatherRefundEvidence: EvidenceReader = async (lookup, op, events, options) => {
  const problems: string[] = [];
  let complete = true;
  const found = new Found<StripeRefund>();
  const scope = { account: op.account ?? null };
  const refunded = options.refundedPaymentIntent ?? null;
  if (refunded === null) {
    complete = false;
    problems.push(`the PaymentIntent refund ${op.refund?.refundId ?? op.id} is made against is not known (its charge has no PaymentIntent): List cannot be asked`);
  } else {
    const listed = await lookup.listRefunds(refunded, scope);
    if (listed.ok) {
      for (const refund of listed.value.refunds) found.note(refund, 'list');
      if (!listed.value.complete) {
        complete = false;
        problems.push(`List of ${refunded}'s refunds stopped after ${listed.value.pages} page(s), before its end`);
      }
    } else {
      complete = false;
      problems.push(`List of ${refunded}'s refunds failed: ${listed.failure.errorClass} ${listed.failure.message}`.trim());
    }
  }
  const missing: string[] = [];
  const ids = [...knownRefundIds(op, events), ...(options.extraIds ?? [])];
  if (!(await retrieveEach(ids, (id) => lookup.retrieveRefund(id, scope), found, missing, problems))) complete = false;
  const all = found.all();
  const ours = (refund: RefundEvidence) => refund.metadata.operation_id === op.id;
  return {
    kind: op.kind,
    paymentIntents: [],
    refunds: all.filter(ours),
    refundedPaymentIntent: refunded,
    unrelated: all.filter((refund) => !ours(refund)),
    missing,
    complete,
    problems,
    checkedAt: (options.now ?? (() => new Date()))().toISOString(),
  };
};

/**
 * A capture or cancel: the PaymentIntent it acts on, retrieved (its row's external_id, or any the
 * trail names). Its state is the whole evidence: Stripe captures or releases a PaymentIntent once.
 */
const gatherAuthorizationEvidence: EvidenceReader = async (lookup, op, events, options) => {
  const problems: string[] = [];
  const found = new Found<StripePaymentIntent>();
  const missing: string[] = [];
  const ids = [...knownPaymentIntentIds(op, events), ...(options.extraIds ?? [])];
  let complete = await retrieveEach(ids, (id) => lookup.retrieve(id, { account: op.account ?? null }), found, missing, problems);
  if (ids.length === 0) {
    complete = false;
    problems.push(`the ${op.kind} names no PaymentIntent yet: look up its charge operation's`);
  }
  return {
    kind: op.kind,
    paymentIntents: found.all(),
    refunds: [],
    refundedPaymentIntent: null,
    unrelated: [],
    missing,
    complete,
    problems,
    checkedAt: (options.now ?? (() => new Date()))().toISOString(),
  };
};

export const EVIDENCE_READERS: Readonly<Record<OperationKind, EvidenceReader>> = {
  charge: gatherPaymentIntentEvidence,
  refund: gatherRefundEvidence,
  capture: gatherAuthorizationEvidence,
  cancel_authorization: gatherAuthorizationEvidence,
};

/**
 * Ask Stripe everything it holds for the operation, by its kind's reader. Never throws for a Stripe
 * failure: it is recorded and makes the evidence incomplete, which forbids every conclusion drawn
 * from absence.
 */
export function gatherStripeEvidence(lookup: StripeLookup, op: Operation, events: readonly AuditEvent[], options: GatherOptions = {}): Promise<StripeEvidence> {
  return EVIDENCE_READERS[op.kind](lookup, op, events, options);
}

// ── Judgements (pure) ────────────────────────────────────────────────────────────────────────────

export type Verdict = { readonly allowed: true } | { readonly allowed: false; readonly reason: string };

const allowed: Verdict = { allowed: true };
const refuse = (reason: string): Verdict => ({ allowed: false, reason });

export interface ReviewPolicy {
  /**
   * How long after the last request that may have created a PaymentIntent Search is trusted to show
   * it. Stripe: "usually within a minute"; the engine waits the same 10 minutes before an early search.
   */
  readonly searchSettleMs: number;
  /**
   * How long after the last request that may have created a Refund List is trusted to show it: List
   * is real time, but a request our client gave up on may still be executing at Stripe — the
   * engine's own List settle delay (LIST_SETTLE_MS, at least STRIPE_TIMEOUT_MS).
   */
  readonly listSettleMs: number;
  /** A claim with no recorded outcome may have been sending until its lease ran out. */
  readonly leaseMs: number;
}

export const DEFAULT_REVIEW_POLICY: ReviewPolicy = {
  searchSettleMs: DEFAULT_POLICY.earlySearchAfterMs,
  listSettleMs: DEFAULT_POLICY.listSettleMs,
  leaseMs: DEFAULT_POLICY.leaseMs,
};

/** An object of the operation's kind in the evidence: a PaymentIntent or a Refund. */
export type EvidenceObject = PaymentIntentEvidence | RefundEvidence;

/** What the shared judgements need to know of a kind's evidence. */
interface ReviewKind {
  /** The operation's own objects. */
  readonly own: (evidence: StripeEvidence) => readonly EvidenceObject[];
  /** The option of `review resolve --as succeeded` that names the proof. */
  readonly proofFlag: '--payment-intent' | '--refund';
  /** What the effect is called in a sentence. */
  readonly effect: string;
  /**
   * How long after the last possible send the evidence is trusted to show what it made. Search is
   * eventually consistent (docs.stripe.com/search: "usually within a minute"): its settle period.
   * List is real time (docs.stripe.com/api/refunds/list), so for a refund only a request still
   * running matters: until its lease end (lastPossibleSendAt), then the engine's List settle delay
   * for one Stripe may still be executing after our client gave up.
   */
  readonly settleMs: (policy: ReviewPolicy) => number;
  /** Fields of a proof that differ from the operation (beside ownership and status). */
  readonly mismatches: (op: Operation, object: EvidenceObject, refundedPaymentIntent: string | null) => string[];
}

const amountAndCurrency = (op: Operation, object: EvidenceObject): string[] => [
  ...(object.amount !== op.amount ? [`amount ${object.amount} ≠ ${op.amount}`] : []),
  ...(object.currency !== op.currency ? [`currency ${object.currency} ≠ ${op.currency}`] : []),
];

/** A capture's or cancel's PaymentIntent: it shows the effect when captured for the amount / released. */
const authorizationReview = (effect: string, done: (op: Operation, pi: EvidenceObject) => boolean): ReviewKind => ({
  own: (evidence) => evidence.paymentIntents,
  proofFlag: '--payment-intent',
  effect,
  settleMs: (policy) => policy.listSettleMs,
  mismatches: (op, object) => (done(op, object) ? [] : [`${object.id} is ${object.status}${object.amountReceived !== undefined ? ` (captured ${object.amountReceived})` : ''}, not ${effect === 'capture' ? `captured for ${op.amount}` : 'released'}`]),
});

/** Whether a capture's / cancel's PaymentIntent shows that it happened (decisions.ts fromAuthorizedPaymentIntent). */
export function authorizationDone(op: Operation, pi: Pick<EvidenceObject, 'status' | 'amountReceived'>): boolean {
  return op.kind === 'capture' ? pi.status === 'succeeded' && pi.amountReceived === op.amount : pi.status === 'canceled';
}

export const REVIEW_KINDS: Readonly<Record<OperationKind, ReviewKind>> = {
  capture: authorizationReview('capture', authorizationDone),
  cancel_authorization: authorizationReview('release of the authorization', authorizationDone),
  charge: {
    own: (evidence) => evidence.paymentIntents,
    proofFlag: '--payment-intent',
    effect: 'charge',
    settleMs: (policy) => policy.searchSettleMs,
    mismatches: amountAndCurrency,
  },
  refund: {
    own: (evidence) => evidence.refunds,
    proofFlag: '--refund',
    effect: 'refund',
    settleMs: (policy) => policy.listSettleMs,
    mismatches: (op, object, refundedPaymentIntent) => {
      const of = 'paymentIntent' in object ? object.paymentIntent : null;
      return [
        ...amountAndCurrency(op, object),
        ...(refundedPaymentIntent === null
          ? ['the refunded PaymentIntent is not known']
          : of !== refundedPaymentIntent
            ? [`PaymentIntent ${of ?? 'absent'} ≠ ${refundedPaymentIntent}`]
            : []),
      ];
    },
  },
};

export const isInReview = (op: Operation): boolean => (op.status === 'pending' || op.status === 'unknown') && op.reviewReason !== null;

/**
 * Only an operation waiting for a human may be resolved or reissued. A final one is final. An open
 * one not in review belongs to the engine: it will retry, retrieve or search on its schedule, and an
 * operator's write would race its lease and pre-empt evidence it is about to gather.
 */
export function checkReviewable(op: Operation): Verdict {
  if (op.status === 'succeeded' || op.status === 'failed') {
    return refuse(`operation ${op.id} is already ${op.status} (final since ${op.settledAt?.toISOString() ?? '?'}); nothing can change it`);
  }
  if (op.reviewReason === null) {
    return refuse(
      `operation ${op.id} is ${op.status} and not in review: the engine still owns it` +
        (op.nextAttemptAt ? ` (next attempt ${op.nextAttemptAt.toISOString()})` : '') +
        '; only operations waiting for a human can be resolved or reissued',
    );
  }
  if (op.leaseToken !== null) {
    return refuse(`operation ${op.id} is leased by a worker until ${op.leaseUntil?.toISOString() ?? '?'}; try again after that`);
  }
  return allowed;
}

/**
 * `resolve --as succeeded --payment-intent pi_…` (a charge) / `--refund re_…` (a refund): Stripe must
 * show THIS operation's object — metadata.operation_id, the same amount and currency (a refund: of
 * the same PaymentIntent) — succeeded.
 */
export function judgeResolveSucceeded(op: Operation, id: string, object: EvidenceObject | null, refundedPaymentIntent: string | null = null): Verdict {
  const name = KIND_RULES[op.kind].objectName;
  if (object === null) return refuse(`${name} ${id} does not exist at Stripe`);
  const owner = object.metadata.operation_id;
  // A capture's or cancel's PaymentIntent is its charge's (metadata names the charge operation).
  const ownerExpected = op.authorization ? op.authorization.chargeOperationId : op.id;
  if (op.authorization) {
    if (owner !== ownerExpected) return refuse(`${name} ${object.id} is not the PaymentIntent of charge operation ${ownerExpected}`);
    const mismatch = REVIEW_KINDS[op.kind].mismatches(op, object, refundedPaymentIntent);
    return mismatch.length > 0 ? refuse(mismatch.join(', ')) : allowed;
  }
  if (owner !== op.id) {
    return refuse(`${name} ${object.id} does not belong to operation ${op.id}: its metadata.operation_id is ${owner === undefined ? 'absent' : owner}`);
  }
  const mismatch = REVIEW_KINDS[op.kind].mismatches(op, object, refundedPaymentIntent);
  if (mismatch.length > 0) return refuse(`${name} ${object.id} does not match the operation: ${mismatch.join(', ')}`);
  if (object.status !== 'succeeded') return refuse(`${name} ${object.id} is ${object.status}, not succeeded`);
  return allowed;
}

/**
 * The operation's objects that are, or may still become, money moving: everything the engine would
 * not read as failed (KIND_RULES statusOf). A PaymentIntent: succeeded is a charge; processing may
 * clear; requires_action (3-D Secure), requires_capture and requires_confirmation can each still turn
 * into one; only canceled and requires_payment_method are harmless. A Refund: succeeded is money
 * back, pending and requires_action may still become it; only failed and canceled are harmless.
 */
export function movingObjects(evidence: StripeEvidence): EvidenceObject[] {
  const statusOf = KIND_RULES[evidence.kind].statusOf;
  return REVIEW_KINDS[evidence.kind].own(evidence).filter((object) => statusOf(object.status) !== 'failed');
}

/**
 * `resolve --as failed` and `reissue` both rest on "nothing was, or will be, charged" (a refund:
 * refunded): the look-ups must be complete, show no object of the operation that is or may become
 * money moving (any key generation), and be late enough that they show whatever the last possible
 * send made — for a charge, Search's settle period after it; for a refund (List is real time), the
 * engine's List settle delay after it (a claim without an outcome: after its lease end).
 */
export function judgeNoEffect(
  op: Operation,
  evidence: StripeEvidence,
  events: readonly AuditEvent[],
  now: Date,
  policy: ReviewPolicy = DEFAULT_REVIEW_POLICY,
): Verdict {
  const kind = REVIEW_KINDS[op.kind];
  const name = KIND_RULES[op.kind].objectName;
  if (evidence.kind !== op.kind) return refuse(`the evidence gathered is a ${evidence.kind}'s, the operation a ${op.kind}: nothing can be judged`);
  if (!evidence.complete) {
    return refuse(`the Stripe look-ups are incomplete (${evidence.problems.join('; ')}): the absence of a ${kind.effect} cannot be shown`);
  }
  if (op.authorization) {
    // Stripe acts on a PaymentIntent once: sending again cannot capture twice or more than asked, so
    // "it happened already" stops a re-issue or a resolve --as failed — and, below, a send that may
    // still be running.
    const done = evidence.paymentIntents.find((pi) => authorizationDone(op, pi));
    if (done) return refuse(`Stripe shows the ${kind.effect} done (${done.id} ${done.status}): use review resolve --as succeeded --payment-intent ${done.id}`);
  }
  // (A capture's or cancel's PaymentIntent is the charge's: it is not "moving" for this operation.)
  const moving = op.authorization ? [] : movingObjects(evidence);
  const succeeded = moving.filter((object) => object.status === 'succeeded');
  const judge = (object: EvidenceObject) => judgeResolveSucceeded(op, object.id, object, evidence.refundedPaymentIntent);
  if (succeeded.length > 0) {
    const acceptable = succeeded.find((object) => judge(object).allowed);
    const reasons = succeeded.map(judge).map((v) => (v.allowed ? '' : v.reason)).join('; ');
    if (op.kind === 'refund') {
      return refuse(
        `Stripe shows a succeeded Refund of this operation (${succeeded.map((r) => r.id).join(', ')}): it was refunded; ` +
          (acceptable
            ? `use review resolve --as succeeded --refund ${acceptable.id}`
            : `none of them matches the operation (${reasons}): money went back that this refund did not ask for — ` +
              'compare it with the order in the Dashboard and escalate; this tool cannot settle it'),
      );
    }
    return refuse(
      `Stripe shows a succeeded PaymentIntent for this operation (${succeeded.map((pi) => pi.id).join(', ')}): it was charged; ` +
        (acceptable
          ? `use review resolve --as succeeded --payment-intent ${acceptable.id}`
          : // A refunded PaymentIntent stays `succeeded` at Stripe, so this refusal stands after a refund too.
            `none of them matches the operation (${reasons}): ` +
            'money moved that this order did not ask for — refund it in Stripe and escalate; this tool cannot settle it'),
    );
  }
  if (moving.length > 0) {
    const list = moving.map((object) => `${object.id} ${object.status}`).join(', ');
    return refuse(
      op.kind === 'refund'
        ? `Stripe shows Refunds of this operation that may still move money (${list}): wait until they settle ` +
            '(a pending refund succeeds or fails by itself; one that requires action can be canceled in the Dashboard)'
        : `Stripe shows PaymentIntents that may still charge (${list}): wait until they settle, or cancel them in Stripe first`,
    );
  }
  const lastSend = lastPossibleSendAt(events, policy.leaseMs);
  if (lastSend !== null) {
    const trustedFrom = lastSend.getTime() + kind.settleMs(policy);
    if (now.getTime() < trustedFrom) {
      return refuse(
        op.kind === 'refund'
          ? `the last request that may have created a ${name} ran until ${lastSend.toISOString()} at the latest (its outcome, or ` +
              `the lease end of a claim that recorded none), and Stripe may still be executing it ${Math.round(kind.settleMs(policy) / 1000)} s ` +
              `after (LIST_SETTLE_MS); List cannot show what is not made yet: try again after ${new Date(trustedFrom).toISOString()}`
          : `the last request that may have created a PaymentIntent ended at ${lastSend.toISOString()}, and Search may not show ` +
              `it yet: try again after ${new Date(trustedFrom).toISOString()}`,
      );
    }
  }
  return allowed;
}

// ── Reading ──────────────────────────────────────────────────────────────────────────────────────

/** One row of the outbox, as the operator needs to see it. */
export interface OutboxEvent {
  readonly eventId: string;
  readonly eventType: string;
  readonly payload: Readonly<Record<string, unknown>>;
  readonly createdAt: string;
  readonly publishedAt: string | null;
  readonly attempts: number;
  readonly lastError: string | null;
}

interface AuditRow {
  id: number | string;
  occurred_at: string;
  actor: string;
  action: string;
  step: string | null;
  from_status: string | null;
  to_status: string | null;
  error_class: string | null;
  error_code: string | null;
  external_id: string | null;
  key_generation: number | null;
  detail: Record<string, unknown> | null;
}

const iso = (value: string): string => new Date(value).toISOString();

function toAuditEvent(row: AuditRow): AuditEvent {
  return {
    id: Number(row.id),
    occurredAt: iso(row.occurred_at),
    actor: row.actor,
    action: row.action,
    step: row.step,
    fromStatus: row.from_status,
    toStatus: row.to_status,
    errorClass: row.error_class,
    errorCode: row.error_code,
    externalId: row.external_id,
    keyGeneration: row.key_generation,
    detail: row.detail ?? {},
  };
}

interface OutboxRow {
  event_id: string;
  event_type: string;
  payload: Record<string, unknown>;
  created_at: string;
  published_at: string | null;
  attempts: number;
  last_error: string | null;
}

function toOutboxEvent(row: OutboxRow): OutboxEvent {
  return {
    eventId: row.event_id,
    eventType: row.event_type,
    payload: row.payload,
    createdAt: iso(row.created_at),
    publishedAt: row.published_at === null ? null : iso(row.published_at),
    attempts: row.attempts,
    lastError: row.last_error,
  };
}

export interface OperationHistory {
  readonly operation: Operation;
  /** A refund: the PaymentIntent it refunds (the duplicate remedy's named one, else its charge's). Null for a charge. */
  readonly refundedPaymentIntent: string | null;
  readonly events: readonly AuditEvent[];
  readonly outcomeEvents: readonly OutboxEvent[];
  /** The database clock when this was read (ages are measured from it, not from a laptop's clock). */
  readonly asOf: Date;
}

/** The operation, its whole audit trail and its outbox rows, in one round trip. Null: no such operation. */
export async function loadOperationHistory(db: Db, by: { readonly operationId: string } | { readonly orderId: string }): Promise<OperationHistory | null> {
  const where = 'operationId' in by ? 'p.id = $1::uuid' : `p.order_id = $1 AND p.kind = 'charge'`;
  const { rows } = await db.query<{ op: OperationRow; events: AuditRow[]; outbox: OutboxRow[]; as_of: Date; refunded_payment_intent: string | null }>(
    `SELECT to_jsonb(p) AS op, ${PAYMENT_INTENT_OF_REFUND('p')} AS refunded_payment_intent,
            coalesce((SELECT jsonb_agg((to_jsonb(e) - 'lease_token' - 'lease_until') || jsonb_build_object('detail', ${AUDIT_DETAIL('e')}) ORDER BY e.id)
                        FROM payment_operation_events e WHERE e.operation_id = p.id), '[]'::jsonb) AS events,
            coalesce((SELECT jsonb_agg(to_jsonb(o) - 'stored_payload' || jsonb_build_object('payload', o.payload) ORDER BY o.created_at, o.event_id) FROM outcome_events o WHERE o.operation_id = p.id), '[]'::jsonb) AS outbox,
            now() AS as_of
       FROM payment_operations p WHERE ${where}`,
    ['operationId' in by ? by.operationId : by.orderId],
  );
  const row = rows[0];
  if (!row) return null;
  return {
    operation: toOperation(row.op),
    refundedPaymentIntent: row.refunded_payment_intent,
    events: row.events.map(toAuditEvent),
    outcomeEvents: row.outbox.map(toOutboxEvent),
    asOf: row.as_of,
  };
}

export interface ReviewQueueFilter {
  /** Only operations in review for at least this long. */
  readonly olderThanMs?: number | undefined;
  /** Case-insensitive substring of the review reason. */
  readonly reasonContains?: string | undefined;
  readonly status?: 'pending' | 'unknown' | undefined;
  readonly limit: number;
}

export interface ReviewQueuePage {
  readonly asOf: Date;
  /** How many match the filter (the page may show fewer). */
  readonly total: number;
  /** Oldest in review first. `updatedAt` is when it entered review: nothing else writes an operation in review. */
  readonly operations: readonly Operation[];
  /** A refund's PaymentIntent, by operation id (refunds only). */
  readonly refundedPaymentIntents: Readonly<Record<string, string | null>>;
}

/** The review queue, oldest first. Reads the partial index of open operations only. */
export async function listReviewQueue(db: Db, filter: ReviewQueueFilter): Promise<ReviewQueuePage> {
  const { rows } = await db.query<{ as_of: Date; total: number; items: (OperationRow & { refunded_payment_intent: string | null })[] }>(
    `WITH queue AS (
       SELECT p.*, ${PAYMENT_INTENT_OF_REFUND('p')} AS refunded_payment_intent FROM payment_operations p
        WHERE p.status IN ('pending', 'unknown') AND p.review_reason IS NOT NULL
          AND ($1::bigint IS NULL OR p.updated_at <= now() - $1::bigint * interval '1 millisecond')
          AND ($2::text IS NULL OR strpos(lower(p.review_reason), lower($2::text)) > 0)
          AND ($3::text IS NULL OR p.status = $3::text)
     )
     SELECT now() AS as_of,
            (SELECT count(*)::int FROM queue) AS total,
            coalesce((SELECT jsonb_agg(to_jsonb(q) ORDER BY q.updated_at, q.id)
                        FROM (SELECT * FROM queue ORDER BY updated_at, id LIMIT $4) q), '[]'::jsonb) AS items`,
    [filter.olderThanMs ?? null, filter.reasonContains ?? null, filter.status ?? null, filter.limit],
  );
  const row = rows[0]!;
  return {
    asOf: row.as_of,
    total: row.total,
    operations: row.items.map(toOperation),
    refundedPaymentIntents: Object.fromEntries(row.items.filter((item) => item.kind === 'refund').map((item) => [item.id, item.refunded_payment_intent])),
  };
}

// ── Writing (one fenced statement each) ──────────────────────────────────────────────────────────

/** The operation as the operator saw it when the evidence was gathered: the write's fence. */
export interface ReviewFence {
  readonly operationId: string;
  readonly status: OperationStatus;
  readonly reviewReason: string;
  readonly keyGeneration: number;
}

export const fenceOf = (op: Operation): ReviewFence => ({
  operationId: op.id,
  status: op.status,
  reviewReason: op.reviewReason ?? '',
  keyGeneration: op.keyGeneration,
});

// Still in review, the same review, the same generation, nobody's lease.
const FENCE = `
  p.id = $1::uuid
  AND p.status IN ('pending', 'unknown') AND p.status = $2::text
  AND p.review_reason = $3::text
  AND p.key_generation = $4::int
  AND p.lease_token IS NULL`;

/** The `reason` an operator's failed resolution carries in its outcome event (a code, like a decline code). */
export const OPERATOR_FAILURE_REASON = 'operator_resolved';

export interface ResolveWrite {
  readonly fence: ReviewFence;
  readonly status: 'succeeded' | 'failed';
  /** The PaymentIntent that proves success; null keeps the row's (failed: a declined or canceled one). */
  readonly externalId: string | null;
  /** e.g. `operator:alice`. */
  readonly actor: string;
  /** Reason, evidence, transport: the audit event's detail. */
  readonly detail: Readonly<Record<string, unknown>>;
  /** Lease the outbox row to the caller for an immediate publish; null leaves it to the relay's sweep. */
  readonly publishLeaseMs: number | null;
}

export interface OperatorWriteResult {
  readonly operation: Operation;
  readonly auditEvent: AuditEvent;
  /** The outbox row written in the same statement (final states only). */
  readonly outcomeEvent: OutboxEvent | null;
}

/**
 * Settle an operation in review as succeeded or failed: state, audit event and outbox event in ONE
 * statement. The outbox row is built by the same SQL as the engine's (outboxInsertSql in
 * operations-store.ts), so an operator's outcome event honours the same contract.
 * Null: the fence matched nothing (the operation changed since it was read) and nothing was written.
 */
export async function resolveInReview(db: Db, write: ResolveWrite): Promise<OperatorWriteResult | null> {
  const { fence } = write;
  const { rows } = await db.query<{ op: OperationRow; audit: AuditRow; outbox: OutboxRow | null }>(
    `WITH upd AS (
       UPDATE payment_operations AS p SET
         status          = $5::text,
         external_id     = coalesce($6::text, p.external_id),
         review_reason   = NULL,
         next_attempt_at = NULL,
         settled_at      = now(),
         event_sequence  = p.event_sequence + 1,
         updated_at      = now()
        WHERE ${FENCE}
       RETURNING p.*
     ),
     audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, external_id, key_generation, detail)
       SELECT u.id, $7::text, 'operator_resolved', $2::text, u.status, u.external_id, u.key_generation, $8::jsonb FROM upd u
       RETURNING *
     ),
     outcome AS (
       SELECT u.*, CASE WHEN u.status = 'failed' THEN $9::text END AS failure_code, uuidv7() AS event_id
         FROM upd u
     ),
     outbox AS (
       ${outboxInsertSql('outcome', '$10')}
       RETURNING *, outcome_events.payload
     )
     SELECT to_jsonb(u) AS op, (SELECT to_jsonb(a) FROM audit a) AS audit, (SELECT to_jsonb(o) - 'stored_payload' FROM outbox o) AS outbox
       FROM upd u`,
    [
      fence.operationId,
      fence.status,
      fence.reviewReason,
      fence.keyGeneration,
      write.status,
      write.externalId,
      write.actor,
      JSON.stringify(write.detail),
      OPERATOR_FAILURE_REASON,
      write.publishLeaseMs,
    ],
  );
  const row = rows[0];
  if (!row) return null;
  return { operation: toOperation(row.op), auditEvent: toAuditEvent(row.audit), outcomeEvent: row.outbox ? toOutboxEvent(row.outbox) : null };
}

export interface ReissueWrite {
  readonly fence: ReviewFence;
  readonly actor: string;
  readonly detail: Readonly<Record<string, unknown>>;
  /** The watch the re-issue starts (watch.ts): an operator's re-issue is watched exactly like the engine's. */
  readonly watch: WatchTimings;
}

/**
 * Authorise a fresh attempt under key generation + 1: back to pending, out of review, due now. The
 * key window and the external id start over (the old PaymentIntents, all failed, stay in the audit
 * trail), so the engine's next claim creates with `payment-op:{id}:g{n+1}` and never sends the old
 * key again. One statement: state and audit event. No outbox row: nothing is final yet.
 */
export async function reissueInReview(db: Db, write: ReissueWrite): Promise<OperatorWriteResult | null> {
  const { fence } = write;
  const { rows } = await db.query<{ op: OperationRow; audit: AuditRow }>(
    `WITH upd AS (
       UPDATE payment_operations AS p SET ${REISSUE_SET}
        WHERE ${FENCE}
       RETURNING p.*, old.external_id AS previous_external_id, old.first_attempted_at AS retired_first_sent_at
     ),
     watch AS (
       ${watchOnReissueSql('upd', '$7', '$8')}
     ),
     audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, external_id, key_generation, detail)
       SELECT u.id, $5::text, 'operator_reissued', $2::text, u.status, u.previous_external_id, u.key_generation, $6::jsonb FROM upd u
       RETURNING *
     )
     SELECT to_jsonb(u) AS op, (SELECT to_jsonb(a) FROM audit a) AS audit FROM upd u`,
    [fence.operationId, fence.status, fence.reviewReason, fence.keyGeneration, write.actor, JSON.stringify(write.detail), write.watch.firstAfterMs, write.watch.finalAfterFirstSendMs],
  );
  const row = rows[0];
  if (!row) return null;
  return { operation: toOperation(row.op), auditEvent: toAuditEvent(row.audit), outcomeEvent: null };
}

/** An `operator_note` on any operation (final ones included): notes and refused attempts. Changes no state. */
export async function appendOperatorNote(
  db: Db,
  note: { readonly operationId: string; readonly actor: string; readonly detail: Readonly<Record<string, unknown>> },
): Promise<AuditEvent | null> {
  const { rows } = await db.query<{ audit: AuditRow }>(
    `WITH audit AS (
       INSERT INTO payment_operation_events (operation_id, actor, action, from_status, to_status, external_id, key_generation, detail)
       SELECT p.id, $2::text, 'operator_note', p.status, p.status, p.external_id, p.key_generation, $3::jsonb
         FROM payment_operations p WHERE p.id = $1::uuid
       RETURNING *
     )
     SELECT to_jsonb(a) AS audit FROM audit a`,
    [note.operationId, note.actor, JSON.stringify(note.detail)],
  );
  return rows[0] ? toAuditEvent(rows[0].audit) : null;
}
