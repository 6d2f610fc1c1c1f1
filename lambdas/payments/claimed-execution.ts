// Executing claimed operations — the one place a charge or a refund reaches Stripe: the evidence an
// ambiguous operation needs, one attempt per operation (attempt / create, under the key window), and
// every outcome recorded, fenced by the lease, in one round trip.
//
//   claimed ─▶ evidence (one read) ─▶ attempts (bounded concurrency, no transaction open) ─▶ record (fenced)
import { randomUUID } from 'node:crypto';
import {
  chooseStep,
  decideCreate,
  decideEarlySearch,
  decideList,
  decidePrecondition,
  decideRetrieve,
  decideSearch,
  KIND_RULES,
  listWindow,
  needsEvidence,
  type AttemptStep,
  type DecisionContext,
  type EvidenceHistory,
  type Outcome,
  type Step,
  watchTimings,
  withinKeyWindow,
  formatDuration,
} from './decisions.ts';
import { skipped, type EngineContext } from './engine-context.ts';
import { OperationNotFoundError } from './errors.ts';
import { summarizeEvidence } from './evidence.ts';
import { FailureKind, type GatewayResult } from './gateway.ts';
import { accountOf, KIND_ADAPTERS } from './kinds.ts';
import {
  claimById,
  loadEvidenceEvents,
  recordOutcomes,
  reissueAfterProof,
  releaseWrite,
  type OutcomeWrite,
  type RecordResult,
  type ReissueWrite,
} from './operations-store.ts';
import type { Execution } from './request-results.ts';
import type { ClaimedOperation, PaymentIntentView } from './types.ts';

/** One attempt's result: the step taken and its outcome; a null outcome was not started (or waits). */
interface Attempt {
  readonly op: ClaimedOperation;
  readonly step: AttemptStep | null;
  readonly outcome: Outcome | null;
  readonly waitUntilMs?: number;
  readonly notStarted?: string;
}

/** A small bounded-concurrency map that keeps result order. */
export async function mapBounded<T, R>(items: readonly T[], limit: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const workers = Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, async () => {
    while (next < items.length) {
      const index = next++;
      results[index] = await fn(items[index]!);
    }
  });
  await Promise.all(workers);
  return results;
}

/**
 * Attempt the operation once if it is claimable. Safe to call any number of times, concurrently:
 * a final operation is returned as it is and Stripe is not called again.
 */
export async function executeOperation(ctx: EngineContext, operationId: string): Promise<Execution> {
  const token = randomUUID();
  const claimSent = ctx.now();
  const found = await claimById(ctx.db, operationId, token, ctx.policy.leaseMs, ctx.actor);
  if (!found) throw new OperationNotFoundError(operationId);
  if (!found.claimed) return skipped(found.operation);
  const [execution] = await executeClaimed(ctx, [found.claimed], undefined, claimSent);
  return execution!;
}

/**
 * Attempt each claimed operation (bounded concurrency), then record all outcomes in one round trip.
 *
 * `claimSent`: this clock's time just before the claim statement was sent. The database dated the
 * claim (claimedAt) no earlier, so claimedAt + (now − claimSent) is never earlier than the
 * database's clock now — a slow claim statement (a loaded or restarting database) counts too.
 */
export async function executeClaimed(
  ctx: EngineContext,
  claimed: readonly ClaimedOperation[],
  canStart: (() => boolean) | undefined,
  claimSent: number,
): Promise<Execution[]> {
  const histories = await evidenceOf(ctx, claimed);
  const sinceClaim = () => ctx.now() - claimSent;
  const attempts = await mapBounded(claimed, ctx.concurrency, (op) => attempt(ctx, op, histories.get(op.id) ?? null, canStart, sinceClaim));
  const recorded = await recordAttempts(ctx, attempts);
  return attempts.map((a) => executionOf(a, recorded.get(a.op.id)));
}

/** The audit-trail evidence of the claimed operations that need it (ambiguous ones only): one read. */
async function evidenceOf(ctx: EngineContext, claimed: readonly ClaimedOperation[]): Promise<Map<string, EvidenceHistory>> {
  const needing = claimed.filter((op) => needsEvidence(op, ctx.policy));
  const histories = new Map<string, EvidenceHistory>();
  if (needing.length === 0) return histories;
  const events = await loadEvidenceEvents(ctx.db, needing.map((op) => op.id));
  for (const op of needing) histories.set(op.id, summarizeEvidence(op, events.get(op.id) ?? [], ctx.policy));
  return histories;
}

/** Every attempt's write (a release, a re-issue or a recorded outcome), all in one round trip. */
async function recordAttempts(ctx: EngineContext, attempts: readonly Attempt[]): Promise<Map<string, RecordResult>> {
  const writes: OutcomeWrite[] = [];
  const reissues: ReissueWrite[] = [];
  for (const { op, step, outcome, waitUntilMs, notStarted } of attempts) {
    if (waitUntilMs !== undefined) {
      writes.push(releaseWrite(op, Math.max(0, waitUntilMs - op.claimedAt.getTime()), `List waits for the settle delay after the last send, until ${new Date(waitUntilMs).toISOString()}`));
    } else if (outcome === null) {
      writes.push(releaseWrite(op, null, notStarted ?? 'not started: no time or request budget left'));
    } else if (outcome.reissue) {
      reissues.push({ operationId: op.id, leaseToken: op.leaseToken, fromStatus: op.status, keyGeneration: op.keyGeneration, detail: outcome.detail });
    } else {
      writes.push({ operationId: op.id, leaseToken: op.leaseToken, action: 'record', step: step!, fromStatus: op.status, keyGeneration: op.keyGeneration, ...outcome });
    }
  }
  const [recordedRows, reissuedRows] = await Promise.all([
    recordOutcomes(ctx.db, writes, ctx.actor, ctx.publishLeaseMs),
    reissueAfterProof(ctx.db, reissues, ctx.actor, ctx.publishLeaseMs, watchTimings(ctx.policy)),
  ]);
  return new Map<string, RecordResult>([...recordedRows, ...reissuedRows].map((r) => [r.operationId, r]));
}

