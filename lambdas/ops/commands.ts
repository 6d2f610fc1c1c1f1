// The operator commands: one core for both entry points (the CLI on a laptop, the ops Lambda in the
// VPC). A command takes a parsed Command and an OpsContext (a database, a lazy Stripe look-up, an
// optional publisher) and returns plain JSON-safe data; the entry points only move argv in and the
// OpsResponse out, so `--json` on a laptop and the Lambda's answer are the same document.
import { publishLeased, type EventPublisher } from '../events/outbox.ts';
import type { Db } from '../payments/db.ts';
import { DEFAULT_POLICY, idempotencyKey, KIND_RULES, watchTimings, type EnginePolicy } from '../payments/decisions.ts';
import { ChargeEngine } from '../payments/engine.ts';
import { FailureKind, type PaymentGateway } from '../payments/gateway.ts';
import {
  appendOperatorNote,
  checkReviewable,
  DEFAULT_REVIEW_POLICY,
  fenceOf,
  gatherStripeEvidence,
  isInReview,
  judgeNoEffect,
  judgeResolveSucceeded,
  listReviewQueue,
  loadOperationHistory,
  reissueInReview,
  resolveInReview,
  type OperationHistory,
  type OperatorWriteResult,
  REVIEW_KINDS,
  type ReviewPolicy,
  type StripeLookup,
  type StripeEvidence,
  type Verdict,
} from '../payments/review.ts';
import { listFindings, resolveFinding } from '../payments/inbox-store.ts';
import { eraseCustomer, ErasureRefused } from '../payments/erasure-store.ts';
import { findOperationByOrder, findRefundsOfOrder } from '../payments/operations-store.ts';
import type { Operation, PaymentIntentView } from '../payments/types.ts';
import { ConflictError, NotFoundError, OpsError, RefusedError, StripeUnavailableError, UsageError } from './errors.ts';
import { isAction, parseInvocation, usage, type Command, type CommandName, type OperatorAction } from './parse.ts';
import { listRejected, loadStats } from './queries.ts';
import { failure, type OpsResponse } from './response.ts';
import {
  operationView,
  type ActionResult,
  type NoteResult,
  type OperationDetailResult,
  type RefundRemedyResult,
  type ReissueResult,
  type RemedyView,
  type ResultOf,
  type ReviewOptions,
} from './results.ts';

export interface OpsContext {
  readonly db: Db;
  /** Created on first use: list, stats and notes never need Stripe (or its key). */
  readonly stripe: () => Promise<StripeLookup>;
  /** Publishes a resolution's outcome event at once; null (or absent) leaves it to the relay's sweep. */
  readonly publisher?: () => EventPublisher | null;
  readonly policy?: ReviewPolicy;
  /** How the command arrived (`{kind: 'lambda', requestId}` / `{kind: 'direct', host}`): written into every audit event. */
  readonly transport: Readonly<Record<string, unknown>>;
  /**
   * Who runs it: the caller STS verified (the ops function; the action's actor is then
   * `operator:<ARN>`), or nobody verified (a laptop, a bastion: the actor is the name said). Written
   * into every audit event. @default unverified
   */
  readonly identity?: OperatorIdentity;
  /** The engine's Stripe gateway, created on first use: only `refunds create` sends anything. */
  readonly gateway?: () => Promise<PaymentGateway>;
  /** The deployment's engine policy (LEASE_MS, …), for the engine `refunds create` runs. */
  readonly enginePolicy?: Partial<EnginePolicy>;
}

/** Who runs a command (see OpsContext.identity). */
export type OperatorIdentity =
  | {
      readonly verified: true;
      readonly method: 'sts:GetCallerIdentity';
      readonly arn: string;
      readonly account: string;
      readonly userId: string;
      /** The allow-list entry (OPS_OPERATOR_ARNS) the caller matched; null for a reader not on it. */
      readonly allowedBy: string | null;
    }
  | { readonly verified: false };

/**
 * The identity part of every audit detail an operator command writes: what was verified, or that
 * nothing was — and the name said (`--actor` / the OS user), as the actor where nothing is verified,
 * as a free-text note beside a verified identity.
 */
