// The live page's data, in plain TypeScript: what one refresh of the page shows (PageState), one
// operation's timeline, and the review actions as the ops commands' own argv. The HTTP server
// (server.ts) only moves these in and out; where the figures come from is a LivePageSource — the ops
// commands (ops-source.ts: `npm run ops -- ui`, locally or through the ops Lambda) or a local run
// (local/live-page.ts: the same commands plus what only the run itself can see).
import type { OpsResponse } from '../response.ts';
import type { KindCounts } from '../queries.ts';
import type { ReviewListResult } from '../results.ts';

/** The queue in front of the charge function (SQS GetQueueAttributes). */
export interface QueueDepth {
  /** ApproximateNumberOfMessages: waiting to be received. */
  readonly waiting: number;
  /** ApproximateNumberOfMessagesNotVisible: received, not yet deleted. */
  readonly notVisible: number;
  readonly dlq: number;
}

/** queue → Stripe → outcome events: the counts of one moment. */
export interface Flow {
  /** Null where the queue cannot be read from here (the ops commands do not read SQS). */
  readonly queue: QueueDepth | null;
  /** Records the charge function is working on now (the local event source); null when unknown. */
  readonly inFlight: number | null;
  /** `ops stats` byKind: charges beside refunds. */
  readonly charges: KindCounts;
  readonly refunds: KindCounts;
  readonly review: { readonly size: number; readonly oldestAgeSeconds: number };
  readonly outbox: { readonly unpublished: number };
  readonly rejected24h: number;
}

/** One point of the charts (taken once per refresh). */
export interface Sample {
  /** Epoch milliseconds. */
  readonly at: number;
  /** Operations with an end state (succeeded, failed, in review), charges and refunds. */
  readonly settled: number;
  /** Faults the fake Stripe injected so far; null where nobody counts them. */
  readonly faults: number | null;
  /** First send → final, over the operations final so far; null when not known. */
  readonly p50Ms: number | null;
  readonly p95Ms: number | null;
}

export interface PageState {
  readonly asOf: string;
  readonly mode: 'local' | 'ops';
  readonly title: string;
  /** Where the figures come from (the ops CLI's target banner, or the local run). */
  readonly target: string;
  /** Review actions may be taken from the page (started with --allow-actions). */
  readonly actionsAllowed: boolean;
  /** Who the page acts as: the actor written to the audit trail (null: the identity STS verifies). */
  readonly actor: string | null;
  readonly flow: Flow;
  /** Faults by kind (the fake Stripe's own count); null where nobody counts them. */
  readonly faultsByKind: Readonly<Record<string, number>> | null;
  readonly samples: readonly Sample[];
  /** Settled per second between consecutive samples (ratePerSecond). */
  readonly rates: readonly { readonly at: number; readonly perSecond: number }[];
  readonly review: ReviewListResult;
}

/** What Stripe holds for one operation beside its audit trail. */
export interface StripeSide {
  /** "the fake Stripe's own record (/__fake/…)" or "Stripe, as operations show --stripe reads it". */
  readonly source: string;
  readonly objects: readonly Readonly<Record<string, unknown>>[];
  /** Why there is nothing to show (no key, not found, …). */
  readonly note: string | null;
}

export interface Timeline {
  /** `operations show <key>`, as the CLI's --json prints it. */
  readonly show: OpsResponse;
  readonly stripe: StripeSide | null;
}

export interface LivePageSource {
  state(): Promise<PageState>;
  timeline(key: string): Promise<Timeline>;
  /** Runs one ops command that writes (argv from actionArgv); the answer is the command's own. */
  act(argv: readonly string[]): Promise<OpsResponse>;
  close(): Promise<void>;
}

// ── Review actions ───────────────────────────────────────────────────────────────────────────────

export const PAGE_ACTIONS = ['resolve', 'reissue', 'note'] as const;
export type PageAction = (typeof PAGE_ACTIONS)[number];

export interface ActionRequest {
  readonly operationId: string;
  readonly action: PageAction;
  /** resolve: the outcome; with `succeeded`, the proof (a PaymentIntent for a charge, a Refund for a refund). */
  readonly as: 'succeeded' | 'failed' | null;
  readonly proof: string | null;
  readonly reason: string;
  /** The page's confirmation step was taken. */
  readonly confirmed: boolean;
}

