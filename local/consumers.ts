// The outcome consumers of the local run (`npm start`): the receipt notifier on the local bus, once
// per policy so that the ledger shows side by side what each policy produced on the same events.
//
//   fake EventBridge ──LocalEventRules (pattern: Charge / Refund Succeeded; duplicates, reorders)──▶
//     fauxqs standard queue per instance ──SqsEventSource──▶ the kit's Lambda handler (createConsumerHandler)
//       ──▶ fake e-mail API per instance (its own faults; with or without idempotency keys)
//
//   receipts                at-least-once, provider WITHOUT keys (the notifier as deployed by default)
//   receipts-idempotent     idempotent, provider WITH keys (Resend-like)
//   receipts-at-most-once   at-most-once, provider without keys (the wrong choice for a receipt: shown to measure it)
//
// Each instance has its own inbox rows (consumer name) and its own pool, counted, so the ledger can
// give DB statements per event. As deployed, they log in as the notifier's own role
// (RECEIPTS_DATABASE_ROLE, suffixed per database), which the pipeline's migrations runner provisions as the owner, and apply
// their migrations as that role: a local run refused a pipeline table the way AWS does.
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import type { SQSBatchResponse, SQSEvent } from 'aws-lambda';
import { createHash } from 'node:crypto';
import path from 'node:path';
import pg from 'pg';
import { createConsumerHandler } from '../lambdas/consumers/kit/lambda.ts';
import { countResults } from '../lambdas/consumers/kit/consumer.ts';
import { inboxCounts } from '../lambdas/consumers/kit/inbox-store.ts';
import { migrateConsumer } from '../lambdas/consumers/kit/migrations.ts';
import type { BatchCounts, ConsumerPolicy, RecordResult } from '../lambdas/consumers/kit/types.ts';
import { HttpEmailProvider } from '../lambdas/consumers/receipts/email-provider.ts';
import { RECEIPTS_DATABASE_ROLE, RECEIPTS_SCHEMAS } from '../lambdas/consumers/receipts/contract.ts';
import { createReceiptNotifier, RECEIPT_DETAIL_TYPES, receiptMigrations, templateRecipient } from '../lambdas/consumers/receipts/notifier.ts';
import { loadMigrations, migrate } from '../lambdas/runtime/migrations.ts';
import { countingDb } from '../lambdas/payments/db.ts';
import { PIPELINE } from '../lambdas/runtime/settings.ts';
import { SqsEventSource } from './event-source.ts';
import { createStandardQueue, LocalEventRules } from './event-rules.ts';
import { startFakeEmail, type EmailFaultKind, type FakeEmail } from './fake-email/server.ts';
import type { FaultProfileName } from './fake-stripe/server.ts';
import type { Pipeline } from './pipeline.ts';

/** Provider faults per Stripe fault profile (each is a probability per POST /emails). */
export const EMAIL_FAULTS: Record<FaultProfileName, Partial<Record<EmailFaultKind, number>> | null> = {
  none: null,
  flaky: { lostResponse: 0.03, error500AfterCommit: 0.02, error500BeforeCommit: 0.02, rateLimited: 0.02 },
  chaos: { lostResponse: 0.06, error500AfterCommit: 0.04, error500BeforeCommit: 0.04, rateLimited: 0.04 },
};

const INSTANCES: readonly { readonly name: string; readonly policy: ConsumerPolicy; readonly idempotency: boolean }[] = [
  { name: 'receipts', policy: 'at-least-once', idempotency: false },
  { name: 'receipts-idempotent', policy: 'idempotent', idempotency: true },
  { name: 'receipts-at-most-once', policy: 'at-most-once', idempotency: false },
];

export interface LocalConsumersOptions {
  readonly pipeline: Pipeline;
  /** Provider faults (EMAIL_FAULTS); usually the run's Stripe profile. */
  readonly faults: FaultProfileName | null;
  readonly seed: number;
  /** EventBridge's at-least-once delivery to targets, made visible. Default 0.05 / 0.05 unless faults are 'none'. */
  readonly duplicateRate?: number;
  readonly holdRate?: number;
  readonly log?: (line: string) => void;
  /**
   * Short by default, so that retries happen within a demo; always function timeout < lease < the
   * queue's visibility timeout, as deployed. Tests on a loaded machine give more room.
   */
  readonly timing?: { readonly functionTimeoutMs: number; readonly leaseMs: number; readonly visibilitySeconds: number; readonly emailTimeoutMs: number };
}

const DEMO_TIMING = { functionTimeoutMs: 2_500, leaseMs: 3_000, visibilitySeconds: 4, emailTimeoutMs: 2_000 } as const;