export function identityDetail(ctx: Pick<OpsContext, 'identity'>, action: OperatorAction): Record<string, unknown> {
  const identity = ctx.identity ?? { verified: false };
  if (identity.verified) return { identity, ...(action.claimed ? { actorNote: action.claimed } : {}) };
  return { identity: { verified: false, claimed: action.claimed, claimedFrom: action.claimedFrom } };
}

export type { OpsResponse, ResponseCommand } from './response.ts';

// ── Commands ─────────────────────────────────────────────────────────────────────────────────────

async function historyOf(ctx: OpsContext, operationId: string): Promise<OperationHistory> {
  const history = await loadOperationHistory(ctx.db, { operationId });
  if (!history) throw new NotFoundError(`payment operation ${operationId} does not exist`);
  return history;
}

function refuseUnless(verdict: Verdict, details?: Readonly<Record<string, unknown>>): void {
  if (!verdict.allowed) throw new RefusedError(verdict.reason, details);
}

/** Evidence for the audit trail: what Stripe showed, compactly (metadata says which operation and key generation). */
function evidenceDetail(evidence: StripeEvidence): Record<string, unknown> {
  if (evidence.kind === 'refund') {
    return {
      checkedAt: evidence.checkedAt,
      complete: evidence.complete,
      refundedPaymentIntent: evidence.refundedPaymentIntent,
      refunds: evidence.refunds.map((r) => ({ id: r.id, status: r.status, amount: r.amount, currency: r.currency, paymentIntent: r.paymentIntent, metadata: r.metadata, foundBy: r.foundBy })),
      ...(evidence.unrelated.length > 0
        ? { unrelated: evidence.unrelated.map((r) => ({ id: r.id, status: r.status, amount: r.amount, currency: r.currency, metadata: r.metadata })) }
        : {}),
      missing: evidence.missing,
      problems: evidence.problems,
    };
  }
  return {
    checkedAt: evidence.checkedAt,
    complete: evidence.complete,
    paymentIntents: evidence.paymentIntents.map((pi) => ({
      id: pi.id,
      status: pi.status,
      amount: pi.amount,
      currency: pi.currency,
      metadata: pi.metadata,
      created: pi.created,
      foundBy: pi.foundBy,
    })),
    ...(evidence.unrelated.length > 0
      ? { unrelated: evidence.unrelated.map((pi) => ({ id: pi.id, status: pi.status, amount: pi.amount, currency: pi.currency, metadata: pi.metadata })) }
      : {}),
    missing: evidence.missing,
    problems: evidence.problems,
  };
}

async function gather(ctx: OpsContext, history: OperationHistory, extraIds: readonly string[] = []): Promise<StripeEvidence> {
  const lookup = await ctx.stripe();
  // The operation's kind chooses the reader (review.ts EVIDENCE_READERS); a refund's needs the PaymentIntent it refunds.
  return gatherStripeEvidence(lookup, history.operation, history.events, { extraIds, refundedPaymentIntent: history.refundedPaymentIntent });
}

function optionsFor(history: OperationHistory, evidence: StripeEvidence, policy: ReviewPolicy): ReviewOptions | null {
  const op = history.operation;
  if (!isInReview(op)) return null;
  const kind = REVIEW_KINDS[op.kind];
  const reviewable = checkReviewable(op);
  const noEffect = reviewable.allowed ? judgeNoEffect(history.operation, evidence, history.events, history.asOf, policy) : reviewable;
  const succeeded = reviewable.allowed ? kind.own(evidence).filter((o) => o.status === 'succeeded') : [];
  const judged = succeeded.map((o) => ({ o, verdict: judgeResolveSucceeded(op, o.id, o, evidence.refundedPaymentIntent) }));
  return {
    proofFlag: kind.proofFlag,
    resolveSucceeded: judged.filter((j) => j.verdict.allowed).map((j) => j.o.id),
    notAcceptable: judged.flatMap((j) => (j.verdict.allowed ? [] : [{ id: j.o.id, reason: j.verdict.reason }])),
    resolveFailed: noEffect,
    reissue: noEffect,
  };
}

