// The charge path: a charge request made durable (and claimed) before any side effect, then executed
// by claimed-execution.ts. The same order twice is the same operation; the same order with other
// parameters is an OrderConflictError and never a second operation.
import { randomUUID } from 'node:crypto';
import { executeClaimed } from './claimed-execution.ts';
import { skipped, type EngineContext } from './engine-context.ts';
import { OrderConflictError } from './errors.ts';
import { requestAndClaim, type RequestRow } from './operations-store.ts';
import { OutcomesNotRecordedError, type Execution, type RequestResult } from './request-results.ts';
import type { ChargeInput } from './types.ts';

const PARAMETERS = [
  'amount',
  'currency',
  'customerId',
  'paymentMethod',
  'description',
  'statementDescriptorSuffix',
  'metadata',
  'account',
  'applicationFeeAmount',
  'transferDestination',
  'captureMethod',
] as const;

/** Absent, null and an empty metadata object all mean "none"; metadata compares by its sorted entries. */
function parameterValue(input: ChargeInput, field: (typeof PARAMETERS)[number]): unknown {
  const value = input[field];
  if (field === 'metadata') {
    const entries = Object.entries((value as Record<string, string> | null | undefined) ?? {}).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return entries.length === 0 ? null : JSON.stringify(entries);
  }
  return value ?? null;
}

export function conflictingFields(existing: ChargeInput, requested: ChargeInput): (keyof ChargeInput)[] {
  return PARAMETERS.filter((field) => parameterValue(existing, field) !== parameterValue(requested, field));
}

/**
 * The batch path of the charge handler: every request made durable and (when `execute`) claimed in
 * one round trip, the Stripe calls made concurrently, every outcome recorded in one round trip.
 * Repeats of one order inside the batch share one operation and cause at most one call.
 * `canStart` is asked before each Stripe call (the handler's remaining-time check).
 * Throws before anything is durable (the request statement failed), or OutcomesNotRecordedError
 * when every request is durable but the outcomes could not be written.
 */
export async function processChargeRequests(
  ctx: EngineContext,
  inputs: readonly ChargeInput[],
  options: { execute?: boolean; canStart?: () => boolean } = {},
): Promise<RequestResult[]> {
  const execute = options.execute ?? true;
  const firstIndexOfOrder = new Map<string, number>();
  const distinct: ChargeInput[] = [];
  for (const input of inputs) {
    if (!firstIndexOfOrder.has(input.orderId)) {
      firstIndexOfOrder.set(input.orderId, distinct.length);
      distinct.push(input);
    }
  }
  // Claim only when there is time to use the claim: a claim starts the key window.
  const claim = execute && (options.canStart?.() ?? true);
  const claimSent = ctx.now();
  const rows = await requestDurably(ctx, distinct, claim);

  const results = (executions: ReadonlyMap<string, Execution> | null): RequestResult[] =>
    inputs.map((input) => {
      const row = rows.get(firstIndexOfOrder.get(input.orderId)!)!;
      const fields = conflictingFields(row.operation, input);
      if (fields.length > 0) {
        return { input, operationId: row.operation.id, conflict: new OrderConflictError(row.operation, input, fields), execution: null };
      }
      const execution = executions?.get(row.operation.id) ?? (execute && executions ? skipped(row.operation) : null);
      return { input, operationId: row.operation.id, conflict: null, execution };
    });

  // From here on every request is durable, whatever happens to the outcomes.
  const claimed = [...rows.values()].flatMap((row) => (row.claimed ? [row.claimed] : []));
  const executions = new Map<string, Execution>();
  if (claimed.length > 0) {
    try {
      for (const execution of await executeClaimed(ctx, claimed, options.canStart, claimSent)) executions.set(execution.operationId, execution);
    } catch (cause) {
      throw new OutcomesNotRecordedError(results(null), cause);
    }
  }
  return results(executions);
}

/**
 * The request statement, asked again for the orders it could not read back (a concurrent insert of
 * the same order won): each distinct order's row, by its index in `distinct`.
 */
async function requestDurably(ctx: EngineContext, distinct: readonly ChargeInput[], claim: boolean): Promise<Map<number, RequestRow>> {
  const token = randomUUID();
  const rows = new Map<number, RequestRow>();
  let missing = distinct.map((input, index) => ({ input, index }));
  for (let round = 0; missing.length > 0; round++) {
    if (round === 5) throw new Error(`could not read back ${missing.length} operation(s) after concurrent inserts`);
    const got = await requestAndClaim(ctx.db, missing.map(({ input }) => ({ input, claim })), token, ctx.policy.leaseMs, ctx.actor);
    const stillMissing: typeof missing = [];
    missing.forEach((item, position) => {
      const row = got.get(position);
      if (row) rows.set(item.index, row);
      else stillMissing.push(item);
    });
    missing = stillMissing;
  }
  return rows;
}