interface Instance {
  readonly name: string;
  readonly policy: ConsumerPolicy;
  readonly email: FakeEmail;
  readonly pool: pg.Pool;
  readonly db: ReturnType<typeof countingDb>;
  readonly queueUrl: string;
  readonly source: SqsEventSource;
  readonly results: RecordResult[];
}

export interface ConsumerLedgerEntry {
  readonly consumer: string;
  readonly policy: ConsumerPolicy;
  readonly provider: string;
  /** Events the rule matched on the bus (re-sends by the outbox included). */
  readonly eventsOnBus: number;
  /** Distinct events (detail.eventId) among them: what should get a receipt. */
  readonly distinctEvents: number;
  /** SQS deliveries the handler worked (rule duplicates, outbox re-sends and SQS redeliveries included). */
  readonly deliveries: number;
  readonly outcomes: BatchCounts;
  readonly inbox: { readonly done: number; readonly stale: number; readonly abandoned: number; readonly failed: number; readonly open: number; readonly poison: number };
  /** POST /emails the provider received: the cost in effect calls. */
  readonly effectCalls: number;
  readonly receiptsSent: number;
  /** Receipts beyond the first for one event: the duplicates this policy produced. */
  readonly duplicateReceipts: number;
  /** Distinct events that never got a receipt: the misses this policy produced. */
  readonly missedReceipts: number;
  readonly providerFaults: Readonly<Record<string, number>>;
  readonly providerReplays: number;
  readonly dbStatements: number;
  readonly dbStatementsPerEvent: number | null;
}

export interface LocalConsumers {
  /** The database role the notifiers log in as (receipt_notifier_<hash of the database name>). */
  readonly role: string;
  readonly instances: readonly { readonly name: string; readonly policy: ConsumerPolicy; readonly emailUrl: string }[];
  /** Forward what is on the bus and wait until every consumer queue is empty (or the time is up). */
  drain(timeoutMs: number): Promise<boolean>;
  ledger(): Promise<ConsumerLedgerEntry[]>;
  stop(): Promise<void>;
}

/**
 * The notifier's local password. Fixed, not generated: the role is per database (below), and two
 * runs on one database would otherwise reset each other's. The server listens on 127.0.0.1 only,
 * and its owner's password is no more secret (postgres/postgres).
 */
const LOCAL_CONSUMER_PASSWORD = 'receipt-notifier-local-only';

/**
 * The notifier's local role: one per database, as on AWS one per pipeline. Roles are per server, and
 * the migrate run refuses a role that may create in another database (another pipeline's consumer):
 * a persistent local server keeps earlier runs' databases, each with its own notifier.
 */
function localConsumerRole(databaseUrl: string): string {
  const database = decodeURIComponent(new URL(databaseUrl).pathname.slice(1));
  return `${RECEIPTS_DATABASE_ROLE}_${createHash('sha256').update(database).digest('hex').slice(0, 10)}`;
}

/** What the migrate function does on AWS with DB_CONSUMER_LOGINS; the URL to log in as that role. */
async function provisionLocalConsumerLogin(ownerUrl: string, role: string): Promise<string> {
  const migrations = await loadMigrations(path.resolve(import.meta.dirname, '..', 'migrations'));
  await migrate(ownerUrl, migrations, () => {}, {
    consumerLogins: [{ role, password: LOCAL_CONSUMER_PASSWORD, schemas: [...RECEIPTS_SCHEMAS] }],
  });
  const url = new URL(ownerUrl);
  url.username = role;
  url.password = LOCAL_CONSUMER_PASSWORD;
  return url.toString();
}