async function detail(ctx: OpsContext, history: OperationHistory, withStripe: boolean): Promise<OperationDetailResult> {
  let stripe: StripeEvidence | null = null;
  let stripeSkipped: string | null = withStripe ? null : 'not asked (add --stripe)';
  if (withStripe) {
    try {
      stripe = await gather(ctx, history);
    } catch (error) {
      // A show without Stripe is still worth having (no key on this laptop): say why it is missing.
      if (!(error instanceof OpsError)) throw error;
      stripeSkipped = error.message;
    }
  }
  const rejected = await listRejected(ctx.db, { sinceMs: null, reasonCodes: null, orderId: history.operation.orderId, limit: 100, withBody: false });
  const charge = history.operation.kind === 'charge' ? history.operation : await findOperationByOrder(ctx.db, history.operation.orderId);
  const refunds = await findRefundsOfOrder(ctx.db, history.operation.orderId);
  return {
    asOf: history.asOf.toISOString(),
    operation: operationView(history.operation, history.refundedPaymentIntent),
    auditTrail: history.events,
    outcomeEvents: history.outcomeEvents,
    rejectedMessages: rejected.messages,
    orderRefunds: refunds.map((r) => operationView(r, charge?.externalId ?? null)),
    stripe,
    stripeSkipped,
    options: stripe ? optionsFor(history, stripe, ctx.policy ?? DEFAULT_REVIEW_POLICY) : null,
  };
}

/** The audit detail every operator write carries. */
function actionDetail(ctx: OpsContext, command: string, action: OperatorAction, history: OperationHistory, extra: Record<string, unknown>) {
  return {
    reason: action.reason,
    command,
    transport: ctx.transport,
    ...identityDetail(ctx, action),
    // What was decided: the row loses its review reason, the audit trail keeps it.
    reviewed: { status: history.operation.status, reviewReason: history.operation.reviewReason, keyGeneration: history.operation.keyGeneration },
    ...extra,
  };
}

async function conflict(ctx: OpsContext, operationId: string, what: string): Promise<never> {
  const now = await loadOperationHistory(ctx.db, { operationId });
  throw new ConflictError(
    `operation ${operationId} changed while the evidence was gathered (now ${now?.operation.status ?? 'missing'}, ` +
      `key generation ${now?.operation.keyGeneration ?? '?'}, ${now && isInReview(now.operation) ? 'in review' : 'not in review'}); ` +
      `nothing was written — run ${what} again to judge it as it is now`,
    now ? { operation: operationView(now.operation) } : {},
  );
}

async function publishNow(ctx: OpsContext, written: OperatorWriteResult): Promise<boolean | null> {
  const publisher = ctx.publisher?.() ?? null;
  if (!publisher || !written.outcomeEvent) return null;
  try {
    const event = written.outcomeEvent;
    const summary = await publishLeased(ctx.db, publisher, [
      { eventId: event.eventId, operationId: written.operation.id, eventType: event.eventType, payload: event.payload },
    ]);
    return summary.published === 1;
  } catch {
    // The resolution is committed; the row stays in the outbox and the relay's sweep sends it.
    return false;
  }
}

