// Stripe events in, on one machine: the fake Stripe's signed deliveries (local/fake-stripe/
// webhooks.ts) POSTed to a local endpoint that turns each request into the Function URL event
// Lambda would build and calls the UNCHANGED stripe-events handler; and what the ledger reports of
// it (events made, delivered, duplicated, lost and retried, forged and refused; inbox rows by
// outcome; how each operation reached its final state).
import { randomBytes } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import type { APIGatewayProxyEventV2, APIGatewayProxyStructuredResultV2 } from 'aws-lambda';
import type pg from 'pg';
import type { FakeStripe } from './fake-stripe/types.ts';
import { WebhookDispatcher, type DeliveryFaults, type DeliveryStats, type EventOrigin } from './fake-stripe/webhooks.ts';

export interface LocalWebhookOptions {
  readonly faults?: DeliveryFaults;
  readonly seed?: number;
  /** Stripe's retry schedule × this (default 1/60: the first retry after a second). */
  readonly retryScale?: number;
  /** The endpoint's origin: a Connect endpoint's connected account, the other mode (default: this account, test mode). */
  readonly origin?: EventOrigin;
  /** false: the dispatcher does not watch the ledger; only what a caller sends (dispatcher.send / emit) is delivered. Default true. */
  readonly watch?: boolean;
}

/** Delivery faults of `npm start` with faults on: every kind Stripe documents, a few of each. */
export const DEFAULT_DELIVERY_FAULTS: DeliveryFaults = { duplicate: 0.15, lost: 0.1, delayed: 0.3, maxDelayMs: 400, badSignature: 0.05 };

export function localWebhookSecret(): string {
  return `whsec_local_${randomBytes(16).toString('hex')}`;
}

type FunctionUrlHandler = (event: APIGatewayProxyEventV2, context: unknown) => Promise<APIGatewayProxyStructuredResultV2>;

/** A local Function URL in front of the real stripe-events handler. */
export interface WebhookEndpoint {
  readonly url: string;
  /** Answers of the endpoint by HTTP status. */
  answers(): Readonly<Record<string, number>>;
  stop(): Promise<void>;
}

/** The endpoint and the fake Stripe's dispatcher that delivers to it. */
export interface LocalWebhooks extends WebhookEndpoint {
  readonly dispatcher: WebhookDispatcher;
}

/**
 * A Function URL in front of the real handler on 127.0.0.1:`port` (0: any free one): the request
 * becomes an APIGatewayProxyEventV2 (payload 2.0). Real Stripe's events reach it through the Stripe
 * CLI (`stripe listen --forward-to <url>`), the fake's through startLocalWebhooks.
 */
