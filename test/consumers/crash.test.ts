// A REAL crash between the effect and its record: a consumer process is SIGKILLed while its e-mail
// request is at the provider — after the provider recorded the mail (the effect happened, its
// record did not) or just before (nothing happened, but the claim is recorded). The next delivery
// (here: this process, once the lease has run out) then gets exactly what the policy promises:
//
//   | policy        | killed after the send       | killed before the send |
//   |---------------|-----------------------------|------------------------|
//   | at-least-once | 2 receipts (duplicate)      | 1 receipt              |
//   | idempotent    | 1 receipt (provider dedups) | 1 receipt              |
//   | at-most-once  | 1 receipt, row abandoned    | 0 receipts (the miss)  |
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import path from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { ConsumerPolicy } from '../../lambdas/consumers/kit/types.ts';
import { HttpEmailProvider } from '../../lambdas/consumers/receipts/email-provider.ts';
import { createReceiptNotifier, templateRecipient } from '../../lambdas/consumers/receipts/notifier.ts';
import { startFakeEmail, type FakeEmail } from '../../local/fake-email/server.ts';
import type { TestDatabase } from '../support/db.ts';
import { consumerDatabase, envelopeBody, expireLeases, inboxRow, outcomeEvent, delivery } from './support.ts';

let db: TestDatabase;
beforeAll(async () => {
  db = await consumerDatabase('consumer_crash');
});
afterAll(async () => {
  await db?.drop();
});

const CASES: readonly [ConsumerPolicy, 'after-commit' | 'before-commit', number, string][] = [
  ['at-least-once', 'after-commit', 2, 'done'],
  ['at-least-once', 'before-commit', 1, 'done'],
  ['idempotent', 'after-commit', 1, 'done'],
  ['idempotent', 'before-commit', 1, 'done'],
  ['at-most-once', 'after-commit', 1, 'abandoned'],
  ['at-most-once', 'before-commit', 0, 'abandoned'],
];

describe('a consumer process killed between its effect and the record of it', () => {
  it.each(CASES)('%s, killed %s: the next delivery leaves %i receipt(s), inbox %s', async (policy, phase, receipts, state) => {
    const name = `crash-${policy}-${phase}`;
    const event = outcomeEvent();
    let child: ChildProcess | undefined;
    let killed = false;
    const fake: FakeEmail = await startFakeEmail({
      idempotency: policy === 'idempotent',
      onRequest: async (_request, at) => {
        if (at !== phase || killed || !child) return;
        killed = true;
        const exited = once(child, 'exit');
        child.kill('SIGKILL');
        await exited;
        // Killed before the send: the request is never processed (the connection is gone).
        return at === 'before-commit' ? 'abort' : undefined;
      },
    });
    try {
      child = spawn(process.execPath, ['--import', 'tsx', path.join(import.meta.dirname, 'crash-child.ts')], {
        env: {
          ...process.env,
          CRASH_DATABASE_URL: db.url,
          CRASH_EMAIL_URL: fake.url,
          CRASH_EMAIL_IDEMPOTENCY: String(fake.idempotency),
          CRASH_POLICY: policy,
          CRASH_CONSUMER: name,
          CRASH_BODY: envelopeBody(event),
        },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let output = '';
      child.stdout!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      child.stderr!.on('data', (chunk: Buffer) => (output += chunk.toString()));
      const [code, signal] = (await once(child, 'exit')) as [number | null, string | null];
      expect({ code, signal, killed }, output).toEqual({ code: null, signal: 'SIGKILL', killed: true });

      // What the dead process left: its claim, recorded before the effect.
      expect(await inboxRow(db.pool, name, event.eventId)).toMatchObject({ state: 'attempting', attempts: 1 });
      expect(fake.sent()).toHaveLength(phase === 'after-commit' ? 1 : 0);

      // SQS delivers the message again once its visibility timeout is over, which is after the lease.
      await expireLeases(db.pool, name);
      const next = createReceiptNotifier({
        db: db.pool,
        name,
        policy,
        provider: new HttpEmailProvider({ apiBase: fake.url, apiKey: 're_test', idempotencyKeys: fake.idempotency }),
        from: 'receipts@shop.example',
        recipient: templateRecipient('customer+{orderId}@example.com'),
      });
      const redelivered = await next.processBatch([delivery(event, 2)]);
      expect(redelivered.response.batchItemFailures).toEqual([]);
      expect(redelivered.results[0]).toMatchObject(policy === 'at-most-once' ? { outcome: 'abandoned', effectCalls: 0 } : { outcome: 'done', effectCalls: 1, recovered: true });
      expect(fake.sent()).toHaveLength(receipts);
      expect((await inboxRow(db.pool, name, event.eventId))?.state).toBe(state);
      // A further delivery changes nothing.
      expect((await next.processBatch([delivery(event, 3)])).results[0]?.outcome).toBe('duplicate');
      expect(fake.sent()).toHaveLength(receipts);
    } finally {
      if (child && child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
      await fake.close();
    }
  }, 60_000); // a tsx child process starts slowly on a loaded machine
});
