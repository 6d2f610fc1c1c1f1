// Shared by the consumer tests: outcome events as EventBridge delivers them to an SQS queue (the
// body is the whole EventBridge event), a database with the kit's and the notifier's migrations,
// and "time travel" for leases (instead of sleeping until one expires).
import { randomUUID } from 'node:crypto';
import type pg from 'pg';
import { migrateConsumer } from '../../lambdas/consumers/kit/migrations.ts';
import type { QueueRecord } from '../../lambdas/consumers/kit/types.ts';
import { receiptMigrations } from '../../lambdas/consumers/receipts/notifier.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';

export interface TestEvent {
  readonly eventId: string;
  readonly operationId: string;
  readonly detailType: string;
  readonly sequence?: number;
  readonly orderId: string;
  readonly amount: number;
}

export function outcomeEvent(overrides: Partial<TestEvent> = {}): TestEvent {
  const operationId = overrides.operationId ?? randomUUID();
  return {
    eventId: randomUUID(),
    operationId,
    detailType: 'Charge Succeeded',
    orderId: `order-${operationId.slice(0, 8)}`,
    amount: 1299,
    ...overrides,
  };
}

/** The SQS body an EventBridge rule with an SQS target delivers: the whole event, with a new envelope id per publish. */
export function envelopeBody(event: TestEvent): string {
  return JSON.stringify({
    version: '0',
    id: randomUUID(),
    'detail-type': event.detailType,
    source: 'payments.charges',
    account: '000000000000',
    time: '2026-12-01T09:00:00Z',
    region: 'us-east-1',
    resources: [],
    detail: {
      version: 1,
      eventId: event.eventId,
      operationId: event.operationId,
      orderId: event.orderId,
      status: 'succeeded',
      amount: event.amount,
      currency: 'eur',
      externalId: 'pi_test_1',
      reason: null,
      occurredAt: '2026-12-01T09:00:00.000Z',
      ...(event.sequence !== undefined ? { sequence: event.sequence } : {}),
    },
  });
}

let counter = 0;
/** One SQS delivery of an event (each delivery has its own message id, as a re-send does). */
export function delivery(event: TestEvent | string, receiveCount = 1): QueueRecord {
  counter += 1;
  return {
    messageId: `msg-${counter}-${randomUUID().slice(0, 8)}`,
    body: typeof event === 'string' ? event : envelopeBody(event),
    attributes: { ApproximateReceiveCount: String(receiveCount) },
  };
}

export async function consumerDatabase(label: string): Promise<TestDatabase> {
  const db = await createTestDatabase(label);
  await migrateConsumer(db.url, receiptMigrations());
  return db;
}

/** As if the lease of every open attempt had run out (the visibility timeout passed after a crash). */
export async function expireLeases(pool: pg.Pool, consumer: string): Promise<void> {
  await pool.query(`UPDATE outcome_consumer.inbox SET lease_until = now() - interval '1 second' WHERE consumer = $1 AND state = 'attempting'`, [consumer]);
}

export async function inboxRow(pool: pg.Pool, consumer: string, eventId: string) {
  const { rows } = await pool.query<{ state: string; attempts: number; deliveries: number; last_error: string | null; policy: string }>(
    'SELECT state, attempts, deliveries, last_error, policy FROM outcome_consumer.inbox WHERE consumer = $1 AND event_id = $2',
    [consumer, eventId],
  );
  return rows[0];
}

export async function acceptedSends(pool: pg.Pool, eventId: string): Promise<number> {
  const { rows } = await pool.query<{ n: number }>('SELECT accepted_sends AS n FROM receipts.sent_receipts WHERE event_id = $1', [eventId]);
  return rows[0]?.n ?? 0;
}
