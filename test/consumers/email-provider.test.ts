// The e-mail provider adapter against the fake e-mail API (Resend-shaped) and against sockets that
// misbehave: every answer lands in the class the policies decide on — rejected, not executed,
// ambiguous — and the fake keeps Resend's documented idempotency behaviour.
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { EffectError, EffectFailure } from '../../lambdas/consumers/kit/errors.ts';
import { HttpEmailProvider } from '../../lambdas/consumers/receipts/email-provider.ts';
import { loadReceiptsConfig } from '../../lambdas/consumers/receipts/config.ts';
import { freePort } from '../../local/postgres.ts';
import { startFakeEmail, type FakeEmail } from '../../local/fake-email/server.ts';

let keyed: FakeEmail;
let plain: FakeEmail;
let hanging: http.Server;
let hangingUrl: string;
beforeAll(async () => {
  keyed = await startFakeEmail({ idempotency: true });
  plain = await startFakeEmail({ idempotency: false });
  hanging = http.createServer(() => {}); // never answers
  await new Promise<void>((resolve) => hanging.listen(0, '127.0.0.1', resolve));
  hangingUrl = `http://127.0.0.1:${(hanging.address() as AddressInfo).port}`;
});
afterAll(async () => {
  hanging.closeAllConnections();
  await new Promise((resolve) => hanging.close(resolve));
  await Promise.all([keyed.close(), plain.close()]);
});

const message = { from: 'receipts@shop.example', to: 'a@example.com', subject: 'Receipt for order o-1', text: 'thanks' };
const provider = (fake: { url: string; idempotency: boolean }, timeoutMs = 2_000) =>
  new HttpEmailProvider({ apiBase: fake.url, apiKey: 're_test', idempotencyKeys: fake.idempotency, timeoutMs });

async function failure(promise: Promise<unknown>): Promise<{ failure: EffectFailure; code: string | undefined }> {
  try {
    await promise;
  } catch (error) {
    expect(error).toBeInstanceOf(EffectError);
    return { failure: (error as EffectError).failure, code: (error as EffectError).code };
  }
  throw new Error('expected the send to fail');
}

describe('the fake e-mail API, as Resend documents it', () => {
  it('replays the first answer for a known key without sending again; refuses the key with another payload', async () => {
    const p = provider(keyed);
    const first = await p.send(message, { idempotencyKey: 'receipts:e1' });
    const again = await p.send(message, { idempotencyKey: 'receipts:e1' });
    expect(again.id).toBe(first.id);
    expect(keyed.sent().filter((m) => m.idempotencyKey === 'receipts:e1')).toHaveLength(1);
    expect(await failure(p.send({ ...message, subject: 'other' }, { idempotencyKey: 'receipts:e1' }))).toEqual({ failure: EffectFailure.rejected, code: 'invalid_idempotent_request' });
  });

  it('answers 409 concurrent_idempotent_requests while the first request with the key is still running (not executed)', async () => {
    let release!: () => void;
    let entered!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    const inside = new Promise<void>((resolve) => (entered = resolve));
    const slow = await startFakeEmail({
      idempotency: true,
      onRequest: (_r, phase) => {
        if (phase !== 'before-commit') return undefined;
        entered();
        return gate;
      },
    });
    try {
      const p = provider(slow);
      const first = p.send(message, { idempotencyKey: 'k-concurrent' });
      await inside; // the first request is being processed, its key taken
      expect(await failure(p.send(message, { idempotencyKey: 'k-concurrent' }))).toEqual({ failure: EffectFailure.notExecuted, code: 'concurrent_idempotent_requests' });
      release();
      await first;
      expect(slow.sent()).toHaveLength(1);
    } finally {
      release();
      await slow.close();
    }
  });

  it('without idempotency support, every request with the same key sends again', async () => {
    const p = provider(plain);
    await p.send(message, { idempotencyKey: 'k' });
    await p.send(message, { idempotencyKey: 'k' });
    expect(plain.sent()).toHaveLength(2);
  });
});

describe('classifying every answer', () => {
  it.each([
    ['lostResponse', EffectFailure.ambiguous],
    ['error500AfterCommit', EffectFailure.ambiguous],
    ['error500BeforeCommit', EffectFailure.ambiguous],
    ['rateLimited', EffectFailure.notExecuted],
  ] as const)('%s → %s', async (fault, expected) => {
    plain.injectFault(fault);
    expect((await failure(provider(plain).send(message, {}))).failure).toBe(expected);
  });

  it('a 400 (bad sender) is rejected for good; a missing key (401) is not executed', async () => {
    expect(await failure(provider(plain).send({ ...message, from: 'nobody' }, {}))).toEqual({ failure: EffectFailure.rejected, code: 'validation_error' });
    const noKey = new HttpEmailProvider({ apiBase: plain.url, apiKey: '', idempotencyKeys: false });
    expect(await failure(noKey.send(message, {}))).toEqual({ failure: EffectFailure.notExecuted, code: 'missing_api_key' });
  });

  it('a refused connection is not executed; a timeout is ambiguous', async () => {
    const closed = { url: `http://127.0.0.1:${await freePort()}`, idempotency: false };
    expect(await failure(provider(closed).send(message, {}))).toEqual({ failure: EffectFailure.notExecuted, code: 'ECONNREFUSED' });
    expect((await failure(provider({ url: hangingUrl, idempotency: false }, 200).send(message, {}))).failure).toBe(EffectFailure.ambiguous);
  });
});

describe('the notifier configuration', () => {
  it('lists every problem at once and says what to change', () => {
    expect(() => loadReceiptsConfig({ RECEIPTS_POLICY: 'sometimes', EMAIL_TIMEOUT_MS: '5', CONSUMER_MIGRATE_ON_START: 'yes' })).toThrow(
      /RECEIPTS_POLICY must be one of idempotent, at-least-once, at-most-once[\s\S]*EMAIL_API_BASE is not set[\s\S]*EMAIL_API_KEY[\s\S]*EMAIL_TIMEOUT_MS must be an integer in \[100, 60000\][\s\S]*CONSUMER_MIGRATE_ON_START must be true or false/,
    );
    expect(() => loadReceiptsConfig({ RECEIPTS_POLICY: 'idempotent', EMAIL_API_BASE: 'https://api.resend.com', EMAIL_API_KEY: 're_x' })).toThrow(/needs EMAIL_PROVIDER_IDEMPOTENCY=true/);
    expect(loadReceiptsConfig({ EMAIL_API_BASE: 'https://api.resend.com', EMAIL_API_KEY: 're_x' })).toMatchObject({ policy: 'at-least-once', name: 'receipts', migrateOnStart: true, email: { idempotencyKeys: false, timeoutMs: 5000 } });
  });
});
