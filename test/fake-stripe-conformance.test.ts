// Conformance of the fake Stripe to Stripe's PUBLISHED schemas (test/fixtures/stripe-openapi/, copied
// from the stripe/openapi repository; see its README). Every body the fake answers that the product or
// stripe-node reads — PaymentIntent create / retrieve / search / list, Refund create / retrieve / list,
// the errors of 400 / 401 / 402 / 403 / 404 / 409 / 429 / 500 — and every webhook event it signs is
// validated against the schema of its operation. Objects are closed (additionalProperties: false), so a
// field the fake invents fails; enums are the spec's, so an invented status or error type fails;
// schemas the subset did not transcribe are `false`, so the fake cannot pass by expanding into them.
// The headers stripe-node reads are checked against what Stripe documents for them.
import { readFileSync } from 'node:fs';
import Ajv, { type ValidateFunction } from 'ajv';
import { describe, expect, test } from 'vitest';
import { startFakeStripe, type FakeStripe } from '../local/fake-stripe/server.ts';
import { WebhookDispatcher, type StripeEventJson } from '../local/fake-stripe/webhooks.ts';

const FIXTURES = new URL('./fixtures/stripe-openapi/', import.meta.url);
const load = (file: string): Record<string, unknown> => JSON.parse(readFileSync(new URL(file, FIXTURES), 'utf8')) as Record<string, unknown>;

type Schema = Record<string, unknown> | boolean;
interface Doc {
  readonly _stubs?: readonly string[];
  readonly paths: Record<string, Record<string, { responses: Record<string, { content: { 'application/json': { schema: Schema } } }> }>>;
  readonly components: { readonly schemas: Record<string, Schema> };
}

/**
 * OpenAPI 3.0 → JSON Schema as ajv reads it: `nullable: true` becomes "or null"; every object with
 * `properties` and no `additionalProperties` becomes closed; `$ref`s point into one flat registry.
 */
export function toJsonSchema(node: unknown): unknown {
  if (Array.isArray(node)) return node.map(toJsonSchema);
  if (typeof node !== 'object' || node === null) return node;
  const out: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(node)) {
    if (key.startsWith('x-') || key === 'description' || key === 'title' || key === 'format' || key === 'nullable') continue;
    out[key] = key === 'properties' ? Object.fromEntries(Object.entries(value as object).map(([k, v]) => [k, toJsonSchema(v)])) : toJsonSchema(value);
  }
  if (typeof out.$ref === 'string') out.$ref = `#/definitions/${(out.$ref as string).split('/').pop()}`;
  if (out.properties !== undefined && out.additionalProperties === undefined) out.additionalProperties = false;
  if ((node as { nullable?: unknown }).nullable === true) return { anyOf: [{ type: 'null' }, out] };
  return out;
}

const dahlia = load('subset-2026-07-29.dahlia.json') as unknown as Doc;
const refunds = load('refund-endive-2026-09-30.json') as unknown as Doc;
const paymentMethods = load('payment-method-endive-2026-09-30.json') as unknown as Doc;
const charges = load('charge-endive-2026-09-30.json') as unknown as Doc;
const actions = load('payment-intent-capture-cancel-2026-07-29.dahlia.json') as unknown as Doc;
const events = load('event-endive-2026-09-30.json') as Record<string, unknown> & { dispute_required_2026_09_30: string[]; dispute_status_enum_2026_09_30: string[] };

const definitions: Record<string, unknown> = {};
for (const doc of [dahlia, refunds, paymentMethods, charges, actions]) for (const stub of doc._stubs ?? []) definitions[stub] = false;
for (const doc of [dahlia, refunds, paymentMethods, charges, actions]) for (const [name, schema] of Object.entries(doc.components.schemas)) definitions[name] = toJsonSchema(schema);
for (const name of ['event', 'notification_event_data', 'notification_event_request']) definitions[name] = toJsonSchema(events[name]);

