// createOutcomeConsumer: the kit's core. A batch of SQS records (fed by an EventBridge rule on the
// pipeline's bus) in; per record, one of three phases, and a partial batch response out:
//
//   read    body → EventBridge envelope → detail (poison when unreadable: recorded, acknowledged)
//   admit   one statement: inbox dedup + newest-sequence-wins (states; facts are not ranked) + claim (inbox-store.ts)
//   apply   run the effect under the consumer's policy and settle its answer (fenced by the lease)
//
// A record is reported in batchItemFailures only when running it again later is what the policy
// wants (an ambiguous answer under idempotent / at-least-once, a definite "not executed"), when
// another invocation holds its lease, or when the inbox itself could not be reached. Everything
// else — done, duplicate, stale, poison, abandoned, failed — is acknowledged: recorded, explained,
// never looping to the DLQ.
import { randomUUID } from 'node:crypto';
import { z } from 'zod';
import type { Db } from '../../payments/db.ts';
import type { LogSink } from '../../runtime/observability.ts';
import { describeError } from '../../runtime/redact.ts';
import { parseRecordBody, type ParsedRecord } from './envelope.ts';
import { ConsumerConfigError, EffectFailure, failureOf } from './errors.ts';
import { admit, recordPoison, settle, type Admission, type Settlement } from './inbox-store.ts';
import { orderingOf, orderKey } from './ordering.ts';
import { isPolicy, type BatchCounts, type ConsumerPolicy, type Effect, type OutcomeEvent, type QueueRecord, type RecordResult } from './types.ts';

export interface OutcomeConsumerOptions<D> {
  /** Names the consumer everywhere: inbox rows, idempotency keys, logs, metrics. `^[a-z][a-z0-9-]{0,62}$`. */
  readonly name: string;
  readonly db: Db;
  readonly policy: ConsumerPolicy;
  readonly effect: Effect<D>;
  /** The detail-types this consumer subscribed to (its rule's pattern); anything else is poison. */
  readonly detailTypes: readonly string[];
  /** Accepted envelope sources. @default any (the rule's pattern chose already) */
  readonly sources?: readonly string[];
  /** The consumer's view of `detail` (eventId / operationId / sequence are checked by the kit). @default any object */
  readonly detailSchema?: z.ZodType<D>;
  /**
   * How long a claim keeps other deliveries off an event. Must outlast one invocation (the function
   * timeout), and stay below the queue's visibility timeout so that the delivery after a crash finds
   * it expired. @default 90 000 (a 60 s function, 6 min visibility)
   */
  readonly leaseMs?: number;
  /**
   * idempotent only: how long the provider keeps an idempotency key. An attempt later than this after
   * the first one may meet a forgotten key and act twice ("a key does not make it safe
   * days later"); it is still made — a receipt sent twice is better than none — but logged, counted
   * (IdempotencyKeyLifetimeExceeded) and marked on the result. @default 23 h (Resend keeps keys 24 h)
   */
  readonly keyLifetimeMs?: number;
  /** Records worked at once within a batch. @default 4 */
  readonly concurrency?: number;
  readonly log?: LogSink;
}

export interface BatchResult {
  readonly response: { readonly batchItemFailures: { readonly itemIdentifier: string }[] };
  readonly results: readonly RecordResult[];
  readonly counts: BatchCounts;
}

export interface OutcomeConsumer {
  readonly name: string;
  readonly policy: ConsumerPolicy;
  readonly detailTypes: readonly string[];
  processBatch(records: readonly QueueRecord[]): Promise<BatchResult>;
}

const NAME = /^[a-z][a-z0-9-]{0,62}$/;
const SILENT: LogSink = { debug() {}, info() {}, warn() {}, error() {} };

