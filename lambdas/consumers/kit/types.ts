// The vocabulary of the outcome-consumer kit: the three per-effect policies (docs/events.md#which-policy), the
// effect a consumer supplies, and what the kit decided for each record. Plain TypeScript: nothing
// here knows about Lambda, SQS clients or CDK.

/**
 * Which failure a consumer accepts for its effect (docs/events.md#which-policy). Declared per consumer,
 * stored on every inbox row, named in every log line and as a metric dimension.
 *
 *   idempotent     the effect takes a key derived from the event (`{consumer}:{eventId}`) and the
 *                  provider deduplicates on it: retried on ambiguity with the same key, so neither a
 *                  duplicate nor a miss (within the provider's key lifetime).
 *   at-least-once  retried on ambiguity and after a crash: a duplicate is acceptable, a miss is not.
 *   at-most-once   recorded before the effect, never retried once it may have run: a miss is
 *                  acceptable, a duplicate is not.
 */
export const POLICIES = ['idempotent', 'at-least-once', 'at-most-once'] as const;
export type ConsumerPolicy = (typeof POLICIES)[number];

export function isPolicy(value: unknown): value is ConsumerPolicy {
  return typeof value === 'string' && (POLICIES as readonly string[]).includes(value);
}

/** The part of an SQS record the kit reads (an aws-lambda SQSRecord is one). */
export interface QueueRecord {
  readonly messageId: string;
  readonly body: string;
  readonly attributes?: { readonly ApproximateReceiveCount?: string };
}

/** An outcome event as the kit hands it to the effect: the envelope's facts and the parsed detail. */
export interface OutcomeEvent<D> {
  readonly detailType: string;
  readonly source: string;
  /** detail.eventId: stable across re-sends; the deduplication key. */
  readonly eventId: string;
  readonly operationId: string;
  /** detail.sequence, or null for an event from a producer that did not number its events yet. */
  readonly sequence: number | null;
  readonly detail: D;
}

export interface EffectContext {
  readonly consumer: string;
  readonly policy: ConsumerPolicy;
  /** `{consumer}:{eventId}` under `idempotent`; undefined otherwise (the provider gets none). */
  readonly idempotencyKey: string | undefined;
  /** 1 for the first attempt of this event, 2 for the next, … (across deliveries and crashes). */
  readonly attempt: number;
}

/**
 * The side effect. Resolve with a small JSON-able result (recorded on the inbox row) when the
 * provider confirmed it; throw an EffectError saying what is known otherwise. Anything else thrown
 * counts as ambiguous: an answer we do not understand proves nothing.
 */
export type Effect<D> = (event: OutcomeEvent<D>, context: EffectContext) => Promise<Record<string, unknown> | void>;

/** What one record came to. `acknowledged` false ⇒ reported in batchItemFailures (SQS delivers it again). */
export type RecordOutcome =
  /** The effect ran and its success is recorded. */
  | 'done'
  /** Re-delivery of an event whose fate is already recorded: nothing done. */
  | 'duplicate'
  /** An older sequence than the one already applied for its operation: ignored. */
  | 'stale'
  /** Unreadable, or not an event this consumer subscribed to: recorded in poison_events. */
  | 'poison'
  /** Ambiguous answer, idempotent / at-least-once: left for the next delivery to run again. */
  | 'retry'
  /** Definite "not executed" answer: safe to run again under every policy. */
  | 'not_executed'
  /** at-most-once: the effect may have run (ambiguous answer, or an earlier attempt crashed): given up. */
  | 'abandoned'
  /** The provider refused for good. */
  | 'failed'
  /** Another invocation holds the event's lease right now: delivered again later. */
  | 'busy'
  /** The inbox could not be reached: delivered again later. */
  | 'not_recorded';

export interface RecordResult {
  readonly messageId: string;
  readonly outcome: RecordOutcome;
  readonly acknowledged: boolean;
  readonly eventId?: string;
  /** Effect calls this record made (0 or 1). */
  readonly effectCalls: number;
  /** A re-run after an attempt whose answer never got recorded (a crash, a lost lease). */
  readonly recovered?: boolean;
  /** idempotent: this attempt came after the provider's key lifetime (a duplicate is possible). */
  readonly keyExpired?: boolean;
  readonly error?: string;
}

export interface BatchCounts {
  readonly records: number;
  readonly done: number;
  readonly duplicates: number;
  readonly stale: number;
  readonly poison: number;
  readonly retries: number;
  readonly notExecuted: number;
  readonly abandoned: number;
  readonly failed: number;
  readonly busy: number;
  readonly notRecorded: number;
  readonly effectCalls: number;
  /** Effects run again after an attempt that left no record of its answer. */
  readonly recovered: number;
  /** idempotent attempts made after the provider may have forgotten the key. */
  readonly keyExpired: number;
}