const ajv = new Ajv({ strict: false, allErrors: true });
const compiled = new Map<string, ValidateFunction>();
function validatorFor(schema: unknown): ValidateFunction {
  const key = JSON.stringify(schema);
  let v = compiled.get(key);
  if (!v) {
    v = ajv.compile({ definitions, ...(schema as object) });
    compiled.set(key, v);
  }
  return v;
}

/** The schema the spec gives an operation's answer: its status's response, or `default` (the error). */
function responseSchema(doc: Doc, path: string, method: string, status: number): unknown {
  const responses = doc.paths[path]?.[method]?.responses;
  if (!responses) throw new Error(`no ${method} ${path} in the vendored spec`);
  const response = responses[String(status)] ?? responses.default;
  return toJsonSchema(response?.content['application/json'].schema);
}

function problems(schema: unknown, body: unknown): string[] {
  const validate = validatorFor(schema);
  return validate(body) ? [] : (validate.errors ?? []).map((e) => `${e.instancePath || '/'} ${e.message ?? ''} ${JSON.stringify(e.params)}`);
}

// ------------------------------------------------------------------------------------------ calls

interface Answer {
  readonly status: number;
  readonly headers: Headers;
  readonly body: unknown;
}

const KEY = 'sk_test_conformance';

async function call(fake: FakeStripe, method: 'GET' | 'POST', path: string, params: Record<string, string> = {}, headers: Record<string, string> = {}): Promise<Answer> {
  const form = new URLSearchParams(params).toString();
  const url = method === 'GET' && form ? `${fake.url}${path}?${form}` : `${fake.url}${path}`;
  const res = await fetch(url, {
    method,
    headers: { Authorization: `Bearer ${KEY}`, 'Stripe-Version': '2026-10-28.endive', ...(method === 'POST' ? { 'Content-Type': 'application/x-www-form-urlencoded' } : {}), ...headers },
    ...(method === 'POST' ? { body: form } : {}),
  });
  return { status: res.status, headers: res.headers, body: await res.json() };
}

let n = 0;
const create = (overrides: Record<string, string> = {}): Record<string, string> => {
  n += 1;
  return {
    amount: '1299',
    currency: 'eur',
    customer: 'cus_conf',
    payment_method: 'pm_card_visa',
    confirm: 'true',
    off_session: 'true',
    'metadata[operation_id]': `op-conf-${n}`,
    'metadata[order_id]': `order-conf-${n}`,
    'metadata[key_generation]': '0',
    ...overrides,
  };
};

/** Headers stripe-node reads: Request-Id (lastResponse.requestId), Idempotency-Key, Idempotent-Replayed, Stripe-Should-Retry. */
function headerProblems(answer: Answer, sent: { idempotencyKey?: string; method: string }): string[] {
  const out: string[] = [];
  if (!/^application\/json/.test(answer.headers.get('content-type') ?? '')) out.push('Content-Type is not application/json');
  if (!/^req_[A-Za-z0-9]+$/.test(answer.headers.get('request-id') ?? '')) out.push(`Request-Id ${answer.headers.get('request-id')}`);
  if (sent.method === 'POST' && sent.idempotencyKey !== undefined && answer.headers.get('idempotency-key') !== sent.idempotencyKey) out.push('Idempotency-Key not echoed');
  const replayed = answer.headers.get('idempotent-replayed');
  if (replayed !== null && replayed !== 'true') out.push(`Idempotent-Replayed ${replayed}`);
  const retry = answer.headers.get('stripe-should-retry');
  if (retry !== null && retry !== 'true' && retry !== 'false') out.push(`Stripe-Should-Retry ${retry}`);
  // docs: Stripe's 500s say false (stripe-node RequestSender); a lock-timeout 429 says true.
  if (answer.status === 500 && retry !== 'false') out.push('a 500 without Stripe-Should-Retry: false');
  if (answer.status === 429 && (answer.body as { error?: { code?: string } }).error?.code === 'lock_timeout' && retry !== 'true') out.push('a lock timeout without Stripe-Should-Retry: true');
  return out;
}

