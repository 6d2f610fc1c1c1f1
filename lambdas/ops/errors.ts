// One error hierarchy for the operator tool. Each error says how it ends a command: its exit code
// (2 = the invocation is wrong, 1 = the command was refused or could not be completed) and a stable
// `code` machines can branch on. The same values travel in the Lambda's JSON answer.

export const EXIT = { ok: 0, refused: 1, usage: 2 } as const;
export type ExitCode = (typeof EXIT)[keyof typeof EXIT];

export const ErrorCode = {
  /** Bad arguments or a bad event: nothing was read or written. */
  usage: 'usage',
  /** Missing configuration (DATABASE_URL, the Stripe key): nothing was read or written. */
  config: 'config',
  notFound: 'not_found',
  /** The evidence does not allow the action; nothing was changed. */
  refused: 'refused',
  /** The operation changed between the look-ups and the write (another operator, a reissue). */
  conflict: 'conflict',
  /** Stripe could not be asked, so the evidence is incomplete; nothing was changed. */
  stripeUnavailable: 'stripe_unavailable',
  /** The deployed function could not verify who calls, or the caller may not do this; nothing was read or written. */
  unauthorized: 'unauthorized',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export class OpsError extends Error {
  override readonly name: string = 'OpsError';
  readonly code: ErrorCode;
  readonly exitCode: ExitCode;
  /** JSON-safe facts the caller needs: the evidence behind a refusal, the row as it is now. */
  readonly details: Readonly<Record<string, unknown>> | undefined;

  constructor(code: ErrorCode, exitCode: ExitCode, message: string, details?: Readonly<Record<string, unknown>>) {
    super(message);
    this.code = code;
    this.exitCode = exitCode;
    this.details = details;
  }
}

export class UsageError extends OpsError {
  override readonly name = 'UsageError';
  constructor(message: string) {
    super(ErrorCode.usage, EXIT.usage, message);
  }
}

export class OpsConfigError extends OpsError {
  override readonly name = 'OpsConfigError';
  constructor(message: string) {
    super(ErrorCode.config, EXIT.usage, message);
  }
}

export class NotFoundError extends OpsError {
  override readonly name = 'NotFoundError';
  constructor(message: string) {
    super(ErrorCode.notFound, EXIT.refused, message);
  }
}

/** The action is not allowed on this evidence. Carries the evidence so the operator sees why. */
export class RefusedError extends OpsError {
  override readonly name = 'RefusedError';
  constructor(message: string, details?: Readonly<Record<string, unknown>>) {
    super(ErrorCode.refused, EXIT.refused, message, details);
  }
}

export class ConflictError extends OpsError {
  override readonly name = 'ConflictError';
  constructor(message: string, details?: Readonly<Record<string, unknown>>) {
    super(ErrorCode.conflict, EXIT.refused, message, details);
  }
}

export class StripeUnavailableError extends OpsError {
  override readonly name = 'StripeUnavailableError';
  constructor(message: string, details?: Readonly<Record<string, unknown>>) {
    super(ErrorCode.stripeUnavailable, EXIT.refused, message, details);
  }
}

/** Who calls is not proved (no proof, a proof STS refused), or the verified caller is not allowed this command. */
export class UnauthorizedError extends OpsError {
  override readonly name = 'UnauthorizedError';
  constructor(message: string, details?: Readonly<Record<string, unknown>>) {
    super(ErrorCode.unauthorized, EXIT.refused, message, details);
  }
}