/** What the caller is told of one attempt, given what its write did. */
function executionOf({ op, step, outcome, waitUntilMs }: Attempt, result: RecordResult | undefined): Execution {
  if (waitUntilMs !== undefined) return { operationId: op.id, status: result?.status ?? op.status, disposition: 'deferred' as const, step: 'wait' as const };
  if (outcome === null) return { operationId: op.id, status: result?.status ?? op.status, disposition: 'released' as const };
  if (!result?.applied) return { operationId: op.id, status: op.status, disposition: 'discarded' as const, step: step!, outcome };
  return {
    operationId: op.id,
    status: result.status ?? outcome.status,
    disposition: 'attempted' as const,
    step: step!,
    outcome,
    reviewReason: outcome.reviewReason,
    event: result.event,
  };
}

/** One attempt: choose the step, make the call(s), decide the outcome. Null: not started. */
async function attempt(
  ctx: EngineContext,
  op: ClaimedOperation,
  history: EvidenceHistory | null,
  canStart: (() => boolean) | undefined,
  sinceClaim: () => number,
): Promise<Attempt> {
  const { policy, gateway } = ctx;
  const decision: DecisionContext = { op, policy, random: ctx.random, history };
  // A refund of a charge that failed: settled without a call (its audit step is 'precondition').
  const precondition = decidePrecondition(op);
  if (precondition) return { op, step: 'precondition', outcome: precondition };
  const kind = KIND_ADAPTERS[op.kind];
  const step = chooseStep(op, policy, history);
  if (step.kind === 'wait') return { op, step: step.kind, outcome: null, waitUntilMs: step.untilMs };
  const mayCall = async (kind: Step['kind']) => (canStart?.() ?? true) && ((await ctx.beforeCall?.(kind, accountOf(op))) ?? true);
  if (!(await mayCall(step.kind))) return { op, step: null, outcome: null };
  // Nothing goes out under a key older than the window: the claim judged it, but a create may start
  // later than its claim (the rate limiter's wait, the calls queued ahead of it in a batch). Given
  // back untouched, due at once: the next claim, after the window, takes the List path.
  const create = async (): Promise<Attempt> => {
    const now = new Date(op.claimedAt.getTime() + sinceClaim());
    // (A capture or cancel has no window: Stripe acts on its PaymentIntent once, whatever the key.)
    if (!KIND_RULES[op.kind].actsOnPaymentIntent && !withinKeyWindow(op.firstAttemptedAt, now, policy)) {
      return { op, step: null, outcome: null, notStarted: `not sent: the key window (${formatDuration(policy.keyWindowMs)}) ended between the claim and the call` };
    }
    return { op, step: step.kind, outcome: decideCreate(decision, await createPaymentIntent(ctx, op)) };
  };
  switch (step.kind) {
    case 'retrieve':
      return { op, step: step.kind, outcome: decideRetrieve(decision, step.paymentIntentId, await guard(() => kind.retrieve(gateway, step.paymentIntentId, accountOf(op)))) };
    case 'search':
      return { op, step: step.kind, outcome: decideSearch(decision, await guard(() => gateway.searchPaymentIntents({ operationId: op.id, keyGeneration: op.keyGeneration, account: accountOf(op) }))) };
    case 'list': {
      // Every page after the first is one more request against the same budget.
      const window = listWindow(op, history, policy);
      const answer = await guard(() => kind.list(gateway, KIND_RULES[op.kind].listScope(op), window, () => mayCall('list'), accountOf(op)));
      return { op, step: step.kind, outcome: decideList(decision, window, answer) };
    }
    case 'early_search': {
      const decided = decideEarlySearch(decision, await guard(() => gateway.searchPaymentIntents({ operationId: op.id, keyGeneration: op.keyGeneration, account: accountOf(op) })));
      if (decided !== 'create') return { op, step: step.kind, outcome: decided };
      // Nothing found (or Search unavailable): the same key, inside its window, is still safe.
      // If the budget says no now, the search was still worth it; the create waits for next time.
      if (!(await mayCall('create'))) return { op, step: null, outcome: null };
      return create();
    }
    case 'create':
      return create();
  }
}

async function createPaymentIntent(ctx: EngineContext, op: ClaimedOperation): Promise<GatewayResult<PaymentIntentView>> {
  return guard(() => KIND_ADAPTERS[op.kind].create(ctx.gateway, op));
}

/**
 * A gateway is meant never to throw; if one does anyway (a bug, an SDK surprise), the call may have
 * gone out, so the answer is "ambiguous" — recorded, retried with the same key — not a lost batch.
 */
async function guard<T>(call: () => Promise<GatewayResult<T>>): Promise<GatewayResult<T>> {
  try {
    return await call();
  } catch (error) {
    const e = error instanceof Error ? error : new Error(String(error));
    return { ok: false, failure: { kind: FailureKind.ambiguous, errorClass: e.name, message: e.message } };
  }
}
