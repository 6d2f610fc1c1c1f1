// The fake EventBridge through the REAL @aws-sdk/client-eventbridge: what the SDK does with each kind
// of answer is part of what is tested (retries, errors), because the outbox relay relies on it.
import { EventBridgeClient, ListRulesCommand, PutEventsCommand, type PutEventsRequestEntry } from '@aws-sdk/client-eventbridge';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  MAX_PUT_EVENTS_BYTES,
  putEventsEntrySize,
  startFakeEventBridge,
  type FakeEventBridge,
} from '../local/fake-eventbridge/server.ts';

const BUS = 'charge-outcomes';
const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };

let fake: FakeEventBridge;
const clients: EventBridgeClient[] = [];

/** A real SDK client on the fake; `maxAttempts` left to the SDK default unless given. */
function client(config: { maxAttempts?: number } = {}): EventBridgeClient {
  const c = new EventBridgeClient({ endpoint: fake.url, region: 'us-east-1', credentials, ...config });
  clients.push(c);
  return c;
}

function entry(eventId: string, detail: Record<string, unknown> = {}): PutEventsRequestEntry {
  return {
    EventBusName: BUS,
    Source: 'payments.charges',
    DetailType: 'Charge Succeeded',
    Detail: JSON.stringify({ eventId, orderId: `order-${eventId}`, ...detail }),
  };
}

beforeAll(async () => {
  fake = await startFakeEventBridge();
});
afterEach(() => {
  fake.reset();
  for (const c of clients.splice(0)) c.destroy();
});
afterAll(async () => {
  await fake.close();
});

