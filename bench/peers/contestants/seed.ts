// Contestant 3: the seed algorithm (docs/compared.md: the textbook design this product started from), ported literally: its schema, request_charge,
// _load, _mark_attempt_started, _record and execute_charge, its three-way error classification, and
// execute_charge re-run over every open operation as its recovery. Differences, all forced by the
// bench: one message at a time from SQS instead of its Outbox dispatcher; its 23 h window is the
// bench's compressed key window; metadata also carries order_id (the ground truth is per order). Each
// `with conn.transaction()` of the seed holds one statement, so each is one autocommit statement here.
import pg from 'pg';
import type Stripe from 'stripe';
import type { ChargeRequest } from '../../../lambdas/payments/message.ts';
import { fifoBatch, type Contestant } from '../contestant.ts';
import type { Belief } from '../truth.ts';

const SCHEMA = `CREATE TABLE IF NOT EXISTS seed_payment_operations (
  id uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  order_id text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('charge')),
  amount bigint NOT NULL CHECK (amount > 0),
  currency text NOT NULL,
  customer_id text NOT NULL,
  payment_method text NOT NULL,
  status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'unknown', 'succeeded', 'failed')),
  external_id text,
  attempts integer NOT NULL DEFAULT 0,
  first_attempted_at timestamptz,
  last_error text,
  created_at timestamptz NOT NULL DEFAULT now(),
  updated_at timestamptz NOT NULL DEFAULT now(),
  UNIQUE (order_id, kind))`;

class AmbiguousOutcome extends Error {}
class RetryLater extends Error {}
class Declined extends Error {}

interface Operation {
  id: string;
  order_id: string;
  amount: string;
  currency: string;
  customer_id: string;
  payment_method: string;
  status: string;
  external_id: string | null;
  within_key_window: boolean;
}

export function outcomeFor(externalStatus: string): string {
  if (externalStatus === 'succeeded') return 'succeeded';
  if (externalStatus === 'canceled' || externalStatus === 'requires_payment_method') return 'failed';
  return 'unknown';
}

export class SeedGateway {
  readonly client: Stripe;
  constructor(client: Stripe) {
    this.client = client;
  }

  async createCharge(op: Operation): Promise<{ id: string; status: string }> {
    try {
      const pi = await this.client.paymentIntents.create(
        {
          amount: Number(op.amount),
          currency: op.currency,
          customer: op.customer_id,
          payment_method: op.payment_method,
          confirm: true,
          off_session: true,
          metadata: { operation_id: op.id, order_id: op.order_id },
        },
        { idempotencyKey: `payment-op:${op.id}` },
      );
      return { id: pi.id, status: pi.status };
    } catch (error) {
      const type = (error as { type?: string }).type;
      if (type === 'StripeCardError') throw new Declined((error as { code?: string }).code ?? 'card_error');
      if (type === 'StripeRateLimitError') throw new RetryLater(String(error));
      // StripeIdempotencyError is not caught: a key-design bug, shown, not handled.
      if (type === 'StripeConnectionError' || type === 'StripeAPIError') throw new AmbiguousOutcome(type);
      throw error;
    }
  }

  async retrieveCharge(externalId: string): Promise<{ id: string; status: string }> {
    const pi = await this.client.paymentIntents.retrieve(externalId);
    return { id: pi.id, status: pi.status };
  }

  async findCharges(op: Operation): Promise<{ id: string; status: string }[]> {
    const result = await this.client.paymentIntents.search({ query: `metadata['operation_id']:'${op.id}'` });
    return result.data.map((pi) => ({ id: pi.id, status: pi.status }));
  }
}

export class SeedAlgorithm {
  readonly db: pg.Pool;
  readonly gateway: SeedGateway;
  readonly keyWindowMs: number;
  constructor(db: pg.Pool, gateway: SeedGateway, keyWindowMs: number) {
    this.db = db;
    this.gateway = gateway;
    this.keyWindowMs = keyWindowMs;
  }

  async requestCharge(order: ChargeRequest): Promise<string> {
    const inserted = await this.db.query<{ id: string }>(
      `INSERT INTO seed_payment_operations (order_id, kind, amount, currency, customer_id, payment_method)
       VALUES ($1, 'charge', $2, $3, $4, $5) ON CONFLICT (order_id, kind) DO NOTHING RETURNING id`,
      [order.orderId, order.amount, order.currency, order.customerId, order.paymentMethod],
    );
    const id = inserted.rows[0]?.id;
    if (id) return id;
    return (await this.db.query<{ id: string }>(`SELECT id FROM seed_payment_operations WHERE order_id = $1 AND kind = 'charge'`, [order.orderId])).rows[0]!.id;
  }

