// `ops operations show` of operations on connected accounts (docs/model.md#connected-accounts): the
// CLI (in-process, direct mode) on real PostgreSQL and the fake Stripe through the real SDK. The
// account, a destination charge's account and the fee are shown in text and JSON; with --stripe
// every look-up of the evidence is made AS the operation's account (the fake keeps objects per
// Stripe-Account and records the header of every request), so a direct charge's PaymentIntent and
// its refund's Refund are found where they are, and a destination charge's on the platform.
import { beforeEach, describe, expect, it } from 'vitest';
import { refundOf } from '../support/orders.ts';
import { useWorld } from '../support/world.ts';
import { cli, cliJson, engine, opsEnv, order, resultOf, type Harness } from './support.ts';

const A = 'acct_1OpsShowAlpha';
const B = 'acct_1OpsShowBravo';

let h: Harness;
let env: NodeJS.ProcessEnv;
useWorld('ops_connect', (w) => {
  h = w;
  env = opsEnv(h);
});
beforeEach(() => {
  h.stripe.fake.addConnectedAccount(A);
  h.stripe.fake.addConnectedAccount(B);
});

/** The Stripe requests a command made: every one the fake received while it ran. */
async function requestsDuring<T>(run: () => Promise<T>): Promise<{ result: T; requests: ReturnType<Harness['stripe']['fake']['requests']> }> {
  const before = h.stripe.fake.requests().length;
  const result = await run();
  return { result, requests: h.stripe.fake.requests().slice(before) };
}

describe('operations show: a direct charge on a connected account', () => {
  it('shows the account and the fee, in JSON and in text; --stripe looks only as the account and finds the PaymentIntent', async () => {
    const input = order({ customerId: 'cus_ops_connect', account: A, applicationFeeAmount: 150 });
    const e = engine(h);
    const id = await e.requestCharge(input);
    expect((await e.executeCharge(id)).status).toBe('succeeded');
    const pi = h.stripe.fake.paymentIntents({ account: A, operationId: id })[0]!;

    const plain = resultOf((await cliJson(['operations', 'show', input.orderId], env)).response, 'operations show');
    expect(plain.operation).toMatchObject({ id, account: A, applicationFeeAmount: 150, transferDestination: null });

    const { result: shown, requests } = await requestsDuring(async () => resultOf((await cliJson(['operations', 'show', id, '--stripe'], env)).response, 'operations show'));
    expect(shown.stripe).toMatchObject({ complete: true, missing: [], problems: [] });
    expect(shown.stripe?.paymentIntents.map((p) => [p.id, p.status])).toEqual([[pi.id, 'succeeded']]);
    // Search and retrieve, each made as A: on the platform the PaymentIntent does not exist.
    expect(new Set(requests.map((r) => r.endpoint))).toEqual(new Set(['search', 'retrieve']));
    expect(requests.map((r) => r.account ?? null)).toEqual(requests.map(() => A));

    const text = await cli(['operations', 'show', id, '--stripe'], env);
    expect(text.code).toBe(0);
    expect(text.stdout).toContain(`Stripe account ${A} (every Stripe request of the operation is made as it)`);
    expect(text.stdout).toContain('application fee 1.50 EUR (150 eur)');
    expect(text.stdout).not.toContain('transfer destination');
    expect(text.stdout).toMatch(new RegExp(`Stripe \\(checked \\S+, as ${A}; Search by metadata.operation_id`));
  });

  it('a refund of it: shown with the account it inherits, and --stripe lists and retrieves the Refund as the account', async () => {
    const input = order({ customerId: 'cus_ops_connect', account: A });
    const e = engine(h);
    const chargeId = await e.requestCharge(input);
    expect((await e.executeCharge(chargeId)).status).toBe('succeeded');
    const refund = await e.processRefund(refundOf(input.orderId, { refundId: 'rf-ops-connect', amount: 500 }));
    expect(refund.execution?.status).toBe('succeeded');
    const refundId = refund.operationId!;

    const byOrder = resultOf((await cliJson(['operations', 'show', input.orderId], env)).response, 'operations show');
    expect(byOrder.orderRefunds).toEqual([expect.objectContaining({ id: refundId, account: A })]);

    const { result: shown, requests } = await requestsDuring(async () => resultOf((await cliJson(['operations', 'show', refundId, '--stripe'], env)).response, 'operations show'));
    expect(shown.operation).toMatchObject({ kind: 'refund', account: A, applicationFeeAmount: null, transferDestination: null });
    expect(shown.stripe).toMatchObject({ kind: 'refund', complete: true, missing: [] });
    expect(shown.stripe?.refunds.map((r) => r.status)).toEqual(['succeeded']);
    expect(new Set(requests.map((r) => r.endpoint))).toEqual(new Set(['refund_list', 'refund_retrieve']));
    expect(requests.map((r) => r.account ?? null)).toEqual(requests.map(() => A));

    const text = await cli(['operations', 'show', refundId, '--stripe'], env);
    expect(text.stdout).toContain(`Stripe account ${A}`);
    expect(text.stdout).toMatch(new RegExp(`Stripe \\(checked \\S+, as ${A}; List of pi_\\S+'s refunds`));
  });
});

describe('operations show: a destination charge', () => {
  it('shows the destination and the fee; --stripe looks on the platform, where the charge is', async () => {
    const input = order({ transferDestination: B, applicationFeeAmount: 200 });
    const e = engine(h);
    const id = await e.requestCharge(input);
    expect((await e.executeCharge(id)).status).toBe('succeeded');

    const { result: shown, requests } = await requestsDuring(async () => resultOf((await cliJson(['operations', 'show', id, '--stripe'], env)).response, 'operations show'));
    expect(shown.operation).toMatchObject({ account: null, transferDestination: B, applicationFeeAmount: 200 });
    expect(shown.stripe?.paymentIntents.map((p) => p.status)).toEqual(['succeeded']);
    expect(requests.length).toBeGreaterThan(0);
    expect(requests.every((r) => (r.account ?? null) === null)).toBe(true);

    const text = await cli(['operations', 'show', id], env);
    expect(text.stdout).toContain(`Stripe account: the platform   transfer destination ${B}   application fee 2.00 EUR (200 eur)`);
  });

  it('a platform charge says so and shows no Connect field', async () => {
    const input = order();
    const e = engine(h);
    const id = await e.requestCharge(input);
    await e.executeCharge(id);
    const shown = resultOf((await cliJson(['operations', 'show', id], env)).response, 'operations show');
    expect(shown.operation).toMatchObject({ account: null, transferDestination: null, applicationFeeAmount: null });
    const text = await cli(['operations', 'show', id], env);
    expect(text.stdout).toMatch(/Stripe account: the platform\n/);
  });
});