describe('fake EventBridge PutEvents through the real SDK', () => {
  it('accepts a normal call and records bus, source, detail-type, parsed detail, call and time', async () => {
    const time = new Date('2026-11-05T10:00:00Z');
    const before = Date.now();
    const out = await client().send(new PutEventsCommand({ Entries: [{ ...entry('e1'), Time: time }, entry('e2')] }));

    expect(out.FailedEntryCount).toBe(0);
    expect(out.Entries).toHaveLength(2);
    expect(out.Entries?.every((e) => typeof e.EventId === 'string' && e.ErrorCode === undefined)).toBe(true);
    const [first, second] = fake.events();
    expect(first).toMatchObject({
      eventId: out.Entries?.[0]?.EventId,
      eventBusName: BUS,
      source: 'payments.charges',
      detailType: 'Charge Succeeded',
      detail: { eventId: 'e1', orderId: 'order-e1' },
      time,
      entryIndex: 0,
    });
    expect(second?.entryIndex).toBe(1);
    expect(first?.callId).toBe(second?.callId);
    expect(first?.receivedAt.getTime()).toBeGreaterThanOrEqual(before);
    expect(fake.calls()).toMatchObject([{ id: first?.callId, operation: 'PutEvents', outcome: 'accepted', status: 200, entryCount: 2 }]);
  });

  it('fails chosen entries with per-entry error codes; the SDK resolves and does not retry them', async () => {
    fake.injectFault({ kind: 'failEntries', indexes: [0], errorCode: 'ThrottlingException' });
    fake.injectFault({
      kind: 'failEntries',
      match: (e) => (e.detail as { eventId?: string } | undefined)?.eventId === 'e3',
      errorCode: 'InternalFailure',
    });
    const out = await client().send(
      new PutEventsCommand({
        Entries: [
          entry('e1'),
          entry('e2'),
          entry('e3'),
          // Validation per entry, as EventBridge does it: the others still go through.
          { ...entry('e4'), Detail: '[1,2]' },
          { ...entry('e5'), EventBusName: undefined },
        ],
      }),
    );

    expect(out.$metadata.attempts).toBe(1);
    expect(out.FailedEntryCount).toBe(4);
    expect(out.Entries?.map((e) => e.ErrorCode ?? 'ok')).toEqual(['ThrottlingException', 'ok', 'InternalFailure', 'MalformedDetail', 'InvalidArgument']);
    expect(fake.events().map((e) => (e.detail as { eventId: string }).eventId)).toEqual(['e2']);
    expect(fake.calls()).toMatchObject([{ outcome: 'partial', failedEntryCount: 4 }]);

    // Both scripted faults are spent: the resend of the failed entries goes through.
    const again = await client().send(new PutEventsCommand({ Entries: [entry('e1'), entry('e3')] }));
    expect(again.FailedEntryCount).toBe(0);
  });

  it('answers 500 InternalException for the whole call: the SDK retries maxAttempts (default 3) times', async () => {
    fake.injectFault({ kind: 'callError', times: 10 });
    const error = await client()
      .send(new PutEventsCommand({ Entries: [entry('e1')] }))
      .catch((e: unknown) => e);
    expect(error).toMatchObject({ name: 'InternalException', $fault: 'server', $metadata: { httpStatusCode: 500, attempts: 3 } });
    expect(fake.calls()).toHaveLength(3);
    expect(fake.calls().every((c) => c.outcome === 'error' && c.status === 500)).toBe(true);
    expect(fake.events()).toHaveLength(0);

    // A product test that wants to see the 500 itself (and count calls) sets maxAttempts: 1.
    fake.reset();
    fake.injectFault({ kind: 'callError' });
    const once = await client({ maxAttempts: 1 })
      .send(new PutEventsCommand({ Entries: [entry('e1')] }))
      .catch((e: unknown) => e);
    expect(once).toMatchObject({ name: 'InternalException', $metadata: { attempts: 1 } });
    expect(fake.calls()).toHaveLength(1);
  });

  it('a single 500 is absorbed by the SDK retry: the caller sees success on attempt 2', async () => {
    fake.injectFault({ kind: 'callError' });
    const out = await client().send(new PutEventsCommand({ Entries: [entry('e1')] }));
    expect(out.$metadata.attempts).toBe(2);
    expect(fake.calls().map((c) => c.outcome)).toEqual(['error', 'accepted']);
    expect(fake.events()).toHaveLength(1);
  });

  it('drops the response after accepting: the SDK sees a network error while the events were recorded', async () => {
    fake.injectFault({ kind: 'dropResponse' });
    const error = await client({ maxAttempts: 1 })
      .send(new PutEventsCommand({ Entries: [entry('e1'), entry('e2')] }))
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Error);
    expect((error as { code?: string }).code).toBe('ECONNRESET');
    expect(fake.events().map((e) => (e.detail as { eventId: string }).eventId)).toEqual(['e1', 'e2']);
    expect(fake.calls()).toMatchObject([{ outcome: 'dropped', status: 0, entryCount: 2 }]);
  });

  it('with the default maxAttempts the SDK silently resends after a dropped response: duplicates, same detail eventId', async () => {
    fake.injectFault({ kind: 'dropResponse' });
    const out = await client().send(new PutEventsCommand({ Entries: [entry('e1')] }));
    expect(out.FailedEntryCount).toBe(0);
    expect(out.$metadata.attempts).toBe(2);
    const recorded = fake.events();
    expect(recorded).toHaveLength(2);
    // EventBridge ids differ, the payload's own id does not: consumers must deduplicate on detail.eventId.
    expect(recorded[0]?.eventId).not.toBe(recorded[1]?.eventId);
    expect(recorded.map((e) => (e.detail as { eventId: string }).eventId)).toEqual(['e1', 'e1']);
  });

  it('refuses 11 entries and oversized calls with ValidationException, recording nothing', async () => {
    const eb = client();
    const eleven = Array.from({ length: 11 }, (_, i) => entry(`e${i}`));
    await expect(eb.send(new PutEventsCommand({ Entries: eleven }))).rejects.toMatchObject({
      name: 'ValidationException',
      $fault: 'client',
      $metadata: { httpStatusCode: 400, attempts: 1 },
    });
    await expect(eb.send(new PutEventsCommand({ Entries: [] }))).rejects.toMatchObject({ name: 'ValidationException' });

    // Exactly at the limit passes; one byte more fails. Size as AWS documents it (Detail, Source, DetailType).
    const base = entry('big');
    const sizeWithout = putEventsEntrySize({ ...base, Detail: JSON.stringify({ pad: '' }) });
    const atLimit = { ...base, Detail: JSON.stringify({ pad: 'x'.repeat(MAX_PUT_EVENTS_BYTES - sizeWithout) }) };
    expect(putEventsEntrySize(atLimit)).toBe(MAX_PUT_EVENTS_BYTES);
    await expect(eb.send(new PutEventsCommand({ Entries: [atLimit] }))).resolves.toMatchObject({ FailedEntryCount: 0 });
    const over = { ...atLimit, Detail: JSON.stringify({ pad: 'x'.repeat(MAX_PUT_EVENTS_BYTES - sizeWithout + 1) }) };
    await expect(eb.send(new PutEventsCommand({ Entries: [over] }))).rejects.toMatchObject({
      name: 'ValidationException',
      message: 'Total size of the entries in the request is over the limit.',
    });
    expect(fake.events()).toHaveLength(1);
    expect(fake.calls().map((c) => c.outcome)).toEqual(['rejected', 'rejected', 'accepted', 'rejected']);
  });

  it('computes entry sizes the way AWS documents them (UTF-8 bytes, Time = 14, resources counted)', () => {
    expect(putEventsEntrySize({ Source: 'ab', DetailType: 'é', Detail: '{}' })).toBe(2 + 2 + 2);
    expect(putEventsEntrySize({ Source: 'a', DetailType: 'b', Detail: '{}', Time: 1_700_000_000, Resources: ['arn:x', '日本'] })).toBe(
      14 + 1 + 1 + 2 + 5 + 6,
    );
    // EventBusName is not part of the documented size.
    expect(putEventsEntrySize({ Source: 'a', DetailType: 'b', Detail: '{}', EventBusName: 'x'.repeat(100) })).toBe(4);
  });

  it('answers other operations with UnknownOperationException', async () => {
    await expect(client().send(new ListRulesCommand({}))).rejects.toMatchObject({
      name: 'UnknownOperationException',
      $metadata: { httpStatusCode: 400 },
    });
  });

  it('fault rates are reproducible from a seed', async () => {
    const run = async () => {
      fake.reset();
      fake.setFaultRates({ seed: 42, entryFailure: 0.3, callError: 0.2 });
      const eb = client({ maxAttempts: 1 });
      const trace: string[] = [];
      for (let i = 0; i < 20; i++) {
        const out = await eb
          .send(new PutEventsCommand({ Entries: [entry(`a${i}`), entry(`b${i}`), entry(`c${i}`)] }))
          .catch((e: { name: string }) => e.name);
        trace.push(typeof out === 'string' ? out : (out.Entries ?? []).map((e) => e.ErrorCode ?? 'ok').join(','));
      }
      return trace;
    };
    const first = await run();
    const second = await run();
    expect(second).toEqual(first);
    // The rates really fire (20 calls × 3 entries at these rates).
    expect(first.some((t) => t === 'InternalException')).toBe(true);
    expect(first.some((t) => /InternalFailure|ThrottlingException/.test(t))).toBe(true);
    expect(first.some((t) => t === 'ok,ok,ok')).toBe(true);
  });
});
