// A resolution's outcome event: written to the outbox in the resolving statement, then published at
// once when a bus is configured (the ops function has PutEvents), through the real EventBridge SDK
// against the project's fake PutEvents endpoint.
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { chargeOutcomeDetailSchema } from '../../lambdas/events/contract.ts';
import { startFakeEventBridge, type FakeEventBridge } from '../../local/fake-eventbridge/server.ts';
import { createTestDatabase } from '../support/db.ts';
import { startStripe } from '../support/stripe.ts';
import { cliJson, intoReviewChargedUnseen, intoReviewNothingCharged, opsEnv, outboxRows, resultOf, type Harness } from './support.ts';

let h: Harness;
let bus: FakeEventBridge;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  h = { db: await createTestDatabase('ops_publish'), stripe: await startStripe() };
  bus = await startFakeEventBridge();
  // The SDK's credential chain reads the process environment; the fake accepts any signature.
  Object.assign(process.env, { AWS_ACCESS_KEY_ID: 'local', AWS_SECRET_ACCESS_KEY: 'local' });
  env = opsEnv(h, { EVENT_BUS_NAME: 'charge-outcomes', EVENTS_ENDPOINT: bus.url, AWS_REGION: 'us-east-1' });
});
afterAll(async () => {
  await bus.close();
  await h.stripe.close();
  await h.db.drop();
});

describe('outcome events of a resolution', () => {
  it('are published at once, with the contract’s detail and the outbox row marked published', async () => {
    const { id, paymentIntentId } = await intoReviewChargedUnseen(h);
    const result = resultOf(
      (await cliJson(['review', 'resolve', id, '--as', 'succeeded', '--payment-intent', paymentIntentId, '--reason', 'verified', '--actor', 'dana'], env)).response,
      'review resolve',
    );
    expect(result.published).toBe(true);
    const sent = bus.events().filter((e) => (e.detail as { operationId?: string }).operationId === id);
    expect(sent).toHaveLength(1);
    expect(sent[0]).toMatchObject({ detailType: 'Charge Succeeded', source: 'payments.charges', eventBusName: 'charge-outcomes' });
    const detail = chargeOutcomeDetailSchema.parse(sent[0]!.detail);
    expect(detail).toMatchObject({ eventId: result.outcomeEvent!.eventId, status: 'succeeded', externalId: paymentIntentId });
    const row = (await outboxRows(h, id)).find((r) => r.event_id === result.outcomeEvent!.eventId)!;
    expect(row.published_at).toBeInstanceOf(Date);
  });

  it('stay in the outbox for the relay when PutEvents fails; the resolution itself stands', async () => {
    const id = await intoReviewNothingCharged(h);
    bus.injectFault({ kind: 'callError', times: 5 });
    const { code, response } = await cliJson(['review', 'resolve', id, '--as', 'failed', '--reason', 'no charge', '--actor', 'dana'], env);
    expect(code).toBe(0);
    const result = resultOf(response, 'review resolve');
    expect(result.operation.status).toBe('failed');
    expect(result.published).toBe(false);
    const row = (await outboxRows(h, id)).find((r) => r.event_id === result.outcomeEvent!.eventId)!;
    expect(row).toMatchObject({ event_type: 'Charge Failed', published_at: null });
    chargeOutcomeDetailSchema.parse(row.payload);
  });
});