export async function startWebhookEndpoint(port = 0): Promise<WebhookEndpoint> {
  const file = path.resolve(import.meta.dirname, '..', 'lambdas', 'stripe-events', 'handler.ts');
  const handler = ((await import(file)) as { handler: FunctionUrlHandler }).handler;
  const answers: Record<string, number> = {};
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      const headers: Record<string, string> = {};
      for (const [k, v] of Object.entries(req.headers)) if (typeof v === 'string') headers[k.toLowerCase()] = v;
      const textual = /json|text/.test(headers['content-type'] ?? '');
      const event = {
        version: '2.0',
        routeKey: '$default',
        rawPath: req.url ?? '/',
        rawQueryString: '',
        headers,
        requestContext: { http: { method: req.method ?? 'POST', path: req.url ?? '/', protocol: 'HTTP/1.1', sourceIp: '127.0.0.1', userAgent: headers['user-agent'] ?? '' } },
        body: textual ? body.toString('utf8') : body.toString('base64'),
        isBase64Encoded: !textual,
      } as unknown as APIGatewayProxyEventV2;
      const context = { functionName: 'stripe-events', awsRequestId: randomBytes(8).toString('hex'), getRemainingTimeInMillis: () => 30_000 };
      handler(event, context)
        .then((answer) => {
          const status = answer.statusCode ?? 200;
          answers[String(status)] = (answers[String(status)] ?? 0) + 1;
          res.writeHead(status, answer.headers as Record<string, string> | undefined).end(answer.body ?? '');
        })
        .catch(() => {
          answers['500'] = (answers['500'] ?? 0) + 1;
          res.writeHead(500).end();
        });
    });
  });
  await new Promise<void>((resolve) => server.listen(port, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/`,
    answers: () => ({ ...answers }),
    stop: () => new Promise<void>((resolve) => server.close(() => resolve())),
  };
}

/** The endpoint, and the fake Stripe delivering its signed events to it (with the given faults). */
export async function startLocalWebhooks(fake: FakeStripe, secret: string, options: LocalWebhookOptions = {}): Promise<LocalWebhooks> {
  const endpoint = await startWebhookEndpoint();
  const url = endpoint.url;
  const dispatcher = new WebhookDispatcher({
    fake,
    endpoint: url,
    secret,
    faults: options.faults ?? {},
    seed: options.seed ?? 1,
    retryScale: options.retryScale ?? 1 / 60,
    ...(options.origin ? { origin: options.origin } : {}),
  });
  if (options.watch ?? true) dispatcher.start();
  return {
    url,
    dispatcher,
    answers: endpoint.answers,
    async stop() {
      await dispatcher.stop();
      await endpoint.stop();
    },
  };
}

/**
 * Polling only: the same watcher, delivering nothing, so that the ledger can still say how long an
 * operation took to learn that Stripe had settled its PaymentIntent.
 */
export function startStripeObserver(fake: FakeStripe): WebhookDispatcher {
  const observer = new WebhookDispatcher({ fake, endpoint: null, secret: 'whsec_observer_only', deliver: false });
  observer.start();
  return observer;
}

export interface SettleLag {
  /** How operations learnt it: events (with polling as the fallback) or polling only. */
  readonly mode: 'webhooks' | 'polling';
  /** PaymentIntents Stripe settled after leaving them processing / requiring action, whose operation is final. */
  readonly count: number;
  readonly p50Ms: number | null;
  readonly p95Ms: number | null;
  readonly maxMs: number | null;
}

/** Stripe settled a processing PaymentIntent → its operation final (settled_at), on this run's clock. */
export async function readSettleLag(db: pg.Pool, observer: WebhookDispatcher, mode: SettleLag['mode']): Promise<SettleLag> {
  const times = observer.settleTimes();
  const ids = [...times.keys()];
  const { rows } = ids.length
    ? await db.query<{ external_id: string; settled_at: Date }>(
        `SELECT external_id, settled_at FROM payment_operations WHERE external_id = ANY($1) AND settled_at IS NOT NULL`,
        [ids],
      )
    : { rows: [] };
  const lags = rows.map((r) => Math.max(0, r.settled_at.getTime() - times.get(r.external_id)!)).sort((a, b) => a - b);
  const at = (p: number) => (lags.length ? lags[Math.min(lags.length - 1, Math.floor(p * lags.length))]! : null);
  return { mode, count: lags.length, p50Ms: at(0.5), p95Ms: at(0.95), maxMs: lags.length ? lags[lags.length - 1]! : null };
}

// ── The ledger's view ────────────────────────────────────────────────────────────────────────────

export interface StripeEventsLedger {
  readonly delivery: DeliveryStats | null;
  readonly endpointAnswers: Readonly<Record<string, number>>;
  /** Rows in the inbox (distinct events recorded). */
  readonly received: number;
  readonly applied: number;
  readonly backlog: number;
  readonly appliedByOutcome: Readonly<Record<string, number>>;
  /** Deliveries answered 200 beyond the first per event (redeliveries the inbox absorbed). */
  readonly duplicates: number;
  readonly rejected: number;
  readonly findings: Readonly<Record<string, number>>;
  /** How operations reached their final state: answer, retrieve, search, list, event, operator. */
  readonly finalVia: Readonly<Record<string, number>>;
}

export async function readStripeEventsLedger(db: pg.Pool, webhooks: (WebhookEndpoint & { readonly dispatcher?: WebhookDispatcher }) | null): Promise<StripeEventsLedger> {
  const [inbox, outcomes, findings, via] = await Promise.all([
    db.query<{ received: number; applied: number; backlog: number }>(
      `SELECT count(*)::int AS received, count(*) FILTER (WHERE applied_at IS NOT NULL)::int AS applied,
              count(*) FILTER (WHERE applied_at IS NULL)::int AS backlog FROM stripe_events`,
    ),
    db.query<{ outcome: string; n: number }>(`SELECT outcome, count(*)::int AS n FROM stripe_events WHERE applied_at IS NOT NULL GROUP BY outcome`),
    db.query<{ kind: string; n: number }>(`SELECT kind, count(*)::int AS n FROM stripe_event_findings GROUP BY kind`),
    // The write that made each operation final, by the evidence it rested on.
    db.query<{ via: string; n: number }>(
      `SELECT CASE WHEN e.detail ? 'stripeEventId' THEN 'event'
                   WHEN e.action = 'operator_resolved' THEN 'operator'
                   WHEN e.step = 'create' THEN 'answer'
                   WHEN e.step = 'early_search' THEN 'search'
                   ELSE coalesce(e.step, 'other') END AS via,
              count(*)::int AS n
         FROM payment_operation_events e
        WHERE e.action IN ('outcome_recorded', 'operator_resolved') AND e.to_status IN ('succeeded', 'failed')
        GROUP BY 1`,
    ),
  ]);
  const answers = webhooks?.answers() ?? {};
  const ok = Object.entries(answers).filter(([s]) => s.startsWith('2')).reduce((n, [, c]) => n + c, 0);
  const rejected = Object.entries(answers).filter(([s]) => s.startsWith('4')).reduce((n, [, c]) => n + c, 0);
  const received = inbox.rows[0]?.received ?? 0;
  return {
    delivery: webhooks?.dispatcher?.stats() ?? null,
    endpointAnswers: answers,
    received,
    applied: inbox.rows[0]?.applied ?? 0,
    backlog: inbox.rows[0]?.backlog ?? 0,
    appliedByOutcome: Object.fromEntries(outcomes.rows.map((r) => [r.outcome, r.n])),
    duplicates: Math.max(0, ok - received),
    rejected,
    findings: Object.fromEntries(findings.rows.map((r) => [r.kind, r.n])),
    finalVia: Object.fromEntries(via.rows.map((r) => [r.via, r.n])),
  };
}
