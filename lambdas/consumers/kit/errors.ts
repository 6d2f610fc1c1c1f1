// One error type for an effect's failure, carrying what is KNOWN about it — the only thing a policy
// can decide on (the seed: a timeout is not a failure, it is "unknown").

export const EffectFailure = {
  /** The provider refused and will refuse again (a 400 validation error): no retry can help. */
  rejected: 'rejected',
  /** Definitely not executed (429, connection refused, a 409 "in progress" for the same key): safe to retry. */
  notExecuted: 'not_executed',
  /** May or may not have taken effect (timeout, reset, 5xx, an unreadable answer). */
  ambiguous: 'ambiguous',
} as const;
export type EffectFailure = (typeof EffectFailure)[keyof typeof EffectFailure];

export class EffectError extends Error {
  override readonly name = 'EffectError';
  readonly failure: EffectFailure;
  /** The provider's status or code, for the record (no personal data). */
  readonly code: string | undefined;

  constructor(failure: EffectFailure, message: string, options: { code?: string; cause?: unknown } = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.failure = failure;
    this.code = options.code;
  }
}

/** What an error thrown by an effect tells us; a foreign error is ambiguous. */
export function failureOf(error: unknown): EffectFailure {
  return error instanceof EffectError ? error.failure : EffectFailure.ambiguous;
}

/** Refused at start: the message says what to change. */
export class ConsumerConfigError extends Error {
  override readonly name = 'ConsumerConfigError';
}
