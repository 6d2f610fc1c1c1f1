// Every error the producer client raises or returns. Identified by `name`, each carrying what a
// caller needs to act: which requests were invalid and why, or which order failed to reach SQS and
// whether resending can help.

/** One reason a request was refused. Names fields and rules, never the values a caller sent. */
export interface ChargeRequestIssue {
  /** Position of the request in the call (0 for `sendChargeRequest`). */
  readonly index: number;
  /** Present when the request has a well-formed orderId. */
  readonly orderId?: string;
  /** Dotted field path, `(request)` for the request as a whole. */
  readonly path: string;
  readonly message: string;
}

export class ProducerError extends Error {
  override name = 'ProducerError';
}

/**
 * The input failed the message contract (or repeated an order with different fields). Thrown before
 * anything is sent: nothing of the call reached the queue, so fixing the input and calling again is
 * always safe.
 */
export class InvalidChargeRequestError extends ProducerError {
  override name = 'InvalidChargeRequestError';
  readonly issues: readonly ChargeRequestIssue[];

  constructor(issues: readonly ChargeRequestIssue[]) {
    const shown = issues.slice(0, 5).map(formatIssue).join('; ');
    const more = issues.length > 5 ? `; …and ${issues.length - 5} more` : '';
    super(`invalid charge request${issues.length === 1 ? '' : 's'}: ${shown}${more}`);
    this.issues = issues;
  }
}

export function formatIssue(issue: ChargeRequestIssue): string {
  const who = issue.orderId === undefined ? `#${issue.index}` : `#${issue.index} (${issue.orderId})`;
  return `${who} ${issue.path}: ${issue.message}`;
}

/**
 * An order did not reach the queue: SQS refused its entry or the whole call failed. Whether it was
 * stored is certain only when `senderFault` is true (refused as sent); after a server-side or network
 * failure it may have been stored, which is harmless: a resend within 5 minutes carries the same
 * deduplication id and is dropped by SQS, and the charge handler deduplicates by order anyway.
 */
export class ChargeRequestSendError extends ProducerError {
  override name = 'ChargeRequestSendError';
  readonly orderId: string;
  /** The SQS error code (`InternalError`, `QueueDoesNotExist`, …) or the network error code. */
  readonly code: string;
  /** SQS says the request itself is wrong: resending it unchanged cannot succeed. */
  readonly senderFault: boolean;
  /** What SQS (or the network) said, without the order id and code. */
  readonly reason: string;
  /** Calls made for this order, including the first (SDK-level retries of one call not counted). */
  readonly attempts: number;

  constructor(args: { orderId: string; code: string; message: string; senderFault: boolean; attempts: number; cause?: unknown }) {
    super(`order ${args.orderId}: ${args.code}: ${args.message}`, args.cause === undefined ? undefined : { cause: args.cause });
    this.orderId = args.orderId;
    this.code = args.code;
    this.reason = args.message;
    this.senderFault = args.senderFault;
    this.attempts = args.attempts;
  }
}
