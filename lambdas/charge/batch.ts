// One SQS batch, worked as a batch (docs/architecture.md#the-charge-handler). Knows nothing of middy, Powertools or the
// environment: the handler passes its dependencies in, and so can a test or a benchmark.
//
//   parse every body ──▶ rejects: one INSERT (if any) ──▶ engine: one statement makes every request
//   durable and claims it ──▶ Stripe, concurrently ──▶ one statement records every outcome (+ audit,
//   + outbox) ──▶ conflicts: one INSERT (if any) ──▶ PutEvents for the batch's events ──▶ response
//
// The response acknowledges every record whose operation (or rejection) is durable, whatever its
// status: the database is the only retry loop. Only what could not be made durable goes back to SQS.
import type { SQSBatchResponse, SQSRecord } from 'aws-lambda';
import type { Db } from '../payments/db.ts';
import { DEFAULT_POLICY, type EnginePolicy } from '../payments/decisions.ts';
import { ChargeEngine, mapBounded } from '../payments/engine.ts';
import { OutcomesNotRecordedError, type Execution, type RefundRequestResult, type RequestResult } from '../payments/request-results.ts';
import type { PaymentGateway } from '../payments/gateway.ts';
import { DEFAULT_MAX_AMOUNT, legacyDeduplicationId, legacyRefundDeduplicationId, parseQueueMessage } from '../payments/message.ts';
import type { OutcomeEventRow } from '../payments/operations-store.ts';
import { recordRejectedMessages, RejectReason, type RejectedMessage } from '../payments/rejected-store.ts';
import type { AuthorizationRequestResult } from '../payments/authorization-requests.ts';
import type { AuthorizationInput, ChargeInput, OperationStatus, RefundInput } from '../payments/types.ts';
import { publishLeased, type EventPublisher } from '../events/outbox.ts';
import { describeError, silentLog, type InvocationClock, type LogSink } from '../runtime/observability.ts';

export interface ChargeBatchDeps {
  readonly db: Db;
  readonly gateway: PaymentGateway;
  /** Null: events wait in the outbox for the reconciler's sweep (no bus configured). */
  readonly publisher: EventPublisher | null;
  /**
   * No Stripe call starts with less time left than this: the worst-case duration of one gateway call
   * (timeout × attempts + SDK backoff) plus a safety margin for the outcome write.
   */
  readonly minTimeToCallMs: number;
  /**
   * Worst-case duration of one gateway call alone (worstCaseCallMs): no call starts later than the
   * claim's lease minus this, so every call ends inside the lease that fences it (as the
   * reconciler's do). Default minTimeToCallMs, which is never less.
   */
  readonly worstCallMs?: number;
  readonly log?: LogSink;
  readonly maxAmount?: number;
  /** Stripe calls in flight at once. */
  readonly concurrency?: number;
  /**
   * Message groups whose refunds are worked at once (each group's in record order). Default
   * `concurrency`. 1 works the batch's refunds one after another, as before 059974b: only
   * bench:refund-batch sets it, to measure what the overlap buys.
   */
  readonly refundConcurrency?: number;
  readonly policy?: Partial<EnginePolicy>;
  readonly random?: () => number;
  readonly actor?: string;
}

/** What became of one record. */
export type RecordFate =
  | {
      readonly kind: 'processed';
      readonly operationId: string;
      /** Status after this invocation; null when the outcome write failed (the row holds what it held). */
      readonly status: OperationStatus | null;
      readonly disposition: Execution['disposition'] | 'outcome_not_recorded';
    }
  | { readonly kind: 'rejected'; readonly reasonCode: RejectReason; readonly operationId: string | null }
  /** Its own write failed: nothing of it is durable. */
  | { readonly kind: 'not_recorded'; readonly what: 'reject' | 'request' }
  /** Not worked at all: an earlier record of its message group failed (FIFO). */
  | { readonly kind: 'held_back' };

export interface RecordReport {
  readonly messageId: string;
  readonly groupId: string;
  readonly orderId: string | null;
  readonly operationId: string | null;
  readonly fate: RecordFate;
  /** In batchItemFailures: SQS delivers it again. */
  readonly retried: boolean;
  /** Why it is retried: its own failure, or the FIFO rule (an earlier record of its group failed). */
  readonly retryCause?: 'not_recorded' | 'earlier_record_of_group_failed';
}

