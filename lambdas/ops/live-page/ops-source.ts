// The live page's figures from the ops commands: `stats` for the counts, `review list` for the queue,
// `operations show --stripe` for a timeline, and the review actions as `review resolve|reissue|note`.
// Each is run through an OpsRunner — the CLI's direct transport (a database) or the ops Lambda — so
// the page shows what the same command prints, and a write from the page is audited as the CLI's is.
import { isAction, parseInvocation } from '../parse.ts';
import { failure, type OpsResponse } from '../response.ts';
import { UsageError, type OpsError } from '../errors.ts';
import type { ResultOf } from '../results.ts';
import { ratePerSecond, SampleLog, settledOf, type Flow, type LivePageSource, type PageState, type StripeSide, type Timeline } from './model.ts';

/** argv in, the command's OpsResponse out (what `npm run ops -- <argv> --json` prints). */
export type OpsRunner = (argv: readonly string[]) => Promise<OpsResponse>;

/** The answer of a command the page itself runs: a failure is an error of the page, with the command's message. */
export class OpsCommandFailed extends Error {
  override readonly name = 'OpsCommandFailed';
  readonly response: Extract<OpsResponse, { ok: false }>;
  constructor(response: Extract<OpsResponse, { ok: false }>) {
    super(`${response.command ?? 'ops'}: ${response.error.message}`);
    this.response = response;
  }
}

export function resultOf<K extends keyof ResultOf>(response: OpsResponse, command: K): ResultOf[K] {
  if (!response.ok) throw new OpsCommandFailed(response);
  if (response.command !== command) throw new Error(`expected the answer of ${command}, got ${response.command}`);
  return response.result as ResultOf[K];
}

export interface OpsSourceOptions {
  readonly run: OpsRunner;
  readonly title: string;
  readonly target: string;
  readonly actionsAllowed: boolean;
  /** Who the page says acts (the audit trail's actor where nothing is verified). */
  readonly actor: string | null;
  /** `--actor <name>` for every write; null: the OS user (or, in the ops function, the identity STS verifies). */
  readonly actorName: string | null;
  /** Only writes go through here; the ops commands judge them (reason, proof, evidence). */
  readonly close?: () => Promise<void>;
}

export interface OpsReading {
  readonly flow: Flow;
  readonly review: ResultOf['review list'];
}

/** The two reads every refresh needs, from the ops commands. */
export async function readThroughOps(run: OpsRunner): Promise<OpsReading> {
  const [stats, review] = await Promise.all([run(['stats']), run(['review', 'list', '--limit', '200'])]);
  const s = resultOf(stats, 'stats');
  return {
    flow: {
      queue: null,
      inFlight: null,
      charges: s.byKind.charge,
      refunds: s.byKind.refund,
      review: { size: s.review.size, oldestAgeSeconds: s.review.oldestAgeSeconds },
      outbox: { unpublished: s.outbox.unpublished },
      rejected24h: s.rejected.last24h,
    },
    review: resultOf(review, 'review list'),
  };
}

/** What `operations show --stripe` found at Stripe, as rows for the timeline. */
export function stripeSideOf(show: OpsResponse): StripeSide | null {
  if (!show.ok || (show.command !== 'operations show' && show.command !== 'review show')) return null;
  const r = show.result as ResultOf['operations show'];
  const evidence = r.stripe;
  if (!evidence) return { source: 'Stripe, as operations show --stripe reads it', objects: [], note: r.stripeSkipped };
  const objects = [...evidence.paymentIntents, ...evidence.refunds].map((o) => ({ ...o }) as Record<string, unknown>);
  return { source: 'Stripe, as operations show --stripe reads it', objects, note: evidence.complete ? null : evidence.problems.join('; ') };
}

/**
 * The argv of a write from the page: `--actor <name>` added when the page was started with one (as
 * the CLI's `--actor`), else the command's default actor is the OS user, as the CLI's is.
 */
export function withActor(argv: readonly string[], actorName: string | null): string[] {
  return actorName ? [...argv, '--actor', actorName] : [...argv];
}

/** Refuses anything but the three review writes (the page has no other). */
export function checkPageWrite(argv: readonly string[]): OpsResponse | null {
  try {
    const { command } = parseInvocation(argv, 'page');
    if (!isAction(command) || !['review resolve', 'review reissue', 'review note'].includes(command.name)) {
      throw new UsageError(`the page runs review resolve, reissue and note only (got ${command.name})`);
    }
    return null;
  } catch (error) {
    if (error instanceof UsageError) return failure(null, error as OpsError);
    throw error;
  }
}

export function opsCommandsSource(options: OpsSourceOptions): LivePageSource {
  const log = new SampleLog();
  return {
    async state(): Promise<PageState> {
      const { flow, review } = await readThroughOps(options.run);
      const samples = log.add({ at: Date.now(), settled: settledOf(flow), faults: null, p50Ms: null, p95Ms: null });
      return {
        asOf: review.asOf,
        mode: 'ops',
        title: options.title,
        target: options.target,
        actionsAllowed: options.actionsAllowed,
        actor: options.actor,
        flow,
        faultsByKind: null,
        samples,
        rates: ratePerSecond(samples),
        review,
      };
    },
    async timeline(key: string): Promise<Timeline> {
      const show = await options.run(['operations', 'show', key, '--stripe']);
      return { show, stripe: stripeSideOf(show) };
    },
    async act(argv) {
      return checkPageWrite(argv) ?? options.run(withActor(argv, options.actorName));
    },
    close: options.close ?? (async () => {}),
  };
}