export function createOutcomeConsumer<D = Record<string, unknown>>(options: OutcomeConsumerOptions<D>): OutcomeConsumer {
  const { name, policy, db, effect } = options;
  const problems: string[] = [];
  if (!NAME.test(name)) problems.push(`name must match ${NAME} (it is part of idempotency keys and metric dimensions), got ${JSON.stringify(name)}`);
  if (!isPolicy(policy)) problems.push(`policy must be idempotent, at-least-once or at-most-once, got ${JSON.stringify(policy)}`);
  if (options.detailTypes.length === 0) problems.push('detailTypes must name at least one detail-type (the rule pattern of this consumer)');
  const leaseMs = options.leaseMs ?? 90_000;
  if (!Number.isInteger(leaseMs) || leaseMs < 1_000) problems.push(`leaseMs must be an integer ≥ 1000, got ${leaseMs}`);
  const keyLifetimeMs = options.keyLifetimeMs ?? 23 * 3_600_000;
  if (!Number.isInteger(keyLifetimeMs) || keyLifetimeMs < 1) problems.push(`keyLifetimeMs must be a positive integer, got ${keyLifetimeMs}`);
  const concurrency = options.concurrency ?? 4;
  if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 50) problems.push(`concurrency must be an integer in [1, 50], got ${concurrency}`);
  if (problems.length > 0) throw new ConsumerConfigError(`invalid outcome consumer configuration:\n  - ${problems.join('\n  - ')}`);

  const log = options.log ?? SILENT;
  const tag = { consumer: name, policy };
  const expectations = {
    detailTypes: options.detailTypes,
    ...(options.sources ? { sources: options.sources } : {}),
    detailSchema: (options.detailSchema ?? z.record(z.string(), z.unknown())) as z.ZodType<D>,
  };

  // ── phase 3: apply ─────────────────────────────────────────────────────────────────────────
  async function apply(record: QueueRecord, event: OutcomeEvent<D>, admission: Admission, leaseToken: string): Promise<RecordResult> {
    const rowPolicy = admission.policy;
    const base = { messageId: record.messageId, eventId: event.eventId, effectCalls: 1 };
    // Re-run of an attempt whose answer was never recorded (a crash, a lost lease): the promise
    // the policy makes is kept right here — idempotent re-sends the same key, at-least-once re-sends.
    const recovered = admission.previousState === 'attempting';
    const key = { consumer: name, eventId: event.eventId, leaseToken };
    const keyExpired = rowPolicy === 'idempotent' && admission.firstAttemptedAt !== null && Date.now() - admission.firstAttemptedAt.getTime() > keyLifetimeMs;
    if (keyExpired) {
      log.warn('idempotency key lifetime passed: the provider may have forgotten the key, a duplicate is possible', { ...tag, eventId: event.eventId, firstAttemptedAt: admission.firstAttemptedAt?.toISOString() });
    }
    let answer: Answer;
    try {
      const result = await effect(event, {
        consumer: name,
        policy: rowPolicy,
        idempotencyKey: rowPolicy === 'idempotent' ? `${name}:${event.eventId}` : undefined,
        attempt: admission.attempts,
      });
      answer = { outcome: 'done', settlement: { to: 'done', result: result ?? null } };
    } catch (error) {
      answer = settlementForFailure(rowPolicy, error);
    }
    const { settlement, outcome } = answer;
    let settled: boolean;
    try {
      settled = await settle(db, key, settlement);
    } catch (error) {
      // The effect's answer is known but not recorded. The row still says "attempting" with our
      // lease: exactly the crash case, and the next delivery treats it so (per the row's policy).
      log.error('effect answered but its record failed; the next delivery decides by the policy', { ...tag, eventId: event.eventId, outcome, ...describeError(error) });
      return { ...base, outcome: 'not_recorded', acknowledged: false, recovered, error: describeError(error).errorMessage };
    }
    if (!settled) {
      // Our lease ran out and another delivery claimed the event: its record is the one that counts.
      log.warn('lease lost before the answer was recorded; the newer attempt decides', { ...tag, eventId: event.eventId, outcome });
    }
    const acknowledged = outcome === 'done' || outcome === 'abandoned' || outcome === 'failed';
    const line = { ...tag, eventId: event.eventId, operationId: event.operationId, detailType: event.detailType, attempt: admission.attempts, outcome, ...(recovered ? { recovered } : {}) };
    if (outcome === 'done') log.info('effect done', line);
    else if (outcome === 'abandoned' || outcome === 'failed') log.error(`effect ${outcome}`, { ...line, error: 'error' in settlement ? settlement.error : undefined });
    else log.warn(`effect will run again (${outcome})`, { ...line, error: 'error' in settlement ? settlement.error : undefined });
    return { ...base, outcome, acknowledged, recovered, ...(keyExpired ? { keyExpired } : {}), ...('error' in settlement ? { error: settlement.error } : {}) };
  }

  // ── one record: read → admit → apply ───────────────────────────────────────────────────────
  async function processRecord(record: QueueRecord, parsed: ParsedRecord<D>): Promise<RecordResult> {
    if (!parsed.ok) {
      try {
        await recordPoison(db, { consumer: name, messageId: record.messageId, reason: parsed.reason, body: record.body });
      } catch (error) {
        log.error('poison event could not be recorded; it goes back to the queue', { ...tag, messageId: record.messageId, ...describeError(error) });
        return { messageId: record.messageId, outcome: 'not_recorded', acknowledged: false, effectCalls: 0, error: describeError(error).errorMessage };
      }
      log.error('poison event recorded and acknowledged', { ...tag, messageId: record.messageId, reason: parsed.reason });
      return { messageId: record.messageId, outcome: 'poison', acknowledged: true, effectCalls: 0, error: parsed.reason };
    }
    const event = parsed.event;
    const leaseToken = randomUUID();
    let admission: Admission;
    try {
      admission = await admit(db, {
        consumer: name,
        eventId: event.eventId,
        operationId: event.operationId,
        sequence: event.sequence,
        orderKey: orderKey(event.sequence),
        ordering: orderingOf(event.detailType),
        detailType: event.detailType,
        policy,
        detail: event.detail,
        leaseToken,
        leaseMs,
      });
    } catch (error) {
      log.error('inbox unreachable; the record goes back to the queue', { ...tag, eventId: event.eventId, ...describeError(error) });
      return { messageId: record.messageId, eventId: event.eventId, outcome: 'not_recorded', acknowledged: false, effectCalls: 0, error: describeError(error).errorMessage };
    }
    const skip = (outcome: RecordResult['outcome'], acknowledged: boolean): RecordResult => {
      log.info(`event ${outcome}`, { ...tag, eventId: event.eventId, operationId: event.operationId, sequence: event.sequence, state: admission.state, deliveries: admission.deliveries });
      return { messageId: record.messageId, eventId: event.eventId, outcome, acknowledged, effectCalls: 0 };
    };
    if (admission.claimed) return apply(record, event, admission, leaseToken);
    if (admission.state === 'attempting') return skip('busy', false);
    if (admission.state === 'stale') return skip(admission.previousState === 'stale' ? 'duplicate' : 'stale', true);
    if (admission.state === 'abandoned' && admission.previousState === 'attempting') {
      log.error('effect abandoned: an earlier attempt never recorded its answer', { ...tag, eventId: event.eventId });
      return { messageId: record.messageId, eventId: event.eventId, outcome: 'abandoned', acknowledged: true, effectCalls: 0 };
    }
    return skip('duplicate', true);
  }

  return {
    name,
    policy,
    detailTypes: [...options.detailTypes],
    async processBatch(records) {
      // Copies of one event in one batch (EventBridge and the outbox both re-send) are worked one
      // after the other, so the second finds the first's record (a duplicate) instead of its live
      // lease (busy, and one more delivery for nothing). Different events run concurrently.
      const parsed = records.map((record) => parseRecordBody(record.body, expectations));
      const groups = new Map<string, number[]>();
      parsed.forEach((p, i) => {
        const key = p.ok ? `event:${p.event.eventId}` : `message:${records[i]!.messageId}:${i}`;
        groups.set(key, [...(groups.get(key) ?? []), i]);
      });
      const results = new Array<RecordResult>(records.length);
      await mapLimit([...groups.values()], concurrency, async (indexes) => {
        for (const i of indexes) results[i] = await processRecord(records[i]!, parsed[i]!);
      });
      return {
        response: { batchItemFailures: results.filter((r) => !r.acknowledged).map((r) => ({ itemIdentifier: r.messageId })) },
        results,
        counts: countResults(results),
      };
    },
  };
}