/** Per invocation; operations are counted once however many records of the batch carried them. */
export interface ChargeBatchCounts {
  /** Operations this invocation brought to succeeded / failed. */
  readonly succeeded: number;
  readonly failed: number;
  /** Operations of the batch still pending or unknown (review included) when the invocation ends. */
  readonly leftOpen: number;
  /** Records acknowledged as rejected (invalid JSON, invalid body, order conflict). */
  readonly rejected: number;
  /** Records reported in batchItemFailures. */
  readonly notDurable: number;
  /** Stripe answers 401 / 403 (a key problem), and idempotency-key misuse (a bug). */
  readonly stripeAuthErrors: number;
  readonly idempotencyErrors: number;
  readonly eventsPublished: number;
  readonly eventsNotPublished: number;
  /**
   * Valid records sent with the first contract's deduplication id (the order id alone): accepted as
   * ever, counted so that operators see when the last producer has moved (docs/producers.md).
   */
  readonly legacyDeduplicationIds: number;
}

export interface ChargeBatchResult {
  readonly response: SQSBatchResponse;
  readonly records: readonly RecordReport[];
  readonly counts: ChargeBatchCounts;
}

interface Parsed {
  readonly index: number;
  readonly record: SQSRecord;
  readonly groupId: string;
  readonly input?: ChargeInput;
  /** A `"type":"refund"` body: worked after the batch's charges, in record order. */
  readonly refund?: RefundInput;
  /** A `"type":"capture"` / `"cancel_authorization"` body: worked as a refund is, in the same order. */
  readonly authorization?: AuthorizationInput;
  readonly reject?: RejectedMessage;
}

const AUTH_ERRORS = new Set(['StripeAuthenticationError', 'StripePermissionError']);

/**
 * One batch, phase by phase: parse, record the bad bodies, hold back what queues behind a failure,
 * the charges through the engine, each charge record's fate, the refunds, the conflicts, FIFO
 * fail-forward, publish, one log line per record and the counts.
 */
export async function processChargeBatch(records: readonly SQSRecord[], deps: ChargeBatchDeps, clock: InvocationClock): Promise<ChargeBatchResult> {
  const batch = new BatchReports(records.length, deps.log ?? silentLog);
  const parsed = parseRecords(records, deps.maxAmount ?? DEFAULT_MAX_AMOUNT);
  await recordInvalidBodies(batch, deps.db, parsed);
  const valid = chargesToWork(batch, parsed);
  const engine = new ChargeEngine({
    db: deps.db,
    gateway: deps.gateway,
    actor: deps.actor ?? 'charge-handler',
    concurrency: deps.concurrency ?? 10,
    ...(deps.policy ? { policy: deps.policy } : {}),
    ...(deps.random ? { random: deps.random } : {}),
  });
  const canStart = callStartRule(deps, clock);
  const charged = await runCharges(engine, valid, canStart);
  const conflicts = reportCharges(batch, valid, charged);
  const refunds = await runRefunds(batch, engine, parsed, canStart, deps.refundConcurrency ?? deps.concurrency ?? 10);
  await recordConflicts(batch, deps.db, conflicts, refunds.rejects);
  const final = failForward(batch, parsed);
  const published = await publishEvents(deps, clock, batch.log, [...(charged.results ?? []), ...refunds.results.values()]);
  const counts = logAndCount(batch.log, final, parsed, valid, charged.results, refunds, conflicts);

  const batchItemFailures = final.filter((r) => r.retried).map((r) => ({ itemIdentifier: r.messageId }));
  return {
    response: { batchItemFailures },
    records: final,
    counts: {
      ...counts,
      rejected: final.filter((r) => r.fate.kind === 'rejected' && !r.retried).length,
      notDurable: batchItemFailures.length,
      ...published,
      legacyDeduplicationIds: countLegacyDeduplicationIds(parsed),
    },
  };
}

/** Each record's fate as the phases decide it, and the first failed record of each message group. */
class BatchReports {
  readonly #reports: (RecordReport | undefined)[];
  /** message group → index of its first failed record */
  readonly #firstFailure = new Map<string, number>();
  readonly log: LogSink;

  constructor(size: number, log: LogSink) {
    this.#reports = new Array<RecordReport | undefined>(size);
    this.log = log;
  }

