// The live view of a local run. On a terminal: a bar and a few lines of counts, redrawn in place
// (plain ANSI: cursor up, clear line); elsewhere (CI, a pipe, a log file): one line every few seconds.
import type { SendReport } from './send-report.ts';
import type { PipelineSnapshot } from './pipeline.ts';
import { ANSI, seconds, type Style } from './ledger.ts';

export interface ProgressHeader {
  /** 'fake Stripe (flaky, seed 42)' */
  readonly title: string;
  /** 'time-lapse: 23 h key window shown as 20 s, …' */
  readonly note?: string;
}

export interface ProgressView {
  update(snapshot: PipelineSnapshot, send: SendReport | null): void;
  /** A line above the live block (kept in the scrollback). */
  note(line: string): void;
  /** Leave the last frame on screen. */
  finish(): void;
}

export interface ProgressOptions {
  readonly write: (text: string) => void;
  readonly tty: boolean;
  /** Columns of the terminal (bar width). */
  readonly columns?: number;
  /** Plain mode: at most one line per this many ms. Default 2000. */
  readonly plainEveryMs?: number;
  readonly startedAt: Date;
}

const n = (value: number) => value.toLocaleString('en-US');

/** The counts everyone reads; the same words in both modes. */
function counts(s: PipelineSnapshot, send: SendReport | null) {
  const d = s.database;
  const settled = d.succeeded + d.failed + d.inReview;
  // Charges: until the producer is done, the orders it will send; then those SQS accepted (and any
  // that other producers sent meanwhile, under --serve). Refunds are counted as they arrive, apart,
  // so that the charges' denominator does not grow as refunds join.
  const charges = d.operations - d.refunds;
  const expectedCharges = Math.max(charges, send ? (send.done ? send.ordersSent : Math.max(send.ordersPlanned, send.ordersSent)) : 0);
  const expected = expectedCharges + d.refunds;
  return {
    settled,
    expected,
    chargesSettled: settled - d.refundsSettled,
    expectedCharges,
    refundsSettled: d.refundsSettled,
    refunds: d.refunds,
    refundsSucceeded: d.refundsSucceeded,
    sent: send?.ordersSent ?? null,
    duplicates: send?.duplicateSends ?? 0,
    delivered: s.eventSource.records,
    redeliveries: s.eventSource.redeliveries,
    succeeded: d.succeeded,
    failed: d.failed,
    open: d.open + Math.max(0, expectedCharges - charges),
    inReview: d.inReview,
    rejected: d.rejected,
    stripeRequests: s.stripe?.requests.total ?? null,
    faults: s.stripe ? Object.values(s.stripe.faults).reduce((a, b) => a + b, 0) : null,
    events: d.outboxEvents - d.unpublished,
    eventsAccepted: s.eventsAccepted,
    sweeps: s.schedule.runs,
  };
}

export function createProgressView(header: ProgressHeader, options: ProgressOptions): ProgressView {
  return options.tty ? new TtyView(header, options, ANSI) : new PlainView(header, options);
}

class TtyView implements ProgressView {
  readonly #header: ProgressHeader;
  readonly #options: ProgressOptions;
  readonly #style: Style;
  #lines = 0;
  #lastFrame = '';
  #startedPrinting = false;

  constructor(header: ProgressHeader, options: ProgressOptions, style: Style) {
    this.#header = header;
    this.#options = options;
    this.#style = style;
  }