async function resolve(ctx: OpsContext, command: Extract<Command, { name: 'review resolve' }>): Promise<ActionResult> {
  const history = await historyOf(ctx, command.operationId);
  const op = history.operation;
  refuseUnless(checkReviewable(op));
  const kind = REVIEW_KINDS[op.kind];
  const name = KIND_RULES[op.kind].objectName;
  // The proof must be of the operation's kind: a PaymentIntent for a charge, a Refund for a refund.
  const proofId = op.kind === 'refund' ? command.stripeRefundId : command.paymentIntentId;
  const wrongProof = op.kind === 'refund' ? command.paymentIntentId : command.stripeRefundId;
  if (wrongProof !== null) {
    throw new UsageError(`operation ${op.id} is a ${op.kind}: its proof is a ${name}, given with ${kind.proofFlag} (not ${wrongProof})`);
  }
  // Stripe first, with no transaction open; the write below is fenced on what was read above.
  const evidence = await gather(ctx, history, proofId ? [proofId] : []);
  const warnings: string[] = [];
  let others: readonly PaymentIntentView[] = [];
  const refusalDetails = { evidence: evidenceDetail(evidence) };
  if (command.as === 'succeeded') {
    const id = proofId!;
    const found = [...kind.own(evidence), ...evidence.unrelated].find((o) => o.id === id && o.foundBy.includes('retrieve')) ?? null;
    if (found === null && !evidence.missing.includes(id)) {
      throw new StripeUnavailableError(`${name} ${id} could not be retrieved: ${evidence.problems.join('; ')}`, refusalDetails);
    }
    refuseUnless(judgeResolveSucceeded(op, id, found, evidence.refundedPaymentIntent), refusalDetails);
    others = kind.own(evidence).filter((o) => o.id !== id && o.status === 'succeeded');
    // A refund cannot be refunded: a second succeeded Refund is for a human. A second charge is
    // refunded by the duplicate-charge remedy once the resolution is written (below).
    if (others.length > 0 && op.kind === 'refund') {
      warnings.push(`other succeeded Refunds exist for this operation (${others.map((o) => o.id).join(', ')}): the order was refunded more than once — escalate`);
    }
    if (!evidence.complete) warnings.push(`duplicates could not be ruled out: ${evidence.problems.join('; ')}`);
  } else {
    refuseUnless(judgeNoEffect(history.operation, evidence, history.events, history.asOf, ctx.policy ?? DEFAULT_REVIEW_POLICY), refusalDetails);
  }

  const publisher = ctx.publisher?.() ?? null;
  const written = await resolveInReview(ctx.db, {
    fence: fenceOf(op),
    status: command.as,
    externalId: command.as === 'succeeded' ? proofId : null,
    actor: command.action.actor,
    detail: actionDetail(ctx, `review resolve --as ${command.as}`, command.action, history, {
      resolution: command.as,
      ...(command.paymentIntentId ? { paymentIntent: command.paymentIntentId } : {}),
      ...(command.stripeRefundId ? { refund: command.stripeRefundId } : {}),
      evidence: evidenceDetail(evidence),
      ...(warnings.length > 0 ? { warnings } : {}),
    }),
    publishLeaseMs: publisher ? (ctx.enginePolicy?.publishLeaseMs ?? DEFAULT_POLICY.publishLeaseMs) : null,
  });
  if (!written) return conflict(ctx, op.id, 'review resolve');
  const published = await publishNow(ctx, written);
  const remedies: RemedyView[] = [];
  if (op.kind === 'charge' && others.length > 0) {
    // The charge is now final-succeeded with the operator's PaymentIntent: every other one that
    // charged the order is the remedy's (docs/model.md, the duplicate-charge remedy), with the operator as actor and this command as evidence.
    const evidenceOf = { evidence: 'operator', by: 'operator', command: `review resolve --as succeeded`, reason: command.action.reason, transport: ctx.transport, ...identityDetail(ctx, command.action) };
    const engine = await remedyEngine(ctx, command.action.actor);
    for (const other of others) {
      const { view: made } = await remedy(engine, op.id, other, evidenceOf);
      remedies.push(made);
      if (made.refundOperationId === null) {
        warnings.push(`${other.id} also charged this operation but is not refunded automatically (${made.disposition}): see runbook "Refund operations: review, refusals, remedy"`);
      }
    }
  }
  return {
    operation: operationView(written.operation, history.refundedPaymentIntent),
    auditEvent: written.auditEvent,
    outcomeEvent: written.outcomeEvent,
    published,
    evidence,
    warnings,
    remedies,
  };
}

/**
 * The duplicate-charge remedy through the engine (judgeDuplicateCharge decides; the refund operation
 * is made once per PaymentIntent and sent now). Without a gateway here nothing is made, and the
 * view says why: the operator runs `refunds remedy` where Stripe can be reached.
 */
async function remedyEngine(ctx: OpsContext, actor: string): Promise<ChargeEngine | null> {
  return ctx.gateway ? new ChargeEngine({ db: ctx.db, gateway: await ctx.gateway(), actor, ...(ctx.enginePolicy ? { policy: ctx.enginePolicy } : {}) }) : null;
}