/** A request the page should not have sent (the ops commands judge everything else). */
export class PageRequestError extends Error {
  override readonly name = 'PageRequestError';
}

const text = (body: Record<string, unknown>, name: string): string | null => {
  const v = body[name];
  if (v === undefined || v === null || v === '') return null;
  if (typeof v !== 'string') throw new PageRequestError(`${name} must be a string`);
  return v;
};

/** The JSON body of POST /api/actions. */
export function parseActionRequest(body: unknown): ActionRequest {
  if (typeof body !== 'object' || body === null || Array.isArray(body)) throw new PageRequestError('the body must be a JSON object');
  const b = body as Record<string, unknown>;
  const action = text(b, 'action');
  if (!action || !(PAGE_ACTIONS as readonly string[]).includes(action)) throw new PageRequestError(`action must be one of ${PAGE_ACTIONS.join(', ')}`);
  const as = text(b, 'as');
  if (as !== null && as !== 'succeeded' && as !== 'failed') throw new PageRequestError('as must be succeeded or failed');
  return {
    operationId: text(b, 'operationId') ?? '',
    action: action as PageAction,
    as,
    proof: text(b, 'proof'),
    reason: text(b, 'reason') ?? '',
    confirmed: b.confirmed === true,
  };
}

/**
 * The ops command an action is: the CLI's argv, checked by the CLI's parser (the same required
 * reason, the same proof rules). The confirmation step is the page's --yes / --confirm-no-charge.
 */
export function actionArgv(request: ActionRequest): string[] {
  if (!request.confirmed) throw new PageRequestError('not confirmed: the page asks for a confirmation before any write');
  const reason = ['--reason', request.reason];
  switch (request.action) {
    case 'resolve': {
      const proofFlag = request.proof?.startsWith('re_') ? '--refund' : '--payment-intent';
      return ['review', 'resolve', request.operationId, '--as', request.as ?? '', ...(request.proof ? [proofFlag, request.proof] : []), ...reason];
    }
    case 'reissue':
      return ['review', 'reissue', request.operationId, '--confirm-no-charge', ...reason];
    case 'note':
      return ['review', 'note', request.operationId, ...reason];
  }
}

/** The command as an operator would type it (shown in the confirmation step). */
export function commandLine(argv: readonly string[]): string {
  const quote = (a: string) => (/^[\w@%+=:,./-]+$/.test(a) ? a : `'${a.replaceAll("'", "'\\''")}'`);
  return `npm run ops -- ${argv.map(quote).join(' ')}`;
}

// ── Charts ───────────────────────────────────────────────────────────────────────────────────────

/** Keeps the last `max` samples, one per `minSpacingMs` at most. */
export class SampleLog {
  readonly #samples: Sample[] = [];
  readonly #max: number;
  readonly #minSpacingMs: number;
  constructor(max = 900, minSpacingMs = 900) {
    this.#max = max;
    this.#minSpacingMs = minSpacingMs;
  }

  add(sample: Sample): readonly Sample[] {
    const last = this.#samples.at(-1);
    if (last && sample.at - last.at < this.#minSpacingMs) this.#samples[this.#samples.length - 1] = { ...sample, at: last.at };
    else this.#samples.push(sample);
    if (this.#samples.length > this.#max) this.#samples.splice(0, this.#samples.length - this.#max);
    return [...this.#samples];
  }
}

/** Settled per second between consecutive samples (the page draws these). */
export function ratePerSecond(samples: readonly Sample[]): { readonly at: number; readonly perSecond: number }[] {
  const out: { at: number; perSecond: number }[] = [];
  for (let i = 1; i < samples.length; i++) {
    const a = samples[i - 1]!;
    const b = samples[i]!;
    const dt = (b.at - a.at) / 1000;
    if (dt > 0) out.push({ at: b.at, perSecond: Math.max(0, (b.settled - a.settled) / dt) });
  }
  return out;
}

/** Settled operations of both kinds: succeeded, failed or in review. */
export function settledOf(flow: Pick<Flow, 'charges' | 'refunds'>): number {
  const s = (k: KindCounts) => k.succeeded + k.failed + k.inReview;
  return s(flow.charges) + s(flow.refunds);
}