export async function startLocalConsumers(options: LocalConsumersOptions): Promise<LocalConsumers> {
  const p = options.pipeline;
  const role = localConsumerRole(p.databaseUrl);
  const consumerUrl = await provisionLocalConsumerLogin(p.databaseUrl, role);
  await migrateConsumer(consumerUrl, receiptMigrations());
  const quiet = options.faults === 'none';
  const rates = options.faults ? EMAIL_FAULTS[options.faults] : null;
  const timing = options.timing ?? DEMO_TIMING;
  if (!(timing.emailTimeoutMs < timing.functionTimeoutMs && timing.functionTimeoutMs < timing.leaseMs && timing.leaseMs < timing.visibilitySeconds * 1000)) {
    throw new Error('startLocalConsumers: timing must keep e-mail timeout < function timeout < lease < visibility timeout');
  }
  const instances: Instance[] = [];
  const cleanups: (() => Promise<unknown>)[] = [];
  try {
    for (const [i, spec] of INSTANCES.entries()) {
      const email = await startFakeEmail({ idempotency: spec.idempotency, ...(rates ? { faultRates: { seed: options.seed + 100 + i, ...rates } } : {}) });
      cleanups.push(() => email.close());
      const pool = new pg.Pool({ connectionString: consumerUrl, max: 4, application_name: spec.name });
      // An idle connection that dies (the server stopping) must not crash the run.
      pool.on('error', (error) => options.log?.(`${spec.name} pool: ${error.message}`));
      // …and a client the server drops while checked out or while being ended (pool.end() does not
      // wait for the socket): pg-pool only listens to idle ones.
      pool.on('connect', (client) => client.on('error', (error) => options.log?.(`${spec.name} client: ${error.message}`)));
      cleanups.push(() => pool.end());
      const db = countingDb(pool);
      const queue = await createStandardQueue(p.sqs.client, `${spec.name}-events`, timing.visibilitySeconds);
      const results: RecordResult[] = [];
      const consumer = createReceiptNotifier({
        db,
        name: spec.name,
        policy: spec.policy,
        provider: new HttpEmailProvider({ apiBase: email.url, apiKey: 're_local', idempotencyKeys: spec.idempotency, timeoutMs: timing.emailTimeoutMs }),
        from: 'receipts@shop.example',
        recipient: templateRecipient('customer+{orderId}@example.com'),
        leaseMs: timing.leaseMs,
      });
      const counted = {
        ...consumer,
        processBatch: async (records: Parameters<typeof consumer.processBatch>[0]) => {
          const out = await consumer.processBatch(records);
          results.push(...out.results);
          return out;
        },
      };
      const handler = createConsumerHandler({
        setup: async () => counted,
        logger: new Logger({ serviceName: spec.name }),
        metrics: new Metrics({ namespace: 'OutcomeConsumers', serviceName: spec.name }),
        consumer: spec.name,
        policy: spec.policy,
      }) as unknown as (event: SQSEvent) => Promise<SQSBatchResponse>;
      const source = new SqsEventSource({
        client: p.sqs.client,
        queueUrl: queue.url,
        queueArn: queue.arn,
        region: p.region,
        handler: (event) => handler(event),
        functionName: spec.name,
        functionTimeoutMs: timing.functionTimeoutMs,
        batchSize: 10,
        concurrency: 2,
        waitTimeSeconds: 1,
      });
      instances.push({ name: spec.name, policy: spec.policy, email, pool, db, queueUrl: queue.url, source, results });
    }
    const rules = new LocalEventRules({
      bus: p.eventBridge,
      sqs: p.sqs.client,
      region: p.region,
      seed: options.seed + 7,
      duplicateRate: options.duplicateRate ?? (quiet ? 0 : 0.05),
      holdRate: options.holdRate ?? (quiet ? 0 : 0.05),
      rules: instances.map((i) => ({ name: i.name, pattern: { source: [PIPELINE.eventSource], detailType: [...RECEIPT_DETAIL_TYPES] }, queueUrl: i.queueUrl })),
    });
    for (const i of instances) i.source.start();
    rules.start(250);

    const queueEmpty = (i: Instance) => {
      const q = p.sqs.server.inspectQueue(i.queueUrl.split('/').at(-1)!);
      return (q?.messages.ready.length ?? 0) + (q?.messages.delayed.length ?? 0) + (q?.messages.inflight.length ?? 0) === 0 && i.source.counters().inFlight === 0;
    };
    let stopped: Promise<void> | null = null;
    return {
      role,
      instances: instances.map((i) => ({ name: i.name, policy: i.policy, emailUrl: i.email.url })),
      async drain(timeoutMs) {
        const deadline = Date.now() + timeoutMs;
        await rules.stop(); // everything held back goes out now
        for (;;) {
          if (instances.every(queueEmpty)) return true;
          if (Date.now() > deadline) return false;
          await new Promise((r) => setTimeout(r, 200));
        }
      },
      async ledger() {
        const matched = rules.counters();
        const busEvents = p.eventBridge.events().filter((e) => (RECEIPT_DETAIL_TYPES as readonly string[]).includes(e.detailType));
        // One receipt is owed per event: a charge's (its PaymentIntent) or a refund's (its Refund) — an
        // order with a charge and two refunds is owed three. A receipt is told by its subject (which
        // names the kind and the order) and its Reference (the Stripe object), as its reader would.
        const receiptKey = (subject: string, reference: string | null) => `${subject}|${reference ?? ''}`;
        const distinct = new Map<string, string>(); // eventId → the receipt it owes
        for (const e of busEvents) {
          const d = e.detail as { eventId?: string; orderId?: string; externalId?: string | null };
          if (!d.eventId || !d.orderId) continue;
          const subject = e.detailType.startsWith('Refund') ? `Refund for order ${d.orderId}` : `Receipt for order ${d.orderId}`;
          distinct.set(d.eventId, receiptKey(subject, d.externalId ?? null));
        }
        const out: ConsumerLedgerEntry[] = [];
        for (const i of instances) {
          const inbox = await inboxCounts(i.pool, i.name);
          const sent = i.email.sent();
          const perOrder = new Map<string, number>(); // receipt → how many were sent
          for (const m of sent) {
            const key = receiptKey(m.subject, /Reference: (\S+)/.exec(m.text)?.[1] ?? null);
            perOrder.set(key, (perOrder.get(key) ?? 0) + 1);
          }
          const ordersWanted = new Set(distinct.values());
          const stats = i.email.stats();
          out.push({
            consumer: i.name,
            policy: i.policy,
            provider: i.email.idempotency ? 'fake e-mail API with idempotency keys' : 'fake e-mail API without idempotency keys',
            eventsOnBus: matched[i.name]?.matched ?? 0,
            distinctEvents: distinct.size,
            deliveries: i.results.length,
            outcomes: countResults(i.results),
            inbox: {
              done: inbox.byState.done,
              stale: inbox.byState.stale,
              abandoned: inbox.byState.abandoned,
              failed: inbox.byState.failed,
              open: inbox.byState.attempting + inbox.byState.pending,
              poison: inbox.poison,
            },
            effectCalls: stats.requests,
            receiptsSent: sent.length,
            duplicateReceipts: [...perOrder.values()].reduce((sum, n) => sum + Math.max(0, n - 1), 0),
            missedReceipts: [...ordersWanted].filter((o) => !perOrder.has(o)).length,
            providerFaults: Object.fromEntries(Object.entries(stats.faults).filter(([, n]) => n > 0)),
            providerReplays: stats.replays,
            dbStatements: i.db.roundTrips,
            dbStatementsPerEvent: i.results.length > 0 ? Math.round((i.db.roundTrips / i.results.length) * 100) / 100 : null,
          });
        }
        return out;
      },
      stop: () =>
        (stopped ??= (async () => {
          await rules.stop().catch(() => {});
          await Promise.all(instances.map((i) => i.source.stop(5_000)));
          for (const c of cleanups.reverse()) await c().catch(() => {});
        })()),
    };
  } catch (error) {
    for (const c of cleanups.reverse()) await c().catch(() => {});
    throw error;
  }
}