async function remedy(
  engine: ChargeEngine | null,
  chargeOperationId: string,
  pi: PaymentIntentView,
  evidence: Record<string, unknown>,
): Promise<{ readonly view: RemedyView; readonly refused: string | null }> {
  if (!engine) return { view: { paymentIntentId: pi.id, refundOperationId: null, created: false, status: null, disposition: 'no Stripe gateway at this entry point' }, refused: null };
  const done = await engine.remedyDuplicateCharge(chargeOperationId, pi, evidence);
  if (done.verdict.kind !== 'refund') {
    return { view: { paymentIntentId: pi.id, refundOperationId: null, created: false, status: null, disposition: done.verdict.reason }, refused: done.verdict.reason };
  }
  return {
    view: { paymentIntentId: pi.id, refundOperationId: done.refundOperationId, created: done.created, status: done.execution?.status ?? null, disposition: done.execution?.disposition ?? null },
    refused: null,
  };
}

/**
 * `refunds remedy <order> --payment-intent pi_…`: a duplicate charge found by hand. Stripe is asked
 * first (the PaymentIntent must exist, have succeeded, be ours — this order's operation or order id
 * — and be the order's amount, currency and customer, and not the charge's own); then the engine
 * makes the refund operation (reason duplicate, refund id duplicate:{pi}, once) and sends it.
 */
async function refundsRemedy(ctx: OpsContext, command: Extract<Command, { name: 'refunds remedy' }>): Promise<RefundRemedyResult> {
  const charge = await findOperationByOrder(ctx.db, command.orderId);
  if (!charge) throw new NotFoundError(`no charge operation for order "${command.orderId}"`);
  if (charge.status !== 'succeeded' || charge.externalId === null) {
    throw new RefusedError(`the charge of order ${command.orderId} is ${charge.status}${charge.reviewReason ? ' (in review)' : ''}: which PaymentIntent is the extra one is not settled — resolve the charge first (review show ${charge.id})`);
  }
  if (command.paymentIntentId === charge.externalId) throw new RefusedError(`${command.paymentIntentId} is the charge's own PaymentIntent: the remedy never refunds it`);
  if (!ctx.gateway) throw new StripeUnavailableError('this entry point has no Stripe gateway configured: refunds remedy cannot send');
  const lookup = await ctx.stripe();
  // The extra PaymentIntent of a direct charge is on the charge's connected account, as its refund will be.
  const got = await lookup.retrieve(command.paymentIntentId, { account: charge.account ?? null });
  if (!got.ok) {
    if (got.failure.kind === FailureKind.notFound) throw new RefusedError(`${command.paymentIntentId} does not exist at Stripe`);
    throw new StripeUnavailableError(`${command.paymentIntentId} could not be retrieved: ${got.failure.errorClass}: ${got.failure.message}`);
  }
  const pi = got.value;
  const stripeDetail = { paymentIntent: { id: pi.id, status: pi.status, amount: pi.amount, currency: pi.currency, customer: pi.customer ?? null, metadata: pi.metadata } };
  // The engine judges (judgeDuplicateCharge, the remedy's one rule) and makes nothing it refuses.
  const { view: made, refused } = await remedy(await remedyEngine(ctx, command.action.actor), charge.id, pi, {
    evidence: 'operator',
    by: 'operator',
    command: 'refunds remedy',
    reason: command.action.reason,
    transport: ctx.transport,
    ...identityDetail(ctx, command.action),
    ...stripeDetail,
  });
  if (refused !== null) throw new RefusedError(`not refunded as a duplicate: ${refused}`, stripeDetail);
  const refund = made.refundOperationId ? (await historyOf(ctx, made.refundOperationId)).operation : null;
  return { charge: operationView(charge), remedy: made, refund: refund ? operationView(refund) : null };
}

async function reissue(ctx: OpsContext, command: Extract<Command, { name: 'review reissue' }>): Promise<ReissueResult> {
  const history = await historyOf(ctx, command.operationId);
  const op = history.operation;
  refuseUnless(checkReviewable(op));
  const evidence = await gather(ctx, history);
  refuseUnless(judgeNoEffect(history.operation, evidence, history.events, history.asOf, ctx.policy ?? DEFAULT_REVIEW_POLICY), { evidence: evidenceDetail(evidence) });
  const previousKey = idempotencyKey(op.id, op.keyGeneration);
  const newKey = idempotencyKey(op.id, op.keyGeneration + 1);
  const written = await reissueInReview(ctx.db, {
    fence: fenceOf(op),
    actor: command.action.actor,
    watch: watchTimings(ctx.enginePolicy),
    detail: actionDetail(ctx, 'review reissue --confirm-no-charge', command.action, history, {
      confirmedNoCharge: true,
      previousKeyGeneration: op.keyGeneration,
      previousKey,
      newKey,
      evidence: evidenceDetail(evidence),
    }),
  });
  if (!written) return conflict(ctx, op.id, 'review reissue');
  return {
    operation: operationView(written.operation, history.refundedPaymentIntent),
    auditEvent: written.auditEvent,
    outcomeEvent: null,
    published: null,
    evidence,
    warnings: [],
    previousKey,
    newKey,
  };
}

