// A consumer process for crash.test.ts: works ONE delivery with the receipt notifier and prints
// what it came to. The test kills it (SIGKILL) while its e-mail request is at the provider.
import pg from 'pg';
import { HttpEmailProvider } from '../../lambdas/consumers/receipts/email-provider.ts';
import { createReceiptNotifier, templateRecipient } from '../../lambdas/consumers/receipts/notifier.ts';
import type { ConsumerPolicy } from '../../lambdas/consumers/kit/types.ts';

const env = process.env;
const pool = new pg.Pool({ connectionString: env.CRASH_DATABASE_URL, max: 2 });
const consumer = createReceiptNotifier({
  db: pool,
  name: env.CRASH_CONSUMER!,
  policy: env.CRASH_POLICY as ConsumerPolicy,
  provider: new HttpEmailProvider({ apiBase: env.CRASH_EMAIL_URL!, apiKey: 're_test', idempotencyKeys: env.CRASH_EMAIL_IDEMPOTENCY === 'true', timeoutMs: 20_000 }),
  from: 'receipts@shop.example',
  recipient: templateRecipient('customer+{orderId}@example.com'),
  leaseMs: 60_000,
});
const result = await consumer.processBatch([{ messageId: 'crash-1', body: env.CRASH_BODY!, attributes: { ApproximateReceiveCount: '1' } }]);
process.stdout.write(`${JSON.stringify(result.results)}\n`);
await pool.end();
