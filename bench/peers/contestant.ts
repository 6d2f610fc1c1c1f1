// What bench:peers needs from a contestant: an SQS handler (and a scheduled recovery, if it has
// one), and its own store translated into one Belief per order.
import type Stripe from 'stripe';
import pg from 'pg';
import type { SqsHandler } from '../../local/event-source.ts';
import type { ScheduledHandler } from '../../local/scheduler.ts';
import type { Belief } from './truth.ts';
import type { ChargeRequest } from '../../lambdas/payments/message.ts';

export interface RigContext {
  /** The run's database (already migrated with this product's schema); a contestant may add tables. */
  readonly databaseUrl: string;
  /** A small pool on it for the bench's own reads (beliefs), not counted as the contestant's work. */
  readonly observer: pg.Pool;
  /** A Stripe client configured like everyone's: same timeout, same SDK retries, same fake. */
  readonly stripe: () => Stripe;
  /** The compressed key window (the seed's 23 h). */
  readonly keyWindowMs: number;
  /** DynamoDB endpoint (dynalite) for the contestants that keep their state there. */
  readonly dynamoEndpoint: string;
}

export interface RunningContestant {
  /** Undefined: this product's unchanged handlers (the pipeline loads them). */
  readonly charge?: SqsHandler;
  /** Undefined with `charge` undefined: this product's reconciler; null: no recovery at all. */
  readonly reconcile?: ScheduledHandler | null;
  /** The store's view of every order it has a record of (orderIds: every order the bench sent). */
  beliefs(orderIds: readonly string[]): Promise<Map<string, Belief>>;
  /** One line on the operations still open (diagnostics for the progress log). */
  describeOpen?(): Promise<string>;
  /**
   * Resolves when the work the contestant goes on doing by itself once the queue is empty (the
   * retries inside a durable execution) is done; the bench waits for it, bounded, before the quiet.
   */
  settle?(): Promise<void>;
  /** DynamoDB requests so far, for the contestants that use it. */
  storeRequests?(): number;
  stop(): Promise<void>;
}

export interface Contestant {
  readonly id: 'ours' | 'powertools' | 'powertools-default' | 'seed' | 'naive' | 'dbos' | 'durable' | 'limit-intake';
  readonly title: string;
  /** Its database work is PostgreSQL (WAL and statement counts apply); memory: no store figures. */
  readonly store: 'postgresql' | 'dynamodb' | 'memory';
  start(ctx: RigContext): Promise<RunningContestant>;
}

/** SQS FIFO rule (AWS docs, "partial batch responses" for FIFO): after a failure, fail the rest of the batch. */
export async function fifoBatch(
  records: readonly { readonly messageId: string; readonly body: string }[],
  each: (body: string) => Promise<void>,
): Promise<{ batchItemFailures: { itemIdentifier: string }[] }> {
  const failures: { itemIdentifier: string }[] = [];
  for (const record of records) {
    if (failures.length > 0) {
      failures.push({ itemIdentifier: record.messageId });
      continue;
    }
    try {
      await each(record.body);
    } catch {
      failures.push({ itemIdentifier: record.messageId });
    }
  }
  return { batchItemFailures: failures };
}

/**
 * Beliefs from a table of (order_id, status, updated_at): succeeded / failed are final at updated_at,
 * anything else is open. What the contestants that keep one row per order store.
 */
export async function statusRowBeliefs(observer: pg.Pool, table: string): Promise<Map<string, Belief>> {
  const { rows } = await observer.query<{ order_id: string; status: string; updated_at: Date }>(`/* bench */ SELECT order_id, status, updated_at FROM ${pg.escapeIdentifier(table)}`);
  const out = new Map<string, Belief>();
  for (const r of rows) {
    out.set(r.order_id, r.status === 'succeeded' || r.status === 'failed' ? { state: r.status, finishedAtMs: r.updated_at.getTime() } : { state: 'open', finishedAtMs: null });
  }
  return out;
}

/** The PaymentIntent every contestant creates for an order: the same parameters, confirmed off-session. */
export function paymentIntentParams(order: ChargeRequest): Stripe.PaymentIntentCreateParams {
  return {
    amount: order.amount,
    currency: order.currency,
    customer: order.customerId,
    payment_method: order.paymentMethod,
    confirm: true,
    off_session: true,
    metadata: { order_id: order.orderId },
  };
}