  #erase(): string {
    // Cursor to the start of the block, then clear to the end of the screen.
    return this.#lines > 0 ? `\x1b[${this.#lines}F\x1b[0J` : '';
  }

  note(line: string): void {
    this.#options.write(`${this.#erase()}${line}\n${this.#lastFrame}`);
  }

  update(snapshot: PipelineSnapshot, send: SendReport | null): void {
    const st = this.#style;
    if (!this.#startedPrinting) {
      this.#startedPrinting = true;
      this.#options.write(`${st.bold(this.#header.title)}\n${this.#header.note ? `${st.dim(this.#header.note)}\n` : ''}\n`);
    }
    const c = counts(snapshot, send);
    const width = Math.max(20, Math.min(60, (this.#options.columns ?? 100) - 40));
    const ratio = c.expected > 0 ? Math.min(1, c.settled / c.expected) : 0;
    const full = Math.round(ratio * width);
    const elapsed = seconds(snapshot.at.getTime() - this.#options.startedAt.getTime());
    const bar = `${st.green('█'.repeat(full))}${st.dim('░'.repeat(width - full))}`;
    const d = snapshot.database;
    const waiting = [
      d.pending ? `${n(d.pending)} waiting for an attempt` : '',
      d.ambiguous ? `${n(d.ambiguous)} ambiguous (same key again, or Search)` : '',
      d.unsettled ? `${n(d.unsettled)} processing at Stripe` : '',
      d.unpublished ? `${n(d.unpublished)} events in the outbox` : '',
    ].filter(Boolean);
    const lines = [
      ` ${bar} ${st.bold(`${n(c.settled)}/${n(c.expected)}`)} settled ${(ratio * 100).toFixed(0).padStart(3)}%  ${st.dim(`charges ${n(c.chargesSettled)}/${n(c.expectedCharges)} · refunds ${n(c.refundsSettled)}/${n(c.refunds)}`)}  ${st.dim(elapsed)}`,
      ` sent ${n(c.sent ?? 0)}${c.duplicates ? st.dim(` (+${n(c.duplicates)} dup)`) : ''}   delivered ${n(c.delivered)}${c.redeliveries ? st.dim(` (${n(c.redeliveries)} again)`) : ''}   ` +
        `${st.green('succeeded')} ${n(c.succeeded)}${c.refundsSucceeded ? st.dim(` (${n(c.refundsSucceeded)} refunds)`) : ''}   ${st.red('failed')} ${n(c.failed)}   ${st.yellow('open')} ${n(c.open)}   in review ${n(c.inReview)}   rejected ${n(c.rejected)}`,
      ` Stripe ${c.stripeRequests === null ? 'n/a' : `${n(c.stripeRequests)} requests`}${c.faults === null ? '' : `, ${n(c.faults)} faults injected`}   ` +
        `events published ${n(c.events)}   reconcile sweeps ${n(c.sweeps)}`,
      st.dim(` ${waiting.length ? `open: ${waiting.join(' · ')}` : ' '}`),
    ];
    const frame = `${lines.join('\n')}\n`;
    this.#options.write(`${this.#erase()}${frame}`);
    this.#lastFrame = frame;
    this.#lines = lines.length;
  }

  finish(): void {
    this.#lines = 0;
  }
}

class PlainView implements ProgressView {
  readonly #header: ProgressHeader;
  readonly #options: ProgressOptions;
  #last = 0;
  #printedHeader = false;

  constructor(header: ProgressHeader, options: ProgressOptions) {
    this.#header = header;
    this.#options = options;
  }

  note(line: string): void {
    this.#options.write(`${line}\n`);
  }

  update(snapshot: PipelineSnapshot, send: SendReport | null): void {
    if (!this.#printedHeader) {
      this.#printedHeader = true;
      this.#options.write(`${this.#header.title}\n${this.#header.note ? `${this.#header.note}\n` : ''}`);
    }
    const now = snapshot.at.getTime();
    if (now - this.#last < (this.#options.plainEveryMs ?? 2_000)) return;
    this.#last = now;
    this.#options.write(`${this.#line(snapshot, send)}\n`);
  }

  #line(s: PipelineSnapshot, send: SendReport | null): string {
    const c = counts(s, send);
    const elapsed = seconds(s.at.getTime() - this.#options.startedAt.getTime());
    return (
      `[${elapsed}] settled ${n(c.settled)}/${n(c.expected)} (charges ${n(c.chargesSettled)}/${n(c.expectedCharges)}, refunds ${n(c.refundsSettled)}/${n(c.refunds)}) · sent ${n(c.sent ?? 0)} (+${n(c.duplicates)} dup) · delivered ${n(c.delivered)} · ` +
      `succeeded ${n(c.succeeded)} (${n(c.refundsSucceeded)} refunds) · failed ${n(c.failed)} · open ${n(c.open)} · in review ${n(c.inReview)} · rejected ${n(c.rejected)} · ` +
      `Stripe ${c.stripeRequests === null ? 'n/a' : n(c.stripeRequests)} req · faults ${c.faults === null ? 'n/a' : n(c.faults)} · events ${n(c.events)}`
    );
  }

  finish(): void {}
}