interface Case {
  readonly name: string;
  readonly doc: Doc;
  readonly path: string;
  readonly method: 'get' | 'post';
  readonly answer: Answer;
  readonly expectStatus: number;
  readonly idempotencyKey?: string;
}

/** Every answer of every modelled operation, made once against one fake. */
async function exercise(fake: FakeStripe): Promise<Case[]> {
  const cases: Case[] = [];
  const pi = async (name: string, params: Record<string, string>, expectStatus: number, key = `k-${name}`, headers: Record<string, string> = {}) => {
    const answer = await call(fake, 'POST', '/v1/payment_intents', params, key ? { 'Idempotency-Key': key, ...headers } : headers);
    cases.push({ name, doc: dahlia, path: '/v1/payment_intents', method: 'post', answer, expectStatus, idempotencyKey: key });
    return answer;
  };
  const ok = await pi('create succeeded', create(), 200, 'k-ok');
  const okParams = create();
  await pi('create succeeded (2)', okParams, 200, 'k-ok2');
  await pi('create replayed', okParams, 200, 'k-ok2');
  await pi('create processing (SEPA debit)', create({ payment_method: 'pm_fake_sepa_debit' }), 200);
  await pi('create processing (US bank account)', create({ payment_method: 'pm_fake_us_bank_account' }), 200);
  const { off_session: _o, ...onSession } = create({ payment_method: 'pm_card_authenticationRequired' });
  await pi('create requires_action (on session)', onSession, 200);
  await pi('create with allowed types', create({ 'allowed_payment_method_types[0]': 'card' }), 200);
  await pi('402 declined', create({ payment_method: 'pm_card_chargeDeclined' }), 402);
  await pi('402 authentication_required (off session)', create({ payment_method: 'pm_card_authenticationRequired' }), 402);
  await pi('400 parameter_missing', { currency: 'eur' }, 400);
  await pi('400 payment_method_types', create({ 'payment_method_types[0]': 'card' }), 400);
  await pi('400 metadata too long', create({ 'metadata[long]': 'v'.repeat(501) }), 400);
  await pi('400 idempotency mismatch', create(), 400, 'k-ok');
  fake.injectFault({ idempotencyKey: 'k-500' }, 'error_500_after_commit');
  const fiveHundred = create();
  await pi('500 after commit', fiveHundred, 500, 'k-500');
  await pi('500 replayed', fiveHundred, 500, 'k-500');
  fake.injectFault({ idempotencyKey: 'k-429' }, 'rate_limited_429');
  await pi('429 rate limit', create(), 429, 'k-429');
  fake.injectFault({ idempotencyKey: 'k-lock' }, 'lock_timeout_429');
  await pi('429 lock timeout', create(), 429, 'k-lock');
  fake.injectFault({ idempotencyKey: 'k-401' }, 'unauthorized_401');
  await pi('401 fault', create(), 401, 'k-401');
  await pi('401 wrong key', create(), 401, 'k-401b', { Authorization: 'Bearer sk_live_wrong' });
  await pi('401 no key', create(), 401, 'k-401c', { Authorization: '' });
  fake.injectFault({ idempotencyKey: 'k-403' }, 'permission_403');
  await pi('403 fault', create(), 403, 'k-403');
  const held = fake.hold({ idempotencyKey: 'k-409' });
  const heldParams = create();
  const first = pi('create held', heldParams, 200, 'k-409');
  await held.arrived;
  await pi('409 key in use', heldParams, 409, 'k-409');
  held.release();
  await first;

  const piId = (ok.body as { id: string }).id;
  const read = async (name: string, path: string, specPath: string, doc: Doc, params: Record<string, string>, expectStatus: number) => {
    cases.push({ name, doc, path: specPath, method: 'get', answer: await call(fake, 'GET', path, params), expectStatus });
  };
  await read('retrieve', `/v1/payment_intents/${piId}`, '/v1/payment_intents/{intent}', dahlia, {}, 200);
  // What the product's retrieve asks for: the PaymentMethod expanded (its type sets the unsettled bound).
  await read('retrieve, payment_method expanded (card)', `/v1/payment_intents/${piId}`, '/v1/payment_intents/{intent}', dahlia, { 'expand[0]': 'payment_method' }, 200);
  const sepa = (cases.find((c) => c.name === 'create processing (SEPA debit)')!.answer.body as { id: string }).id;
  await read('retrieve, payment_method expanded (SEPA debit)', `/v1/payment_intents/${sepa}`, '/v1/payment_intents/{intent}', dahlia, { 'expand[0]': 'payment_method' }, 200);
  await read('retrieve 400 unknown expansion', `/v1/payment_intents/${piId}`, '/v1/payment_intents/{intent}', dahlia, { 'expand[0]': 'customer' }, 400);
  await read('404 retrieve', '/v1/payment_intents/pi_missing', '/v1/payment_intents/{intent}', dahlia, {}, 404);
  await read('404 unknown route', '/v1/charges', '/v1/payment_intents/{intent}', dahlia, {}, 404);
  await read('search', '/v1/payment_intents/search', '/v1/payment_intents/search', dahlia, { query: "metadata['key_generation']:'0'", limit: '2' }, 200);
  await read('search 400', '/v1/payment_intents/search', '/v1/payment_intents/search', dahlia, { query: 'amount>1' }, 400);
  await read('list', '/v1/payment_intents', '/v1/payment_intents', dahlia, { customer: 'cus_conf', limit: '3' }, 200);

  const refund = async (name: string, params: Record<string, string>, expectStatus: number, key = `k-${name}`) => {
    const answer = await call(fake, 'POST', '/v1/refunds', params, { 'Idempotency-Key': key });
    cases.push({ name, doc: refunds, path: '/v1/refunds', method: 'post', answer, expectStatus, idempotencyKey: key });
    return answer;
  };
  const re = await refund('refund create', { payment_intent: piId, amount: '100', 'metadata[operation_id]': 'op-re' }, 200);
  fake.injectFault({ endpoint: 'refund_create' }, 'processing');
  const pending = await refund('refund create pending', { payment_intent: piId, amount: '100' }, 200);
  await refund('refund 400 too much', { payment_intent: piId, amount: '999999' }, 400);
  const reId = (re.body as { id: string }).id;
  fake.settleRefund((pending.body as { id: string }).id, 'failed');
  for (const [name, id] of [['refund retrieve', reId], ['refund retrieve failed', (pending.body as { id: string }).id]] as const) {
    cases.push({ name, doc: refunds, path: '/v1/refunds/{refund}', method: 'get', answer: await call(fake, 'GET', `/v1/refunds/${id}`), expectStatus: 200 });
  }
  cases.push({ name: 'refund 404', doc: refunds, path: '/v1/refunds/{refund}', method: 'get', answer: await call(fake, 'GET', '/v1/refunds/re_missing'), expectStatus: 404 });
  cases.push({ name: 'refund list', doc: refunds, path: '/v1/refunds', method: 'get', answer: await call(fake, 'GET', '/v1/refunds', { payment_intent: piId }), expectStatus: 200 });

  // Manual capture: authorize, capture (whole, partial), cancel, and the refusals.
  const action = async (name: string, verb: 'capture' | 'cancel', id: string, params: Record<string, string>, expectStatus: number, headers: Record<string, string> = {}) => {
    const key = `k-${name}`;
    const answer = await call(fake, 'POST', `/v1/payment_intents/${id}/${verb}`, params, { 'Idempotency-Key': key, ...headers });
    cases.push({ name, doc: actions, path: `/v1/payment_intents/{intent}/${verb}`, method: 'post', answer, expectStatus, idempotencyKey: key });
    return answer;
  };
  const authorized = async (name: string, headers: Record<string, string> = {}) =>
    (await pi(name, create({ capture_method: 'manual' }), 200, `k-${name}`, headers)).body as { id: string };
  const whole = await authorized('create requires_capture');
  await action('capture', 'capture', whole.id, {}, 200);
  await action('capture 400 already captured', 'capture', whole.id, {}, 400);
  const part = await authorized('create requires_capture (partial)');
  await action('capture 400 more than authorized', 'capture', part.id, { amount_to_capture: '999999' }, 400);
  await action('capture partial', 'capture', part.id, { amount_to_capture: '500' }, 200);
  const toCancel = await authorized('create requires_capture (cancel)');
  await action('cancel', 'cancel', toCancel.id, { cancellation_reason: 'requested_by_customer' }, 200);
  await action('cancel 400 already canceled', 'cancel', toCancel.id, {}, 400);
  await action('capture 404', 'capture', 'pi_missing', {}, 404);

  // Connect: a direct charge on a connected account, a destination charge, the refusals.
  const onAccount = { 'Stripe-Account': 'acct_conformance' };
  const direct = await pi('create on a connected account (direct, with a fee)', create({ application_fee_amount: '100' }), 200, 'k-direct', onAccount);
  await read('404 retrieve of another account\'s PaymentIntent', `/v1/payment_intents/${(direct.body as { id: string }).id}`, '/v1/payment_intents/{intent}', dahlia, {}, 404);
  await pi('create destination charge', create({ 'transfer_data[destination]': 'acct_conformance', application_fee_amount: '100' }), 200);
  await pi('400 application_fee_amount without a connected account', create({ application_fee_amount: '100' }), 400);
  await pi('400 no such destination', create({ 'transfer_data[destination]': 'acct_nobody' }), 400);
  await pi('403 account_invalid', create(), 403, 'k-account-invalid', { 'Stripe-Account': 'acct_nobody' });
  await authorized('create requires_capture on a connected account', onAccount);
  return cases;
}