async function note(ctx: OpsContext, command: Extract<Command, { name: 'review note' }>): Promise<NoteResult> {
  const event = await appendOperatorNote(ctx.db, {
    operationId: command.operationId,
    actor: command.action.actor,
    detail: { reason: command.action.reason, command: 'review note', transport: ctx.transport, ...identityDetail(ctx, command.action) },
  });
  if (!event) throw new NotFoundError(`payment operation ${command.operationId} does not exist`);
  const history = await historyOf(ctx, command.operationId);
  return { operation: operationView(history.operation), auditEvent: event };
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The reader of raw bodies as recorded: the verified ARN, else the name said. */
function rawBodyReader(ctx: OpsContext): string {
  return ctx.identity?.verified ? `operator:${ctx.identity.arn}` : 'operator:unverified';
}

async function execute(ctx: OpsContext, command: Exclude<Command, { name: 'help' }>): Promise<ResultOf[CommandName]> {
  switch (command.name) {
    case 'review list': {
      const page = await listReviewQueue(ctx.db, command.filter);
      const asOf = page.asOf.getTime();
      // A refund is not claimable while its charge is open, so a refund of a charge in review has no
      // review reason of its own: it waits for this human too, and is counted beside its charge.
      const charges = page.operations.filter((op) => op.kind === 'charge');
      const { rows: waiting } = charges.length === 0
        ? { rows: [] as { order_id: string; n: number }[] }
        : await ctx.db.query<{ order_id: string; n: number }>(
            `SELECT order_id, count(*)::int AS n FROM payment_operations
              WHERE kind = 'refund' AND order_id = ANY($1::text[]) AND status IN ('pending', 'unknown') AND review_reason IS NULL
              GROUP BY order_id`,
            [charges.map((op) => op.orderId)],
          );
      const waitingByOrder = new Map(waiting.map((w) => [w.order_id, w.n]));
      return {
        asOf: page.asOf.toISOString(),
        total: page.total,
        operations: page.operations.map((op) => ({
          ...operationView(op, page.refundedPaymentIntents[op.id] ?? null),
          refundsWaiting: op.kind === 'charge' ? (waitingByOrder.get(op.orderId) ?? 0) : 0,
          inReviewSince: op.updatedAt.toISOString(),
          inReviewSeconds: Math.max(0, Math.round((asOf - op.updatedAt.getTime()) / 1000)),
        })),
      };
    }
    case 'review show':
      return detail(ctx, await historyOf(ctx, command.operationId), true);
    case 'operations show': {
      const key = command.orderOrOperation;
      // Order ids are the producer's; an operation id is accepted too (what the alarms and logs carry).
      const history =
        (await loadOperationHistory(ctx.db, { orderId: key })) ?? (UUID.test(key) ? await loadOperationHistory(ctx.db, { operationId: key.toLowerCase() }) : null);
      if (!history) throw new NotFoundError(`no operation for order "${key}"`);
      return detail(ctx, history, command.stripe);
    }
    case 'review resolve':
      return resolve(ctx, command);
    case 'review reissue':
      return reissue(ctx, command);
    case 'review note':
      return note(ctx, command);
    case 'rejected list':
      // Producers' raw bodies are read only with a record of who read them, in the same statement.
      return listRejected(
        ctx.db,
        command,
        command.withBody
          ? {
              actor: rawBodyReader(ctx),
              verified: ctx.identity?.verified ?? false,
              command: 'rejected list --with-body',
              detail: { transport: ctx.transport, identity: ctx.identity ?? { verified: false }, filter: { sinceMs: command.sinceMs, reasonCodes: command.reasonCodes, orderId: command.orderId, limit: command.limit } },
            }
          : undefined,
      );
    case 'findings list':
      return listFindings(ctx.db, command);
    case 'findings resolve': {
      const done = await resolveFinding(ctx.db, command.findingId, command.action.actor, command.action.reason);
      if (!done) throw new NotFoundError(`finding ${command.findingId} does not exist`);
      if (done.alreadyResolved) {
        throw new ConflictError(`finding ${command.findingId} was already resolved by ${done.finding.resolvedBy} at ${done.finding.resolvedAt}`);
      }
      return { finding: done.finding };
    }
    case 'refunds list': {
      const charge = await findOperationByOrder(ctx.db, command.orderId);
      if (!charge) throw new NotFoundError(`no charge operation for order "${command.orderId}"`);
      const refunds = await findRefundsOfOrder(ctx.db, command.orderId);
      // A refund Stripe failed after it succeeded stays `succeeded` (final; the request executed) and
      // carries the mark (migrations/009, set by its fact event's insert trigger): it gave nothing back,
      // and holds nothing of the charge. refunded + inFlight below MUST be what holds money by
      // operations-store.ts REFUND_HOLDS (and 009's payment_operations_refund_rules): the order's own
      // refunds (no refund_payment_intent) that are not `failed` and not marked — a marked one is never
      // open (the guard), so open = in flight and succeeded-unmarked = refunded. Change one, change all.
      const own = refunds.filter((r) => r.refund?.paymentIntentId === null);
      const reversedOf = (r: Operation) => Boolean(r.refund?.failedAfterSuccess);
      const refunded = own.filter((r) => r.status === 'succeeded' && !reversedOf(r)).reduce((sum, r) => sum + r.amount, 0);
      const reversed = own.filter(reversedOf).reduce((sum, r) => sum + r.amount, 0);
      const inFlight = own.filter((r) => r.status === 'pending' || r.status === 'unknown').reduce((sum, r) => sum + r.amount, 0);
      return {
        asOf: new Date().toISOString(),
        orderId: command.orderId,
        charge: operationView(charge),
        refunds: refunds.map((r) => {
          const view = operationView(r, charge.externalId);
          return {
            ...view,
            refundId: r.refund?.refundId ?? '',
            refundReason: r.refund?.reason ?? null,
            refundedPaymentIntent: r.refund?.paymentIntentId ?? null,
            failedAfterSuccess: view.refund?.failedAfterSuccess ?? null,
          };
        }),
        refunded,
        reversed,
        inFlight,
        left: charge.status === 'succeeded' ? Math.max(0, charge.amount - refunded - inFlight) : 0,
      };
    }
    case 'refunds create': {
      if (!ctx.gateway) throw new StripeUnavailableError('this entry point has no Stripe gateway configured: refunds create cannot send');
      const engine = new ChargeEngine({ db: ctx.db, gateway: await ctx.gateway(), actor: command.action.actor, ...(ctx.enginePolicy ? { policy: ctx.enginePolicy } : {}) });
      // The operator's reason and identity go into the refund's own `requested` audit event, written
      // by the statement that makes the refund: there is no refund without them.
      const why = { reason: command.action.reason, command: 'refunds create', amount: command.amount, transport: ctx.transport, ...identityDetail(ctx, command.action) };
      const result = await engine.processRefund(
        { orderId: command.orderId, refundId: command.refundId, amount: command.amount, reason: command.refundReason },
        { requestedDetail: why },
      );
      // A rejection is a refusal with the engine's reason; nothing was created or sent.
      if (result.rejection) throw new RefusedError(`${result.rejection.code}: ${result.rejection.message}`, { code: result.rejection.code });
      // The same refund id again made nothing: the trail says who asked again, and why.
      const auditEvent = result.created
        ? null
        : await appendOperatorNote(ctx.db, { operationId: result.operationId!, actor: command.action.actor, detail: { ...why, refundId: command.refundId, repeated: true } });
      const history = await historyOf(ctx, result.operationId!);
      return {
        operation: operationView(history.operation),
        disposition: result.execution?.disposition ?? null,
        auditEvent: auditEvent ?? history.events.find((e) => e.action === 'requested') ?? null,
      };
    }
    case 'refunds remedy':
      return refundsRemedy(ctx, command);
    case 'refunds show': {
      const history = await historyOf(ctx, command.operationId);
      if (history.operation.kind !== 'refund') throw new NotFoundError(`operation ${command.operationId} is a ${history.operation.kind}, not a refund; see operations show`);
      return detail(ctx, history, command.stripe);
    }
    case 'erase customer': {
      // The customer id itself goes nowhere but the statement: the record names it by its SHA-256.
      const detail = { command: 'erase customer', transport: ctx.transport, ...identityDetail(ctx, command.action) };
      try {
        const erased = await eraseCustomer(ctx.db, {
          customerId: command.customerId,
          actor: command.action.actor,
          verified: ctx.identity?.verified ?? false,
          reason: command.action.reason,
          detail,
        });
        return { erasure: erased };
      } catch (error) {
        if (error instanceof ErasureRefused) throw new RefusedError(error.message, { code: 'not_final' });
        throw error;
      }
    }
    case 'stats':
      return loadStats(ctx.db);
  }
}

/**
 * A refused action is an action too: who tried what, and why it was refused, goes into the audit
 * trail as an operator_note (the state is untouched). Best effort: the refusal is what the operator
 * must see even if this write fails.
 */
async function auditRefusal(ctx: OpsContext, command: Command, error: OpsError): Promise<void> {
  // A refused `refunds create` / `refunds remedy` made no operation to note it on (the CLI shows the reason).
  if (!isAction(command) || command.name === 'review note' || command.name === 'findings resolve' || command.name === 'refunds create' || command.name === 'refunds remedy' || command.name === 'erase customer' || error.code === 'not_found' || error.code === 'config') return;
  await appendOperatorNote(ctx.db, {
    operationId: command.operationId,
    actor: command.action.actor,
    detail: {
      reason: command.action.reason,
      command: command.name,
      transport: ctx.transport,
      ...identityDetail(ctx, command.action),
      refused: { code: error.code, message: error.message },
      ...(error.details ?? {}),
    },
  }).catch(() => undefined);
}

/** Run a parsed command. OpsErrors become a failure response; anything else (the database is down) is thrown. */
export async function runCommand(command: Command, context: () => Promise<OpsContext> | OpsContext): Promise<OpsResponse> {
  if (command.name === 'help') return { ok: true, exitCode: 0, command: 'help', result: { usage: usage(command.topic) } };
  let ctx: OpsContext | undefined;
  try {
    ctx = await context();
    const result = await execute(ctx, command);
    return { ok: true, exitCode: 0, command: command.name, result } as OpsResponse;
  } catch (error) {
    if (!(error instanceof OpsError)) throw error;
    if (ctx) await auditRefusal(ctx, command, error);
    return failure(command.name, error);
  }
}

/** argv in, OpsResponse out: what the ops Lambda does with its event. */
export async function runOps(
  argv: readonly string[],
  options: {
    readonly defaultActor: string | null;
    /** `--actor` is a note: the actor is the identity `gate` establishes. */
    readonly actorOptional?: boolean;
    /** Before any connection: who calls, and may they run this (throws an OpsError; may replace the action's actor). */
    readonly gate?: (command: Exclude<Command, { name: 'help' }>) => Promise<Exclude<Command, { name: 'help' }>>;
    readonly context: () => Promise<OpsContext> | OpsContext;
  },
): Promise<OpsResponse> {
  let command: Command;
  try {
    const invocation = parseInvocation(argv, options.defaultActor, { actorOptional: options.actorOptional ?? false });
    if (invocation.transport.lambda || invocation.transport.endpoint || invocation.transport.region) {
      throw new UsageError('--lambda, --region and --endpoint are options of the CLI, not of the ops function');
    }
    command = invocation.command;
  } catch (error) {
    if (error instanceof UsageError) return failure(null, error);
    throw error;
  }
  if (command.name !== 'help' && options.gate) {
    try {
      command = await options.gate(command);
    } catch (error) {
      // Refused before anything was read: nothing to note on an operation (the function's log has it).
      if (error instanceof OpsError) return failure(command.name, error);
      throw error;
    }
  }
  return runCommand(command, options.context);
}

/** Commands that read producers' raw bodies: recorded (operator_reads), and gated like writes in the ops function. */
export const readsRawBodies = (command: Command): boolean => command.name === 'rejected list' && command.withBody;