type Answer = { readonly outcome: RecordResult['outcome']; readonly settlement: Settlement };

/**
 * What a failed effect comes to under a policy — the whole per-effect choice in one pure decision:
 *
 *   | what the error proves    | idempotent | at-least-once | at-most-once |
 *   |--------------------------|------------|---------------|--------------|
 *   | rejected (a 400)         | failed     | failed        | failed       |
 *   | not executed (429, …)    | pending, retried under every policy         |
 *   | ambiguous (5xx, timeout) | retry (same key) | retry   | abandoned    |
 */
export function settlementForFailure(policy: ConsumerPolicy, error: unknown): Answer {
  const failure = failureOf(error);
  const message = describeError(error).errorMessage;
  if (failure === EffectFailure.rejected) return { outcome: 'failed', settlement: { to: 'failed', error: message } };
  if (failure === EffectFailure.notExecuted) return { outcome: 'not_executed', settlement: { to: 'pending', error: message } };
  // It may have happened: under at-most-once, running it again could duplicate — the accepted miss.
  if (policy === 'at-most-once') return { outcome: 'abandoned', settlement: { to: 'abandoned', error: `ambiguous: ${message}` } };
  return { outcome: 'retry', settlement: { to: 'retry', error: `ambiguous: ${message}` } };
}

export function countResults(results: readonly RecordResult[]): BatchCounts {
  const n = (outcome: RecordResult['outcome']) => results.filter((r) => r.outcome === outcome).length;
  return {
    records: results.length,
    done: n('done'),
    duplicates: n('duplicate'),
    stale: n('stale'),
    poison: n('poison'),
    retries: n('retry'),
    notExecuted: n('not_executed'),
    abandoned: n('abandoned'),
    failed: n('failed'),
    busy: n('busy'),
    notRecorded: n('not_recorded'),
    effectCalls: results.reduce((sum, r) => sum + r.effectCalls, 0),
    recovered: results.filter((r) => r.recovered).length,
    keyExpired: results.filter((r) => r.keyExpired).length,
  };
}

async function mapLimit<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out = new Array<R>(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]!);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return out;
}
