// The message contract's Connect fields (docs/producers.md#connected-accounts): `account`,
// `applicationFeeAmount`, `transferDestination` — validated by the schema the producer and the charge
// handler share, part of the parameters digest (so of the MessageDeduplicationId) only when set.
import { createHash } from 'node:crypto';
import { CreateQueueCommand, ReceiveMessageCommand } from '@aws-sdk/client-sqs';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { main as produce } from '../lambdas/producer/cli.ts';
import { startLocalSqs, type LocalSqs } from '../local/sqs.ts';
import { chargeParametersDigest, deduplicationId, parseChargeRequest, parseQueueMessage } from '../lambdas/payments/message.ts';
import { chargeRequestMessage } from '../lambdas/producer/client.ts';

const base = { orderId: 'order-c1', amount: 5000, currency: 'eur', customerId: 'cus_OnAcct', paymentMethod: 'pm_card_visa' };
const parse = (body: Record<string, unknown>) => parseChargeRequest(JSON.stringify(body));
const reason = (body: Record<string, unknown>) => {
  const result = parse(body);
  if (result.ok) throw new Error('expected a rejection');
  return result.reason;
};

describe('the Connect fields of a charge request', () => {
  it('accepts a direct charge (account, fee) and a destination charge (destination, fee)', () => {
    expect(parse({ ...base, account: 'acct_1032D82eZvKYlo2C', applicationFeeAmount: 250 })).toMatchObject({ ok: true, request: { account: 'acct_1032D82eZvKYlo2C', applicationFeeAmount: 250 } });
    expect(parse({ ...base, transferDestination: 'acct_1Dest', applicationFeeAmount: 5000 })).toMatchObject({ ok: true });
    expect(parse({ ...base, account: 'acct_1Only' })).toMatchObject({ ok: true });
    expect(parseQueueMessage(JSON.stringify({ ...base, type: 'charge', account: 'acct_1Only' }))).toMatchObject({ ok: true, kind: 'charge' });
  });

  it('refuses what is not a Stripe account id, with a reason naming the field and never the value', () => {
    for (const account of ['acct_', 'acct_1 2', 'cus_123', 'acct_1-2', `acct_${'a'.repeat(65)}`, 'ACCT_1', 42]) {
      const why = reason({ ...base, account });
      expect(why).toMatch(/^account: /);
      if (typeof account === 'string' && account.length > 5) expect(why).not.toContain(account);
    }
    expect(reason({ ...base, transferDestination: 'acct_x!' })).toMatch(/^transferDestination: must be a Stripe account id/);
  });

  it('refuses a fee that is not an integer ≥ 1, above the amount, or without an account or destination', () => {
    expect(reason({ ...base, account: 'acct_1A', applicationFeeAmount: 0 })).toMatch(/^applicationFeeAmount: must be positive/);
    expect(reason({ ...base, account: 'acct_1A', applicationFeeAmount: 1.5 })).toMatch(/^applicationFeeAmount: must be an integer/);
    expect(reason({ ...base, account: 'acct_1A', applicationFeeAmount: 5001 })).toBe('applicationFeeAmount: must be at most the amount');
    expect(reason({ ...base, applicationFeeAmount: 10 })).toBe('applicationFeeAmount: needs an account or a transferDestination (a fee is taken from a connected account)');
  });

  it('refuses a charge both direct and destination', () => {
    expect(reason({ ...base, account: 'acct_1A', transferDestination: 'acct_1B' })).toMatch(/^transferDestination: a charge is either on a connected account/);
  });
});

describe('the deduplication id', () => {
  it('of a platform charge is unchanged by the new fields; each Connect field changes it', () => {
    // The digest of a platform charge is the one of the seven fields alone (as before the Connect fields existed).
    const before = createHash('sha256').update(JSON.stringify([base.amount, base.currency, base.customerId, base.paymentMethod, null, null, null])).digest('hex');
    expect(chargeParametersDigest(base)).toBe(before);
    const ids = new Set([
      deduplicationId(base),
      deduplicationId({ ...base, account: 'acct_1A' }),
      deduplicationId({ ...base, account: 'acct_1B' }),
      deduplicationId({ ...base, account: 'acct_1A', applicationFeeAmount: 1 }),
      deduplicationId({ ...base, transferDestination: 'acct_1A' }),
    ]);
    expect(ids.size).toBe(5);
  });

  it('the producer sends exactly the contract\'s fields, the Connect ones included', () => {
    const request = { ...base, account: 'acct_1A', applicationFeeAmount: 7, extra: 'dropped' } as typeof base & { account: string; applicationFeeAmount: number };
    const message = chargeRequestMessage(request);
    expect(JSON.parse(message.MessageBody)).toEqual({ ...base, account: 'acct_1A', applicationFeeAmount: 7 });
    expect(message.MessageDeduplicationId).toBe(deduplicationId(request));
  });
});

describe('npm run produce with the Connect flags', () => {
  let sqs: LocalSqs;
  beforeAll(async () => {
    sqs = await startLocalSqs({ visibilityTimeoutSeconds: 30 });
  });
  afterAll(async () => {
    await sqs?.stop();
  });
  const charge = ['--order', 'cli-connect-1', '--amount', '5000', '--currency', 'eur', '--customer', 'cus_OnAcct', '--payment-method', 'pm_card_visa'];
  async function run(args: string[]) {
    const out: string[] = [];
    const err: string[] = [];
    const code = await produce(args, { AWS_REGION: 'us-east-1' }, { out: (l) => out.push(l), err: (l) => err.push(l) });
    return { code, out, err };
  }

  it('sends --account and --application-fee as the contract\'s fields; refuses a bad one naming its flag, and the flags with --refund', async () => {
    const { QueueUrl } = await sqs.client.send(new CreateQueueCommand({ QueueName: 'connect-cli.fifo', Attributes: { FifoQueue: 'true', ContentBasedDeduplication: 'false' } }));
    const sent = await run([...charge, '--account', 'acct_1Cli', '--application-fee', '120', '--endpoint', sqs.endpoint, '--queue-url', QueueUrl!]);
    expect(sent).toMatchObject({ code: 0 });
    const received = await sqs.client.send(new ReceiveMessageCommand({ QueueUrl, MaxNumberOfMessages: 10 }));
    expect(received.Messages?.map((m) => JSON.parse(m.Body!))).toEqual([
      { orderId: 'cli-connect-1', amount: 5000, currency: 'eur', customerId: 'cus_OnAcct', paymentMethod: 'pm_card_visa', account: 'acct_1Cli', applicationFeeAmount: 120 },
    ]);

    const bad = await run([...charge, '--transfer-destination', 'cus_NotAnAccount', '--queue-url', QueueUrl!]);
    expect(bad.code).toBe(2);
    expect(bad.err[0]).toMatch(/^error: --transfer-destination: must be a Stripe account id/);
    const fee = await run([...charge, '--application-fee', '10', '--queue-url', QueueUrl!]);
    expect(fee.code).toBe(2);
    expect(fee.err[0]).toMatch(/^error: --application-fee: needs an account or a transferDestination/);
    const withRefund = await run(['--refund', 'rf-1', '--order', 'cli-connect-1', '--amount', '10', '--account', 'acct_1Cli', '--queue-url', QueueUrl!]);
    expect(withRefund.code).toBe(2);
    expect(withRefund.err.join('\n')).toMatch(/--account go with one charge request/);
  });
});
