// The live page of a local run (`npm start -- --serve`, the page's browser test): the ops commands'
// figures (stats, review list, operations show — lambdas/ops/live-page/ops-source.ts) against this
// run's database, plus what only the run itself can see: the queue's depth (SQS GetQueueAttributes
// against fauxqs), the invocations in flight, the fake Stripe's faults and its own record of an
// operation's PaymentIntents and Refunds (its control API, /__fake/…), and the time from first send
// to final.
import { GetQueueAttributesCommand } from '@aws-sdk/client-sqs';
import { osUser } from '../lambdas/ops/target.ts';
import type { OperationView } from '../lambdas/ops/results.ts';
import { ratePerSecond, SampleLog, settledOf, type LivePageSource, type PageState, type QueueDepth, type StripeSide, type Timeline } from '../lambdas/ops/live-page/model.ts';
import { checkPageWrite, readThroughOps, stripeSideOf, withActor } from '../lambdas/ops/live-page/ops-source.ts';
import { directRunner } from '../lambdas/ops/live-page/runner.ts';
import { startLivePage, type LivePage } from '../lambdas/ops/live-page/server.ts';
import type { ResultOf } from '../lambdas/ops/results.ts';
import type { FakeStripeStats } from './fake-stripe/types.ts';
import { LOCAL_FAKE_STRIPE_KEY, timeLapseEnvironment, type Pipeline } from './pipeline.ts';

/**
 * The environment the ops tool needs for this run — the one `--serve` writes to .local/ops.env:
 * this run's database, its Stripe (the fake's key; a real key only from the caller's own
 * environment, never written anywhere) and the time-lapse's settings, so that it judges as the
 * handlers do.
 */
export function localOpsEnv(pipeline: Pipeline, stripeKey: string | null = pipeline.fakeStripe ? LOCAL_FAKE_STRIPE_KEY : (process.env.STRIPE_SECRET_KEY ?? null)): NodeJS.ProcessEnv {
  const e = pipeline.environment;
  const settings = pipeline.timeLapse ? Object.keys(timeLapseEnvironment(pipeline.timeLapse)) : [];
  return {
    DATABASE_URL: pipeline.databaseUrl,
    ...(e.STRIPE_API_BASE ? { STRIPE_API_BASE: e.STRIPE_API_BASE } : {}),
    ...(stripeKey ? { STRIPE_SECRET_KEY: stripeKey } : {}),
    ...(e.AMBIGUOUS_RESOLUTION ? { AMBIGUOUS_RESOLUTION: e.AMBIGUOUS_RESOLUTION } : {}),
    ...Object.fromEntries(settings.filter((name) => e[name] !== undefined).map((name) => [name, e[name]!])),
  };
}

async function queueDepth(pipeline: Pipeline): Promise<QueueDepth> {
  const attributes = async (url: string) =>
    (await pipeline.sqs.client.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['ApproximateNumberOfMessages', 'ApproximateNumberOfMessagesNotVisible'] })))
      .Attributes ?? {};
  const [main, dlq] = await Promise.all([attributes(pipeline.sqs.queueUrl), attributes(pipeline.sqs.dlqUrl)]);
  return {
    waiting: Number(main.ApproximateNumberOfMessages ?? 0),
    notVisible: Number(main.ApproximateNumberOfMessagesNotVisible ?? 0),
    dlq: Number(dlq.ApproximateNumberOfMessages ?? 0) + Number(dlq.ApproximateNumberOfMessagesNotVisible ?? 0),
  };
}

async function fakeControl<T>(pipeline: Pipeline, pathAndQuery: string): Promise<T | null> {
  if (!pipeline.fakeStripe) return null;
  const res = await fetch(new URL(pathAndQuery, pipeline.fakeStripe.url));
  if (!res.ok) throw new Error(`the fake Stripe's control API answered ${res.status} to ${pathAndQuery}`);
  return (await res.json()) as T;
}

/** First send to Stripe → final, over the charges final so far (the engine's first_attempted_at and settled_at). */
async function latency(pipeline: Pipeline): Promise<{ p50Ms: number | null; p95Ms: number | null }> {
  const { rows } = await pipeline.db.query<{ p50: number | null; p95: number | null }>(
    `SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY ms) AS p50, percentile_cont(0.95) WITHIN GROUP (ORDER BY ms) AS p95
       FROM (SELECT extract(epoch FROM settled_at - first_attempted_at) * 1000 AS ms
               FROM payment_operations
              WHERE kind = 'charge' AND status IN ('succeeded', 'failed') AND settled_at IS NOT NULL AND first_attempted_at IS NOT NULL) t`,
  );
  const r = rows[0];
  const round = (v: number | null | undefined) => (v === null || v === undefined ? null : Math.round(Number(v)));
  return { p50Ms: round(r?.p50), p95Ms: round(r?.p95) };
}

