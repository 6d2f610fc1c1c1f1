// Stripe events in: the two doors (a signed webhook, an EventBridge partner event) into ONE inbox and
// ONE applier. Knows nothing of middy, Powertools or the environment; the handlers pass dependencies in.
//
//   webhook:     size ─▶ signature (stripe SDK, raw body, default tolerance 300 s) ─▶ JSON ─▶ event shape
//   eventbridge: source is aws.partner/stripe.com/… ─▶ detail is the event (no signature: EventBridge
//                only delivers what Stripe's partner source put on the bus)
//   both:        ONE statement: INSERT … ON CONFLICT (event_id) DO NOTHING, claimed at birth
//                ─▶ apply it now (best effort; whatever is left, the reconciler applies) ─▶ 200
//
// Stripe's documented contract (https://docs.stripe.com/webhooks#verify-events): the Stripe-Signature
// header is `t=<unix seconds>,v1=<hex HMAC-SHA256 of "${t}.${raw body}" keyed with the endpoint's
// whsec_… secret>` (several v1 entries during a secret roll); the SDK's constructEvent checks it and
// rejects timestamps older than its DEFAULT_TOLERANCE (300 s) against replays. Any 2xx acknowledges;
// anything else is retried by Stripe for up to three days, so a 400 is only for what can never succeed
// (a forgery, a stale replay) and a 503 for what will (no secret yet, database down).
import { randomUUID } from 'node:crypto';
import Stripe from 'stripe';
import type { Db } from '../payments/db.ts';
import type { Applied, StripeEventApplier } from '../payments/event-applier.ts';
import { readStripeEvent, type StripeEventView } from '../payments/event-decisions.ts';
import { recordStripeEvent, type EventSource } from '../payments/inbox-store.ts';
import type { OutcomeEventRow } from '../payments/operations-store.ts';
import { publishLeased, type EventPublisher } from '../events/outbox.ts';
import { describeError, silentLog, type LogSink } from '../runtime/observability.ts';

/** Why a delivery was refused (logged and counted; never the body, never the secret). */
export const RejectCode = {
  tooLarge: 'body_too_large',
  missingSignature: 'missing_signature',
  malformedSignature: 'malformed_signature',
  signatureMismatch: 'signature_mismatch',
  staleTimestamp: 'stale_timestamp',
  invalidJson: 'invalid_json',
  notAnEvent: 'not_an_event',
  wrongSource: 'wrong_source',
  wrongMethod: 'wrong_method',
} as const;
export type RejectCode = (typeof RejectCode)[keyof typeof RejectCode];

/** What came of one delivery. */
export type Reception =
  | { readonly kind: 'recorded'; readonly eventId: string; readonly eventType: string; readonly duplicate: boolean; readonly applied: Applied | null }
  | { readonly kind: 'rejected'; readonly code: RejectCode; readonly detail: string }
  | { readonly kind: 'unavailable'; readonly detail: string };

export interface ReceiveDeps {
  readonly db: Db;
  /** Null: record only; the reconciler applies. */
  readonly applier: StripeEventApplier | null;
  readonly publisher: EventPublisher | null;
  readonly log?: LogSink;
}

/** Record a verified event (one statement) and apply it at once if it is new. Throws only if the insert fails. */
export async function recordAndApply(event: StripeEventView, source: EventSource, deps: ReceiveDeps): Promise<Reception> {
  const log = deps.log ?? silentLog;
  const lease = deps.applier ? { token: randomUUID(), ms: deps.applier.leaseMs } : null;
  const recorded = await recordStripeEvent(deps.db, event, source, lease);
  let applied: Applied | null = null;
  if (recorded.claimed && deps.applier) {
    // Best effort: the event is durable; an apply that fails or waits leaves it for the sweep.
    applied = await deps.applier.applySafely(recorded.claimed);
    await publish(deps, applied.events, log);
  }
  return { kind: 'recorded', eventId: event.id, eventType: event.type, duplicate: !recorded.inserted, applied };
}

async function publish(deps: ReceiveDeps, events: readonly OutcomeEventRow[], log: LogSink): Promise<void> {
  if (!deps.publisher || events.length === 0) return;
  try {
    await publishLeased(deps.db, deps.publisher, events);
  } catch (error) {
    log.warn('outcome events of an applied Stripe event not published; the relay sends them', describeError(error));
  }
}

// ── The webhook door ─────────────────────────────────────────────────────────────────────────────

export interface WebhookRequest {
  readonly method?: string | undefined;
  readonly body?: string | null | undefined;
  readonly isBase64Encoded?: boolean | undefined;
  /** Lower-case names, as a Function URL delivers them. */
  readonly headers?: Readonly<Record<string, string | undefined>> | undefined;
}

export interface WebhookSettings {
  /** The endpoint's signing secret (whsec_…). Null: not configured yet → 503, Stripe retries. */
  readonly secret: string | null;
  /** During a roll, the one it replaces: a delivery signed with either is accepted. */
  readonly previousSecret?: string | null;
  readonly maxBodyBytes: number;
  /** Seconds; undefined = the SDK's default (300). Tests only. */
  readonly toleranceSeconds?: number;
}