  /** Queued behind a failed record of its group (FIFO): must not be worked, nor acknowledged. */
  heldBack(p: Parsed): boolean {
    return (this.#firstFailure.get(p.groupId) ?? Infinity) < p.index;
  }

  report(p: Parsed, fields: Omit<RecordReport, 'messageId' | 'groupId' | 'retried'>, retried = false): void {
    this.#reports[p.index] = { messageId: p.record.messageId, groupId: p.groupId, ...fields, retried, ...(retried ? { retryCause: 'not_recorded' as const } : {}) };
    const first = this.#firstFailure.get(p.groupId);
    if (retried && (first === undefined || first > p.index)) this.#firstFailure.set(p.groupId, p.index);
  }

  get(index: number): RecordReport {
    return this.#reports[index]!;
  }
}

interface ChargeConflict {
  readonly p: Parsed;
  readonly operationId: string;
  readonly fields: readonly string[];
}

interface RefundReject {
  readonly p: Parsed;
  readonly operationId: string | null;
  readonly reasonCode: RejectReason;
  readonly reason: string;
}

interface ChargeResults {
  /** Per valid record, in order; null when the request statement itself failed. */
  readonly results: RequestResult[] | null;
  readonly error: unknown;
}

interface RefundResults {
  readonly results: ReadonlyMap<number, RefundRequestResult | AuthorizationRequestResult>;
  readonly rejects: readonly RefundReject[];
}

/** 1. Parse. Never throws: a bad body is a value to record, not an exception that fails the batch. */
function parseRecords(records: readonly SQSRecord[], maxAmount: number): Parsed[] {
  return records.map((record, index) => {
    // A record without a group (a standard queue, a hand-made event) has no order to keep.
    const groupId = record.attributes?.MessageGroupId ?? `message:${record.messageId}`;
    const body = record.body ?? '';
    const result = parseQueueMessage(body, maxAmount);
    if (result.ok && result.kind === 'refund') {
      const { orderId, refundId, amount, reason } = result.request;
      return { index, record, groupId, refund: { orderId, refundId, amount, reason: reason ?? null } };
    }
    if (result.ok && result.kind === 'authorization') {
      const request = result.request;
      const authorization: AuthorizationInput =
        request.type === 'capture'
          ? { kind: 'capture', orderId: request.orderId, ...(request.amount !== undefined ? { amount: request.amount } : {}) }
          : { kind: 'cancel_authorization', orderId: request.orderId };
      return { index, record, groupId, authorization };
    }
    if (result.ok) {
      const { type: _type, capture, ...charge } = result.request;
      return { index, record, groupId, input: { ...charge, ...(capture ? { captureMethod: capture } : {}) } };
    }
    return { index, record, groupId, reject: { messageId: record.messageId, reasonCode: result.code, reason: result.reason, orderId: result.orderId ?? null, rawBody: body } };
  });
}

/** 2. Rejects first: if their write fails, the later records of their groups must not run ahead. */
async function recordInvalidBodies(batch: BatchReports, db: Db, parsed: readonly Parsed[]): Promise<void> {
  const invalid = parsed.filter((p) => p.reject);
  if (invalid.length === 0) return;
  // Per reject: one that cannot be written fails alone, never the others of the batch.
  const written = await recordRejectedMessages(db, invalid.map((p) => p.reject!));
  for (const p of invalid) {
    const error = written.failed.get(p.record.messageId);
    if (error === undefined) {
      batch.report(p, { orderId: p.reject!.orderId ?? null, operationId: null, fate: { kind: 'rejected', reasonCode: p.reject!.reasonCode, operationId: null } });
    } else {
      batch.log.error('could not record a rejected message', { messageId: p.record.messageId, ...describeError(error) });
      batch.report(p, { orderId: p.reject!.orderId ?? null, operationId: null, fate: { kind: 'not_recorded', what: 'reject' } }, true);
    }
  }
}

/** 3. The valid charge records, minus those queued behind a failed record of their group (FIFO). */
function chargesToWork(batch: BatchReports, parsed: readonly Parsed[]): Parsed[] {
  const valid: Parsed[] = [];
  for (const p of parsed) {
    if (!p.input) continue;
    if (batch.heldBack(p)) batch.report(p, { orderId: p.input.orderId, operationId: null, fate: { kind: 'held_back' } });
    else valid.push(p);
  }
  return valid;
}

/**
 * When a Stripe call may still start. A call started with less than minTimeToCallMs left could be
 * cut off by the Lambda timeout; such an operation is recorded unclaimed (or released) and due, for
 * the reconciler. And a call must end before the lease taken by the claim does, or another worker
 * could claim the operation while this one still waits for Stripe (safe — same key, fenced write —
 * but a 409 and a wasted call). The claims (charges' and refunds') happen after this moment, so
 * their leases end later than this bound.
 */
function callStartRule(deps: ChargeBatchDeps, clock: InvocationClock): () => boolean {
  const leaseLatestStart = Date.now() + (deps.policy?.leaseMs ?? DEFAULT_POLICY.leaseMs) - (deps.worstCallMs ?? deps.minTimeToCallMs);
  return () => clock.remainingMs() > deps.minTimeToCallMs && Date.now() < leaseLatestStart;
}

/** 4. The engine: one round trip before Stripe, calls bounded by time, one round trip after. */
async function runCharges(engine: ChargeEngine, valid: readonly Parsed[], canStart: () => boolean): Promise<ChargeResults> {
  if (valid.length === 0) return { results: null, error: null };
  try {
    return { results: await engine.processRequests(valid.map((p) => p.input!), { canStart }), error: null };
  } catch (error) {
    // Every request is durable, only the outcomes are missing: acknowledge, the reconciler owns them.
    return { results: error instanceof OutcomesNotRecordedError ? [...error.requests] : null, error };
  }
}

/** 5. Each valid charge record: durable (acknowledged whatever its status), conflicting, or not recorded. */
function reportCharges(batch: BatchReports, valid: readonly Parsed[], charged: ChargeResults): ChargeConflict[] {
  const conflicts: ChargeConflict[] = [];
  let durableButUnrecorded = 0;
  valid.forEach((p, i) => {
    const input = p.input!;
    const result = charged.results?.[i];
    if (!result) {
      // The request statement itself failed: nothing of this record is durable; SQS delivers it again.
      batch.report(p, { orderId: input.orderId, operationId: null, fate: { kind: 'not_recorded', what: 'request' } }, true);
      return;
    }
    if (result.conflict) {
      conflicts.push({ p, operationId: result.operationId, fields: result.conflict.fields });
      return;
    }
    if (result.execution === null) {
      // Durable, outcome not written: the Stripe call (if any) used the operation's key, its lease
      // expires, the reconciler settles it. Redelivering the record would add nothing.
      durableButUnrecorded++;
      batch.report(p, { orderId: input.orderId, operationId: result.operationId, fate: { kind: 'processed', operationId: result.operationId, status: null, disposition: 'outcome_not_recorded' } });
      return;
    }
    batch.report(p, { orderId: input.orderId, operationId: result.operationId, fate: { kind: 'processed', operationId: result.operationId, status: result.execution.status, disposition: result.execution.disposition } });
  });
  if (charged.error) {
    batch.log.error(
      durableButUnrecorded > 0 ? 'outcomes not recorded; the operations stay open for the reconciler' : 'requests not recorded',
      { ...describeError(charged.error), durableButUnrecorded },
    );
  }
  return conflicts;
}

/**
 * 5b. Refunds — and captures and cancels of authorizations, by the same rules — after the batch's
 * charges (a refund's charge may be one of them): one statement each
 * before Stripe, one after. In record order within a message group (FIFO: one order's refunds are
 * judged one after the other against its charge); groups side by side, as the charges' Stripe calls
 * are. Behind a failed record of its group a refund is held back; a rejected one is recorded with
 * its reason and never sent.
 */
async function runRefunds(batch: BatchReports, engine: ChargeEngine, parsed: readonly Parsed[], canStart: () => boolean, concurrency: number): Promise<RefundResults> {
  const results = new Map<number, RefundRequestResult | AuthorizationRequestResult>();
  const rejects: RefundReject[] = [];
  // A refund, or a capture or cancel of an authorization: the same phase and the same rules.
  const followUpOne = async (p: Parsed): Promise<void> => {
    const orderId = (p.refund ?? p.authorization)!.orderId;
    const what = p.refund ? 'refund' : p.authorization!.kind;
    if (batch.heldBack(p)) {
      batch.report(p, { orderId, operationId: null, fate: { kind: 'held_back' } });
      return;
    }
    let result: RefundRequestResult | AuthorizationRequestResult;
    try {
      result = p.refund ? await engine.processRefund(p.refund, { canStart }) : await engine.processAuthorization(p.authorization!, { canStart });
    } catch (error) {
      batch.log.error(`${what} request not recorded`, { messageId: p.record.messageId, orderId, ...describeError(error) });
      batch.report(p, { orderId, operationId: null, fate: { kind: 'not_recorded', what: 'request' } }, true);
      return;
    }
    results.set(p.index, result);
    if (result.rejection) {
      const code = result.rejection.code;
      const reasonCode = p.refund
        ? code === 'refund_conflict' ? RejectReason.refundConflict : RejectReason.refundRejected
        : code === 'authorization_conflict' ? RejectReason.authorizationConflict : RejectReason.authorizationRejected;
      // The engine's reason names ids and amounts the producer sent, never card data.
      rejects.push({ p, operationId: result.operationId, reasonCode, reason: `${code}: ${result.rejection.message}` });
      return;
    }
    const status = result.execution?.status ?? null;
    const disposition = result.execution?.disposition ?? 'outcome_not_recorded';
    batch.report(p, { orderId, operationId: result.operationId, fate: { kind: 'processed', operationId: result.operationId!, status, disposition } });
  };
  const groups = new Map<string, Parsed[]>();
  for (const p of parsed) {
    if (!p.refund && !p.authorization) continue;
    const group = groups.get(p.groupId);
    if (group) group.push(p);
    else groups.set(p.groupId, [p]);
  }
  await mapBounded([...groups.values()], concurrency, async (group) => {
    for (const p of group) await followUpOne(p);
  });
  return { results, rejects };
}

/** 5c. Conflicts: the order exists with other parameters, or a refund that makes no operation. Recorded, never sent. */
async function recordConflicts(batch: BatchReports, db: Db, conflicts: readonly ChargeConflict[], refundRejects: readonly RefundReject[]): Promise<void> {
  if (conflicts.length === 0 && refundRejects.length === 0) return;
  const all = [
    ...conflicts.map(({ p, operationId, fields }) => ({
      p,
      operationId,
      orderId: p.input!.orderId,
      reasonCode: RejectReason.orderConflict as RejectReason,
      // Names the fields that differ, never their values.
      reason: `order already has operation ${operationId} with a different ${fields.join(', ')}`,
    })),
    ...refundRejects.map((r) => ({ ...r, orderId: (r.p.refund ?? r.p.authorization)!.orderId })),
  ];
  const rejects: RejectedMessage[] = all.map(({ p, operationId, orderId, reasonCode, reason }) => ({
    messageId: p.record.messageId,
    reasonCode,
    reason,
    orderId,
    operationId,
    rawBody: p.record.body ?? '',
  }));
  const written = await recordRejectedMessages(db, rejects);
  for (const { p, operationId, orderId, reasonCode } of all) {
    const error = written.failed.get(p.record.messageId);
    if (error === undefined) {
      batch.report(p, { orderId, operationId, fate: { kind: 'rejected', reasonCode, operationId } });
    } else {
      batch.log.error('could not record a rejected request', { messageId: p.record.messageId, ...describeError(error) });
      batch.report(p, { orderId, operationId, fate: { kind: 'not_recorded', what: 'reject' } }, true);
    }
  }
}

/**
 * 6. FIFO: once a record of a group fails, every later record of that group fails too — even a
 * durable one (its redelivery finds the operation and changes nothing) — so that SQS never hands
 * out a group's earlier message again after a later one was acknowledged.
 */
function failForward(batch: BatchReports, parsed: readonly Parsed[]): RecordReport[] {
  return parsed.map((p) => {
    const r = batch.get(p.index);
    return !r.retried && batch.heldBack(p) ? { ...r, retried: true, retryCause: 'earlier_record_of_group_failed' as const } : r;
  });
}

/** 7. Publish the batch's events right away; whatever does not go out waits for the sweep. */
async function publishEvents(
  deps: ChargeBatchDeps,
  clock: InvocationClock,
  log: LogSink,
  results: readonly (RequestResult | RefundRequestResult | AuthorizationRequestResult)[],
): Promise<{ eventsPublished: number; eventsNotPublished: number }> {
  const events = new Map<string, OutcomeEventRow>();
  for (const result of results) if (result.execution?.event) events.set(result.execution.event.eventId, result.execution.event);
  let eventsPublished = 0;
  let eventsNotPublished = events.size;
  if (deps.publisher && events.size > 0) {
    // Never up to the invocation's end: a timed-out invocation would send the whole batch back.
    const budget = clock.remainingMs() - 1_000;
    if (budget > 0) {
      try {
        const summary = await withDeadline(publishLeased(deps.db, deps.publisher, [...events.values()]), budget);
        if (summary === 'deadline') log.warn('publishing outcome events did not finish in time; the sweep sends them', { events: events.size });
        else {
          ({ published: eventsPublished, failed: eventsNotPublished } = summary);
          if (summary.failed > 0) log.warn('outcome events not published; the sweep resends them', { published: summary.published, failed: summary.failed });
        }
      } catch (error) {
        log.warn('publishing outcome events failed; the sweep sends them', describeError(error));
      }
    }
  }
  return { eventsPublished, eventsNotPublished };
}

/** Valid records whose deduplication id is the first contract's: hex SHA-256 of the order (and refund) id alone. */
function countLegacyDeduplicationIds(parsed: readonly Parsed[]): number {
  let n = 0;
  for (const p of parsed) {
    const id = p.record.attributes?.MessageDeduplicationId;
    if (!id) continue;
    if (p.input && id === legacyDeduplicationId(p.input.orderId)) n++;
    else if (p.refund && id === legacyRefundDeduplicationId(p.refund.orderId, p.refund.refundId)) n++;
  }
  return n;
}

/** 8. One line per record (message id, order id, operation id), and the counts. */
function logAndCount(
  log: LogSink,
  final: readonly RecordReport[],
  parsed: readonly Parsed[],
  valid: readonly Parsed[],
  results: readonly RequestResult[] | null,
  refunds: RefundResults,
  conflicts: readonly ChargeConflict[],
): Pick<ChargeBatchCounts, 'succeeded' | 'failed' | 'leftOpen' | 'stripeAuthErrors' | 'idempotencyErrors'> {
  const byIndex = new Map<number, RequestResult>();
  valid.forEach((p, i) => {
    const result = results?.[i];
    if (result) byIndex.set(p.index, result);
  });
  const seen = new Set<string>();
  const counts = { succeeded: 0, failed: 0, leftOpen: 0, stripeAuthErrors: 0, idempotencyErrors: 0 };
  final.forEach((r, index) => {
    const ids = { messageId: r.messageId, orderId: r.orderId, operationId: r.operationId };
    const retry = r.retried ? { retried: true, retryCause: r.retryCause } : {};
    const fate = r.fate;
    const execution = byIndex.get(index)?.execution ?? refunds.results.get(index)?.execution ?? null;
    switch (fate.kind) {
      case 'rejected': {
        const reject = parsed[index]!.reject;
        const refundReject = refunds.rejects.find((r) => r.p.index === index);
        log.warn('message rejected', {
          ...ids,
          reasonCode: fate.reasonCode,
          ...(reject ? { reason: reject.reason } : refundReject ? { reason: refundReject.reason } : { fields: conflicts.find((c) => c.p.index === index)?.fields }),
          ...retry,
        });
        return;
      }
      case 'not_recorded':
        log.warn(`${fate.what} not recorded; the message goes back to the queue`, { ...ids, ...retry });
        return;
      case 'held_back':
        log.warn('held back behind a failed record of its message group', { ...ids, groupId: r.groupId, ...retry });
        return;
      case 'processed': {
        log.info(parsed[index]!.refund ? 'refund request recorded' : parsed[index]!.authorization ? `${parsed[index]!.authorization!.kind} request recorded` : 'charge request recorded', {
          ...ids,
          status: fate.status,
          disposition: fate.disposition,
          ...(execution?.step ? { step: execution.step } : {}),
          // Class and code only: a Stripe error message may quote a parameter (a PaymentMethod id).
          ...(execution?.outcome?.errorClass ? { errorClass: execution.outcome.errorClass, errorCode: execution.outcome.errorCode } : {}),
          ...(execution?.reviewReason ? { inReview: true } : {}),
          ...retry,
        });
        const key = fate.operationId;
        if (seen.has(key)) return; // repeats of one order share one operation: count it once
        seen.add(key);
        if (execution?.disposition === 'attempted' && execution.status === 'succeeded') counts.succeeded++;
        else if (execution?.disposition === 'attempted' && execution.status === 'failed') counts.failed++;
        else if (fate.status === null || fate.status === 'pending' || fate.status === 'unknown') counts.leftOpen++;
        const errorClass = execution?.outcome?.errorClass;
        if (errorClass && AUTH_ERRORS.has(errorClass)) counts.stripeAuthErrors++;
        if (errorClass === 'StripeIdempotencyError') counts.idempotencyErrors++;
        return;
      }
    }
  });
  return counts;
}

async function withDeadline<T>(work: Promise<T>, ms: number): Promise<T | 'deadline'> {
  // If the deadline wins, a later rejection of `work` must not become an unhandled rejection.
  work.catch(() => {});
  let timer: ReturnType<typeof setTimeout> | undefined;
  const deadline = new Promise<'deadline'>((resolve) => {
    timer = setTimeout(() => resolve('deadline'), ms);
  });
  try {
    return await Promise.race([work, deadline]);
  } finally {
    clearTimeout(timer);
  }
}