// ------------------------------------------------------------------------------------------ events

/** data.object of an event, by its type: the schema of the object it carries. */
function objectProblems(event: StripeEventJson): string[] {
  const object = event.data.object;
  if (event.type.startsWith('payment_intent.')) return problems({ $ref: '#/definitions/payment_intent' }, object);
  if (event.type.startsWith('refund.') || event.type === 'charge.refund.updated') return problems({ $ref: '#/definitions/refund' }, object);
  if (event.type.startsWith('charge.dispute.')) {
    const missing = events.dispute_required_2026_09_30.filter((k) => !(k in object));
    const status = events.dispute_status_enum_2026_09_30.includes(String(object.status)) ? [] : [`dispute status ${String(object.status)}`];
    return [...missing.map((k) => `dispute without ${k}`), ...status];
  }
  if (event.type === 'charge.refunded' || event.type === 'charge.captured' || event.type === 'charge.expired') return problems({ $ref: '#/definitions/charge' }, object);
  return [`an event type the fake should not sign: ${event.type}`];
}

describe('the fake Stripe against Stripe\'s published OpenAPI schemas', () => {
  test('every answer of every modelled operation matches its schema, with the headers stripe-node reads', async () => {
    const fake = await startFakeStripe({ apiKeys: [KEY], connectedAccounts: ['acct_conformance'] });
    try {
      const cases = await exercise(fake);
      const failures: string[] = [];
      for (const c of cases) {
        if (c.answer.status !== c.expectStatus) failures.push(`${c.name}: HTTP ${c.answer.status}, expected ${c.expectStatus}`);
        for (const p of problems(responseSchema(c.doc, c.path, c.method, c.answer.status), c.answer.body)) failures.push(`${c.name}: ${p}`);
        for (const p of headerProblems(c.answer, { method: c.method.toUpperCase(), ...(c.idempotencyKey ? { idempotencyKey: c.idempotencyKey } : {}) })) failures.push(`${c.name}: ${p}`);
      }
      expect(failures).toEqual([]);
      // Every status of the brief is exercised.
      expect(new Set(cases.map((c) => c.answer.status))).toEqual(new Set([200, 400, 401, 402, 403, 404, 409, 429, 500]));
    } finally {
      await fake.close();
    }
  });

  test('every webhook event the fake signs matches the event schema; an event an API request caused names it', async () => {
    let clock = Date.now();
    const fake = await startFakeStripe({ apiKeys: [KEY], connectedAccounts: ['acct_events'], now: () => clock });
    const dispatcher = new WebhookDispatcher({ fake, endpoint: null, secret: 'whsec_conformance', chargeRefundUpdated: true });
    try {
      const ok = await call(fake, 'POST', '/v1/payment_intents', create(), { 'Idempotency-Key': 'k-ev-ok' });
      const slow = await call(fake, 'POST', '/v1/payment_intents', create({ payment_method: 'pm_fake_sepa_debit' }), { 'Idempotency-Key': 'k-ev-slow' });
      await call(fake, 'POST', '/v1/payment_intents', create({ payment_method: 'pm_card_chargeDeclined' }), { 'Idempotency-Key': 'k-ev-declined' });
      await call(fake, 'POST', '/v1/payment_intents', create({ payment_method: 'pm_card_authenticationRequired' }), { 'Idempotency-Key': 'k-ev-auth' });
      dispatcher.poll();
      fake.settle((slow.body as { id: string }).id, 'succeeded');
      const piId = (ok.body as { id: string }).id;
      fake.injectFault({ endpoint: 'refund_create' }, 'processing');
      const re = await call(fake, 'POST', '/v1/refunds', { payment_intent: piId, amount: '100' }, { 'Idempotency-Key': 'k-ev-re' });
      dispatcher.poll();
      fake.settleRefund((re.body as { id: string }).id, 'failed');
      dispatcher.poll();
      dispatcher.refund(piId, 50);
      dispatcher.dispute(piId, 'created');
      dispatcher.dispute(piId, 'closed', 'won');
      // Manual capture: authorized, then captured; authorized, then canceled; authorized on a
      // connected account, then expired on the fake's clock.
      const manual = async (key: string, headers: Record<string, string> = {}) =>
        ((await call(fake, 'POST', '/v1/payment_intents', create({ capture_method: 'manual' }), { 'Idempotency-Key': key, ...headers })).body as { id: string }).id;
      const toCapture = await manual('k-ev-capture');
      const toCancel = await manual('k-ev-cancel');
      const toExpire = await manual('k-ev-expire', { 'Stripe-Account': 'acct_events' });
      dispatcher.poll();
      await call(fake, 'POST', `/v1/payment_intents/${toCapture}/capture`, { amount_to_capture: '1000' }, { 'Idempotency-Key': 'k-ev-capture-1' });
      await call(fake, 'POST', `/v1/payment_intents/${toCancel}/cancel`, {}, { 'Idempotency-Key': 'k-ev-cancel-1' });
      clock += 8 * 24 * 3_600_000;
      dispatcher.poll();

      const signed = dispatcher.events();
      const failures: string[] = [];
      for (const event of signed) {
        for (const p of problems({ $ref: '#/definitions/event' }, event)) failures.push(`${event.type} envelope: ${p}`);
        for (const p of objectProblems(event)) failures.push(`${event.type} data.object: ${p}`);
      }
      expect(failures).toEqual([]);
      expect(new Set(signed.map((e) => e.type))).toEqual(
        new Set([
          'payment_intent.succeeded', 'payment_intent.processing', 'payment_intent.payment_failed', 'refund.created', 'charge.refunded', 'refund.updated', 'charge.refund.updated', 'refund.failed', 'charge.dispute.created', 'charge.dispute.closed',
          'payment_intent.amount_capturable_updated', 'charge.captured', 'payment_intent.canceled', 'charge.expired',
        ]),
      );
      // A connected account's object: its events carry `account`; the platform's carry none.
      const ofExpired = signed.filter((e) => e.data.object.id === toExpire || e.data.object.payment_intent === toExpire);
      expect(ofExpired.map((e) => [e.type, e.account])).toEqual([
        ['payment_intent.amount_capturable_updated', 'acct_events'],
        ['payment_intent.canceled', 'acct_events'],
        ['charge.expired', 'acct_events'],
      ]);
      expect(signed.filter((e) => e.data.object.id === toCapture).every((e) => e.account === undefined)).toBe(true);

      // `request`: the create's Request-Id and our key on the events the create caused; null on what Stripe did later.
      const created = signed.find((e) => e.type === 'payment_intent.succeeded' && e.data.object.id === piId);
      expect(created?.request).toEqual({ id: ok.headers.get('request-id'), idempotency_key: 'k-ev-ok' });
      const settled = signed.find((e) => e.type === 'payment_intent.succeeded' && e.data.object.id === (slow.body as { id: string }).id);
      expect(settled?.request).toEqual({ id: null, idempotency_key: null });
      expect(signed.find((e) => e.type === 'refund.created' && e.data.object.id === (re.body as { id: string }).id)?.request).toEqual({ id: re.headers.get('request-id'), idempotency_key: 'k-ev-re' });
      expect(signed.find((e) => e.type === 'refund.failed')?.request).toEqual({ id: null, idempotency_key: null });
    } finally {
      await dispatcher.stop();
      await fake.close();
    }
  });

  test('the validator is strict: an invented field, an invented status, a null where the spec has none, an unknown error type all fail', () => {
    const pi = { id: 'pi_1', object: 'payment_intent', created: 1, livemode: false, status: 'succeeded', amount: 1, currency: 'eur', metadata: {} };
    expect(problems({ $ref: '#/definitions/payment_intent' }, pi)).toEqual([]);
    expect(problems({ $ref: '#/definitions/payment_intent' }, { ...pi, invented: 1 })).not.toEqual([]);
    expect(problems({ $ref: '#/definitions/payment_intent' }, { ...pi, status: 'settled' })).not.toEqual([]);
    expect(problems({ $ref: '#/definitions/payment_intent' }, { ...pi, customer: { id: 'cus_1' } })).not.toEqual([]);
    const refund = { id: 're_1', object: 'refund', amount: 1, created: 1, currency: 'eur' };
    expect(problems({ $ref: '#/definitions/refund' }, refund)).toEqual([]);
    expect(problems({ $ref: '#/definitions/refund' }, { ...refund, failure_reason: null })).not.toEqual([]);
    expect(problems({ $ref: '#/definitions/error' }, { error: { type: 'authentication_error', message: 'x' } })).not.toEqual([]);
  });
});

describe('the API version users are told to register', () => {
  test('docs/deploy.md names the webhook endpoint api_version stripe-node pins', () => {
    // The version stripe-node pins, from its own source (what its requests send as Stripe-Version).
    const source = readFileSync(new URL('../node_modules/stripe/cjs/apiVersion.js', import.meta.url), 'utf8');
    const ApiVersion = /ApiVersion = '([^']+)'/.exec(source)?.[1];
    expect(ApiVersion).toMatch(/^\d{4}-\d{2}-\d{2}\.[a-z]+$/);
    const deploy = readFileSync(new URL('../docs/deploy.md', import.meta.url), 'utf8');
    const named = new Set([...deploy.matchAll(/api_version[^\n]*?(\d{4}-\d{2}-\d{2}\.[a-z]+)|API version `(\d{4}-\d{2}-\d{2}\.[a-z]+)`/g)].map((m) => m[1] ?? m[2]));
    expect(named).toEqual(new Set([ApiVersion]));
  });
});
