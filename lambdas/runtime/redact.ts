// What may be printed about an error or a text: the two rules of observability.ts (raw errors never
// reach a logger; every printed error text is redacted), with no logging library attached, so that
// plain domain code (the consumer kit) can use them.

// Stripe keys (secret, restricted, publishable; live and test), PaymentMethod ids, client secrets,
// and the password of a URL. A Stripe "No such PaymentMethod: 'pm_…'" message carries an id, and a
// connection error may carry the URL it tried.
const SECRETS: readonly [RegExp, string][] = [
  [/\b(sk|rk|pk)_(live|test)_[A-Za-z0-9]+/g, '$1_$2_[redacted]'],
  [/\bpm_[A-Za-z0-9_]+/g, 'pm_[redacted]'],
  [/\b(pi|seti)_[A-Za-z0-9]+_secret_[A-Za-z0-9]+/g, '[redacted client secret]'],
  [/(\/\/[^:/@\s]+:)[^@\s]+@/g, '$1[redacted]@'],
];

export function redact(text: string): string {
  return SECRETS.reduce((out, [pattern, replacement]) => out.replace(pattern, replacement), text);
}

/** What may be logged about an error: its class, its code, and a redacted, bounded message. */
export function describeError(error: unknown): { errorName: string; errorCode?: string; errorMessage: string } {
  const e = typeof error === 'object' && error !== null ? (error as { name?: unknown; code?: unknown; message?: unknown }) : {};
  const name = typeof e.name === 'string' ? e.name : 'Error';
  const message = typeof e.message === 'string' ? e.message : String(error);
  return {
    errorName: name,
    ...(typeof e.code === 'string' || typeof e.code === 'number' ? { errorCode: String(e.code) } : {}),
    errorMessage: redact(message).slice(0, 500),
  };
}
