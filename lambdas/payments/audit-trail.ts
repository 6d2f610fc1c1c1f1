// An operation's audit trail (payment_operation_events) and the one reading of it that both the
// operator's review (review.ts) and the engine's evidence (evidence.ts) rest on: when a request under
// the operation's key may last have been running. Pure; the SQL that reads the trail is in
// review.ts (loadOperationHistory) and operations-store.ts (loadEvidenceEvents).

/** One row of the audit trail. */
export interface AuditEvent {
  readonly id: number;
  readonly occurredAt: string;
  readonly actor: string;
  readonly action: string;
  readonly step: string | null;
  readonly fromStatus: string | null;
  readonly toStatus: string | null;
  readonly errorClass: string | null;
  readonly errorCode: string | null;
  readonly externalId: string | null;
  readonly keyGeneration: number | null;
  readonly detail: Readonly<Record<string, unknown>>;
}

/**
 * An audit line's detail as every reader sees it (SQL): the stored `detail`, with what has columns of
 * its own put back under the keys older lines stored it in — the claim's lease token and end
 * (`leaseToken`, `leaseUntil`; migrations/023), a claim's attempt number (`attempt`) and an outcome's
 * PaymentIntent status (`paymentIntentStatus`; migrations/029). `e` is an alias of
 * payment_operation_events.
 */
export const AUDIT_DETAIL = (e: string) =>
  `(${e}.detail || jsonb_strip_nulls(jsonb_build_object('leaseToken', ${e}.lease_token, 'leaseUntil', ${e}.lease_until, 'attempt', ${e}.attempt, 'paymentIntentStatus', ${e}.payment_intent_status)))`;

const OUTCOME_ACTIONS = new Set(['outcome_recorded', 'outcome_discarded', 'lease_released']);
// Steps that send nothing that could create an object at Stripe (a precondition settles or reviews before any call).
const NON_SENDING_STEPS = new Set(['retrieve', 'search', 'list', 'precondition']);

/**
 * The latest moment a request that may have created a PaymentIntent with this operation's key was
 * still running, from the audit trail. Every outcome written for a step that may send (create,
 * early_search) — recorded, or discarded because its writer was a zombie whose lease had run out —
 * ended a request at that moment. A claim with no outcome of its own (the worker died, or is a slow
 * zombie still running) may have sent until the end of its lease. A claim's own outcome is the one
 * carrying its lease token (never simply the next outcome row: a zombie's late write comes after
 * the next claim's); trails written before tokens were recorded are paired by position. Retrieve and
 * search steps, and released leases, never create anything. Null: never sent.
 */
export function lastPossibleSendAt(
  events: readonly Pick<AuditEvent, 'action' | 'step' | 'occurredAt' | 'detail'>[],
  leaseMs: number,
): Date | null {
  let last: number | null = null;
  const consider = (ms: number) => {
    if (last === null || ms > last) last = ms;
  };
  events.forEach((event, index) => {
    if (OUTCOME_ACTIONS.has(event.action)) {
      if (event.action !== 'lease_released' && !(event.step !== null && NON_SENDING_STEPS.has(event.step))) consider(Date.parse(event.occurredAt));
      return;
    }
    // A claim without its outcome may have been sending until its lease ran out: the lease end the
    // claim RECORDED (it may have been claimed with another LEASE_MS than this reader's), else the
    // claim's time plus the reader's lease for trails written before the claim recorded it.
    if (event.action === 'attempt_started' && ownOutcome(events, index) === undefined) consider(leaseEndOf(event) ?? Date.parse(event.occurredAt) + leaseMs);
  });
  return last === null ? null : new Date(last);
}

type TrailEvent = Pick<AuditEvent, 'action' | 'step' | 'occurredAt' | 'detail'>;
/** The lease end an `attempt_started` recorded (its `leaseUntil`), in ms; null when absent or unreadable. */
function leaseEndOf(event: TrailEvent): number | null {
  const until = event.detail?.leaseUntil;
  const ms = typeof until === 'string' ? Date.parse(until) : Number.NaN;
  return Number.isNaN(ms) ? null : ms;
}
const leaseTokenOf = (event: TrailEvent): string | null => (typeof event.detail?.leaseToken === 'string' ? event.detail.leaseToken : null);

/** The outcome row of the claim at `index`: by lease token, or (older trails) the next outcome before the next claim. */
function ownOutcome(events: readonly TrailEvent[], index: number): TrailEvent | undefined {
  const token = leaseTokenOf(events[index]!);
  for (const next of events.slice(index + 1)) {
    if (token === null) {
      if (next.action === 'attempt_started') return undefined;
      if (OUTCOME_ACTIONS.has(next.action)) return next;
    } else {
      if (next.action === 'attempt_started' && leaseTokenOf(next) === token) return undefined;
      if (OUTCOME_ACTIONS.has(next.action) && leaseTokenOf(next) === token) return next;
    }
  }
  return undefined;
}