const PI_FIELDS = ['id', 'status', 'amount', 'currency', 'stripeAccount', 'transfer_data', 'application_fee_amount', 'idempotencyKey', 'created', 'metadata', 'last_payment_error'] as const;
const REFUND_FIELDS = ['id', 'status', 'amount', 'currency', 'payment_intent', 'idempotencyKey', 'created', 'metadata'] as const;

const pick = (o: Record<string, unknown>, fields: readonly string[]) => Object.fromEntries(fields.filter((f) => o[f] !== undefined && o[f] !== null).map((f) => [f, o[f]]));

/** The fake's own record of what an operation made: its PaymentIntents (a charge) or Refunds (a refund). */
async function fakeRecord(pipeline: Pipeline, op: OperationView): Promise<StripeSide> {
  const source = "the fake Stripe's own record (GET /__fake/…)";
  const query = op.kind === 'charge' ? `/__fake/payment_intents?operation_id=${encodeURIComponent(op.id)}` : `/__fake/refunds?operation_id=${encodeURIComponent(op.id)}`;
  const got = await fakeControl<{ data: Record<string, unknown>[] }>(pipeline, query);
  const objects = (got?.data ?? []).map((o) => pick(o, op.kind === 'charge' ? PI_FIELDS : REFUND_FIELDS));
  return { source, objects, note: objects.length === 0 ? `Stripe holds no ${op.kind === 'charge' ? 'PaymentIntent' : 'Refund'} of this operation` : null };
}

export interface LocalPageOptions {
  readonly actionsAllowed: boolean;
  /** Who acts from the page, as the CLI's `--actor` (the audit trail's actor); default the OS user, as the CLI's. */
  readonly actor?: string;
  /** Default the ops tool's environment for this run (localOpsEnv). */
  readonly env?: NodeJS.ProcessEnv;
  readonly title?: string;
}

export function localPipelineSource(pipeline: Pipeline, options: LocalPageOptions): LivePageSource {
  const actor = options.actor ?? osUser(process.env);
  const env = options.env ?? localOpsEnv(pipeline);
  const runner = directRunner(env, osUser(process.env));
  const log = new SampleLog();
  const target = `local run ${pipeline.runId} — database ${pipeline.databaseName}, ${pipeline.stripeDescription}`;
  return {
    async state(): Promise<PageState> {
      const [reading, queue, stats, times] = await Promise.all([
        readThroughOps(runner.run),
        queueDepth(pipeline),
        fakeControl<FakeStripeStats>(pipeline, '/__fake/stats').catch(() => null),
        latency(pipeline),
      ]);
      const faultsByKind = stats ? Object.fromEntries(Object.entries(stats.faults).filter(([, n]) => n > 0)) : null;
      const flow = { ...reading.flow, queue, inFlight: pipeline.eventSource.counters().inFlight };
      const samples = log.add({ at: Date.now(), settled: settledOf(flow), faults: stats ? Object.values(stats.faults).reduce((a, b) => a + b, 0) : null, ...times });
      return {
        asOf: reading.review.asOf,
        mode: 'local',
        title: options.title ?? `Local run ${pipeline.runId}`,
        target,
        actionsAllowed: options.actionsAllowed,
        actor: actor ? `operator:${actor}` : null,
        flow,
        faultsByKind,
        samples,
        rates: ratePerSecond(samples),
        review: reading.review,
      };
    },
    async timeline(key: string): Promise<Timeline> {
      // Without a fake, Stripe itself is asked (operations show --stripe), as the ops page does.
      const show = await runner.run(['operations', 'show', key, ...(pipeline.fakeStripe ? [] : ['--stripe'])]);
      if (!show.ok) return { show, stripe: null };
      const detail = show.result as ResultOf['operations show'];
      if (!pipeline.fakeStripe) return { show, stripe: stripeSideOf(show) };
      return { show, stripe: await fakeRecord(pipeline, detail.operation) };
    },
    async act(argv) {
      return checkPageWrite(argv) ?? runner.run(withActor(argv, options.actor ?? null));
    },
    close: runner.close,
  };
}

/** The page of a local run on 127.0.0.1 (port 0: any free one). */
export function startLocalLivePage(pipeline: Pipeline, options: LocalPageOptions & { readonly port?: number; readonly onError?: (error: unknown) => void }): Promise<LivePage> {
  return startLivePage({
    source: localPipelineSource(pipeline, options),
    actionsAllowed: options.actionsAllowed,
    ...(options.port !== undefined ? { port: options.port } : {}),
    ...(options.onError ? { onError: options.onError } : {}),
  });
}