  async #load(opId: string): Promise<Operation> {
    const { rows } = await this.db.query<Operation>(
      `SELECT id, order_id, amount, currency, customer_id, payment_method, status, external_id,
              (first_attempted_at IS NULL OR first_attempted_at > now() - $1::bigint * interval '1 millisecond') AS within_key_window
         FROM seed_payment_operations WHERE id = $2`,
      [this.keyWindowMs, opId],
    );
    if (!rows[0]) throw new Error(`LookupError: ${opId}`);
    return rows[0];
  }

  async #markAttemptStarted(opId: string): Promise<void> {
    await this.db.query('UPDATE seed_payment_operations SET first_attempted_at = coalesce(first_attempted_at, now()) WHERE id = $1', [opId]);
  }

  async #record(opId: string, status: string, externalId: string | null = null, error: string | null = null): Promise<void> {
    await this.db.query(
      `UPDATE seed_payment_operations
          SET status = $1, external_id = COALESCE($2, external_id), last_error = $3, attempts = attempts + 1, updated_at = now()
        WHERE id = $4 AND status IN ('pending', 'unknown')`,
      [status, externalId, error, opId],
    );
  }

  async executeCharge(opId: string): Promise<string> {
    const op = await this.#load(opId);
    if (op.status === 'succeeded' || op.status === 'failed') return op.status;
    if (op.external_id !== null) {
      const charge = await this.gateway.retrieveCharge(op.external_id);
      await this.#record(op.id, outcomeFor(charge.status), charge.id);
      return outcomeFor(charge.status);
    }
    if (!op.within_key_window) {
      const found = await this.gateway.findCharges(op);
      if (found.length !== 1) {
        await this.#record(op.id, 'unknown', null, `key window expired; ${found.length} match(es); needs review`);
        return 'unknown';
      }
      await this.#record(op.id, outcomeFor(found[0]!.status), found[0]!.id);
      return outcomeFor(found[0]!.status);
    }
    await this.#markAttemptStarted(op.id);
    let charge: { id: string; status: string };
    try {
      charge = await this.gateway.createCharge(op);
    } catch (error) {
      if (error instanceof AmbiguousOutcome) {
        await this.#record(op.id, 'unknown', null, error.message);
        return 'unknown';
      }
      if (error instanceof RetryLater) {
        await this.#record(op.id, op.status, null, error.message);
        return op.status;
      }
      if (error instanceof Declined) {
        await this.#record(op.id, 'failed', null, error.message);
        return 'failed';
      }
      throw error;
    }
    await this.#record(op.id, outcomeFor(charge.status), charge.id);
    return outcomeFor(charge.status);
  }
}

export const seed: Contestant = {
  id: 'seed',
  title: "the seed's algorithm (4 statements, 1 at a time)",
  store: 'postgresql',
  async start(ctx) {
    const pool = new pg.Pool({ connectionString: ctx.databaseUrl, max: 10, application_name: 'peer-seed' });
    pool.on('error', () => {}); // idle connections die when the run's database is dropped
    await pool.query(SCHEMA);
    const algorithm = new SeedAlgorithm(pool, new SeedGateway(ctx.stripe()), ctx.keyWindowMs);
    return {
      // request_charge then execute_charge; an 'unknown' is durable and left to the recovery.
      charge: async (event) =>
        fifoBatch(event.Records, async (body) => {
          await algorithm.executeCharge(await algorithm.requestCharge(JSON.parse(body) as ChargeRequest));
        }),
      // The recovery: execute_charge again for every open operation, one at a time.
      reconcile: async (_event, context) => {
        const { rows } = await pool.query<{ id: string }>(
          `SELECT id FROM seed_payment_operations WHERE status IN ('pending', 'unknown') ORDER BY updated_at LIMIT 200`,
        );
        let done = 0;
        for (const { id } of rows) {
          if (context.getRemainingTimeInMillis() < 5_000) break;
          await algorithm.executeCharge(id).catch(() => undefined);
          done += 1;
        }
        return { done };
      },
      async beliefs() {
        const { rows } = await ctx.observer.query<{ order_id: string; status: string; last_error: string | null; updated_at: Date }>(
          '/* bench */ SELECT order_id, status, last_error, updated_at FROM seed_payment_operations',
        );
        const out = new Map<string, Belief>();
        for (const r of rows) {
          if (r.status === 'succeeded' || r.status === 'failed') out.set(r.order_id, { state: r.status, finishedAtMs: r.updated_at.getTime() });
          else if (r.last_error?.includes('needs review')) out.set(r.order_id, { state: 'review', finishedAtMs: r.updated_at.getTime() });
          else out.set(r.order_id, { state: 'open', finishedAtMs: null });
        }
        return out;
      },
      stop: () => pool.end(),
    };
  },
};