function classifySignatureError(error: unknown): RejectCode {
  const message = error instanceof Error ? error.message : '';
  if (message.startsWith('No stripe-signature header')) return RejectCode.missingSignature;
  if (message.startsWith('Unable to extract timestamp') || message.startsWith('No signatures found with expected scheme')) return RejectCode.malformedSignature;
  if (message.startsWith('Timestamp outside the tolerance zone')) return RejectCode.staleTimestamp;
  return RejectCode.signatureMismatch;
}

/**
 * The stripe SDK's check (raw bytes, never a re-serialised object: the signature is over exactly what
 * was sent) against each secret in turn; the first that verifies wins. Refused with the first
 * secret's reason (a stale timestamp is stale whatever the secret).
 */
async function verifySignature(
  body: Buffer,
  header: string,
  secrets: readonly string[],
  toleranceSeconds: number | undefined,
): Promise<{ readonly ok: true; readonly json: unknown } | { readonly ok: false; readonly rejection: Reception }> {
  let first: Reception | null = null;
  for (const secret of secrets) {
    try {
      return { ok: true, json: await Stripe.webhooks.constructEventAsync(body, header, secret, toleranceSeconds) };
    } catch (error) {
      if (error instanceof SyntaxError) return { ok: false, rejection: { kind: 'rejected', code: RejectCode.invalidJson, detail: 'signed body is not JSON' } };
      const code = classifySignatureError(error);
      first ??= { kind: 'rejected', code, detail: code };
    }
  }
  return { ok: false, rejection: first! };
}

export async function receiveWebhook(request: WebhookRequest, settings: WebhookSettings, deps: ReceiveDeps | (() => Promise<ReceiveDeps>)): Promise<Reception> {
  if (request.method !== undefined && request.method.toUpperCase() !== 'POST') return { kind: 'rejected', code: RejectCode.wrongMethod, detail: request.method };
  const raw = request.body ?? '';
  const body = request.isBase64Encoded ? Buffer.from(raw, 'base64') : Buffer.from(raw, 'utf8');
  if (body.byteLength > settings.maxBodyBytes) return { kind: 'rejected', code: RejectCode.tooLarge, detail: `${body.byteLength} bytes > ${settings.maxBodyBytes}` };
  if (settings.secret === null) return { kind: 'unavailable', detail: 'the webhook signing secret is not configured' };
  const header = request.headers?.['stripe-signature'];
  if (header === undefined || header === '') return { kind: 'rejected', code: RejectCode.missingSignature, detail: 'no Stripe-Signature header' };

  const secrets = settings.previousSecret ? [settings.secret, settings.previousSecret] : [settings.secret];
  const verified = await verifySignature(body, header, secrets, settings.toleranceSeconds);
  if (!verified.ok) return verified.rejection;
  const json = verified.json;
  const read = readStripeEvent(json);
  if (!read.ok) return { kind: 'rejected', code: RejectCode.notAnEvent, detail: read.reason };
  try {
    return await recordAndApply(read.event, 'webhook', typeof deps === 'function' ? await deps() : deps);
  } catch (error) {
    // Nothing recorded: Stripe retries on a non-2xx (for up to three days).
    const d = describeError(error);
    return { kind: 'unavailable', detail: `${d.errorName}: ${d.errorMessage}` };
  }
}

export interface HttpAnswer {
  readonly statusCode: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/** The Function URL answer. Short, no echo of the input. */
export function toHttpAnswer(reception: Reception): HttpAnswer {
  const json = (statusCode: number, body: unknown): HttpAnswer => ({ statusCode, headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  switch (reception.kind) {
    case 'recorded':
      return json(200, { received: true, duplicate: reception.duplicate });
    case 'rejected':
      return json(reception.code === RejectCode.wrongMethod ? 405 : reception.code === RejectCode.tooLarge ? 413 : 400, { error: reception.code });
    case 'unavailable':
      return json(503, { error: 'unavailable' });
  }
}

// ── The EventBridge door ─────────────────────────────────────────────────────────────────────────

/**
 * An event from Stripe's Amazon EventBridge event destination (https://docs.stripe.com/event-destinations/eventbridge):
 * `source` is the partner event source, `aws.partner/stripe.com/<destination id>`; `detail-type` is
 * the Stripe event type; `detail` is the Stripe event object itself (id, type, created, data.object).
 */
export interface PartnerEvent {
  readonly source?: unknown;
  readonly 'detail-type'?: unknown;
  readonly detail?: unknown;
}

export const STRIPE_PARTNER_SOURCE_PREFIX = 'aws.partner/stripe.com/';

export async function receivePartnerEvent(input: PartnerEvent, expectedSource: string | null, deps: ReceiveDeps): Promise<Reception> {
  const source = typeof input.source === 'string' ? input.source : '';
  if (!source.startsWith(STRIPE_PARTNER_SOURCE_PREFIX) || (expectedSource !== null && source !== expectedSource)) {
    return { kind: 'rejected', code: RejectCode.wrongSource, detail: `source ${source.slice(0, 200) || '(none)'} is not ${expectedSource ?? `${STRIPE_PARTNER_SOURCE_PREFIX}…`}` };
  }
  const read = readStripeEvent(input.detail);
  if (!read.ok) return { kind: 'rejected', code: RejectCode.notAnEvent, detail: read.reason };
  // Thrown on purpose when the insert fails: Lambda's async retries, then its on-failure destination, keep the event.
  return recordAndApply(read.event, 'eventbridge', deps);
}
