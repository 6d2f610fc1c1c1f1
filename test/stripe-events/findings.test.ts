// The operator's side of the findings: list what Stripe's events showed that the ledger cannot
// explain, and close a finding once explained (fenced: never twice), through the ops tool's own
// entry point (the same one the ops Lambda runs).
import { randomUUID } from 'node:crypto';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { StripeEventApplier } from '../../lambdas/payments/event-applier.ts';
import { inboxGauges } from '../../lambdas/payments/inbox-store.ts';
import { runOps, type OpsResponse } from '../../lambdas/ops/commands.ts';
import { render } from '../../lambdas/ops/render.ts';
import { receiveWebhook } from '../../lambdas/stripe-events/receive.ts';
import { makeStripeEvent } from '../../local/fake-stripe/webhooks.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { delivery, SECRET, testModeKeyOnly } from './support.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await createTestDatabase('findings');
});
afterAll(async () => {
  await db.drop();
});

const ops = (argv: string[]): Promise<OpsResponse> =>
  runOps(argv, {
    defaultActor: 'alice',
    context: () => ({ db: db.pool, stripe: () => Promise.reject(new Error('no Stripe in this test')), transport: { kind: 'test' } }),
  });

describe('findings list / findings resolve', () => {
  it('an unrecorded charge is listed, resolved once with who and why, and leaves the open-findings gauge', async () => {
    const event = makeStripeEvent('payment_intent.succeeded', {
      id: 'pi_unrecorded_ops', object: 'payment_intent', status: 'succeeded', amount: 700, currency: 'usd', customer: 'cus_x',
      metadata: { operation_id: randomUUID(), order_id: 'order-lost-in-a-restore', key_generation: '0' },
    });
    await receiveWebhook(delivery(event), { secret: SECRET, maxBodyBytes: 65536 }, { db: db.pool, applier: new StripeEventApplier({ db: db.pool, gateway: testModeKeyOnly() }), publisher: null });
    expect((await inboxGauges(db.pool)).openUnrecordedCharges).toBe(1);

    const listed = await ops(['findings', 'list']);
    expect(listed).toMatchObject({ ok: true, command: 'findings list', result: { total: 1, findings: [{ kind: 'unrecorded_charge', paymentIntentId: 'pi_unrecorded_ops', orderId: 'order-lost-in-a-restore', amount: 700, resolvedAt: null }] } });
    expect(render(listed, false).stdout.join('\n')).toContain('pi_unrecorded_ops');
    const id = listed.ok && listed.command === 'findings list' ? listed.result.findings[0]!.id : 0;

    expect(await ops(['findings', 'resolve', String(id)])).toMatchObject({ ok: false, exitCode: 2, error: { code: 'usage' } });
    const resolved = await ops(['findings', 'resolve', String(id), '--reason', 'charge from the staging account; refunded in the Dashboard']);
    expect(resolved).toMatchObject({ ok: true, result: { finding: { id, resolvedBy: 'operator:alice', resolution: 'charge from the staging account; refunded in the Dashboard' } } });
    expect(await ops(['findings', 'resolve', String(id), '--reason', 'again', '--actor', 'bob'])).toMatchObject({ ok: false, exitCode: 1, error: { code: 'conflict' } });
    expect(await ops(['findings', 'resolve', '999999', '--reason', 'x'])).toMatchObject({ ok: false, error: { code: 'not_found' } });

    expect(await inboxGauges(db.pool)).toMatchObject({ openUnrecordedCharges: 0 });
    expect(await ops(['findings', 'list'])).toMatchObject({ result: { total: 0 } });
    expect(await ops(['findings', 'list', '--all', '--kind', 'unrecorded_charge'])).toMatchObject({ result: { total: 1 } });
    expect(await ops(['findings', 'list', '--kind', 'nope'])).toMatchObject({ ok: false, exitCode: 2 });
  });
});