export function formatConsumerLedger(entries: readonly ConsumerLedgerEntry[], style: { bold: (s: string) => string; dim: (s: string) => string; red: (s: string) => string; green: (s: string) => string } ): string {
  if (entries.length === 0) return '';
  const lines = [style.bold('Outcome consumers: the receipt notifier, once per policy, on the same events')];
  const head = ['', ...entries.map((e) => e.consumer)];
  const rows: [string, ...string[]][] = [
    ['policy', ...entries.map((e) => e.policy)],
    ['provider keys', ...entries.map((e) => (e.provider.includes('with idempotency') ? 'yes' : 'no'))],
    ['events to receipt', ...entries.map((e) => String(e.distinctEvents))],
    ['deliveries worked', ...entries.map((e) => String(e.deliveries))],
    ['duplicates absorbed', ...entries.map((e) => String(e.outcomes.duplicates))],
    ['stale ignored', ...entries.map((e) => String(e.outcomes.stale))],
    ['retried (ambiguous/429)', ...entries.map((e) => String(e.outcomes.retries + e.outcomes.notExecuted))],
    ['busy (lease held, again)', ...entries.map((e) => String(e.outcomes.busy))],
    ['abandoned', ...entries.map((e) => String(e.inbox.abandoned))],
    ['effect calls', ...entries.map((e) => String(e.effectCalls))],
    ['receipts sent', ...entries.map((e) => String(e.receiptsSent))],
    ['duplicate receipts', ...entries.map((e) => String(e.duplicateReceipts))],
    ['missed receipts', ...entries.map((e) => String(e.missedReceipts))],
    ['DB statements / delivery', ...entries.map((e) => String(e.dbStatementsPerEvent ?? 'n/a'))],
    ['DB statements / event', ...entries.map((e) => (e.distinctEvents > 0 ? (Math.round((e.dbStatements / e.distinctEvents) * 100) / 100).toString() : 'n/a'))],
    ['still open', ...entries.map((e) => String(e.inbox.open))],
  ];
  const width = [26, ...entries.map((e) => Math.max(e.consumer.length, 13) + 2)];
  const cell = (s: string, i: number) => (i === 0 ? s.padEnd(width[0]!) : s.padStart(width[i]!));
  lines.push(`    ${head.map(cell).join('')}`);
  for (const row of rows) lines.push(`    ${row.map(cell).join('')}`);
  const faults = entries.map((e) => `${e.consumer}: ${Object.entries(e.providerFaults).map(([k, v]) => `${k} ${v}`).join(', ') || 'none'}`).join(' · ');
  lines.push(style.dim(`    provider faults injected — ${faults}`));
  return lines.join('\n');
}
