// The e-mail provider seam of the receipt notifier, and its HTTP adapter for a Resend-shaped API
// (POST /emails; the fake is local/fake-email/server.ts). The adapter's one job beyond sending:
// classify every answer into what is KNOWN, because the kit's policy decides on exactly that.
//
// | answer                                     | known                 | EffectFailure |
// |--------------------------------------------|-----------------------|---------------|
// | 2xx { id }                                 | sent                  | —             |
// | 400 validation_error / invalid_idempotency_key, 403, 404, 422 | refused for good | rejected |
// | 409 invalid_idempotent_request             | key reused with another payload: a bug | rejected |
// | 409 concurrent_idempotent_requests         | the first request with the key still runs: not executed | not_executed |
// | 429 rate_limit_exceeded                    | not executed          | not_executed  |
// | 401 (key missing / invalid)                | not executed; configuration | not_executed (retried until fixed, DLQ alarm) |
// | 5xx, a body we cannot read                 | may have sent         | ambiguous     |
// | timeout, reset after the request was sent  | may have sent         | ambiguous     |
// | connection refused (nothing was sent)      | not executed          | not_executed  |
//
// Status meanings: https://resend.com/docs/api-reference/errors (relied on for 400/401/409/429/500).
import { EffectError, EffectFailure } from '../kit/errors.ts';

export interface EmailMessage {
  readonly from: string;
  readonly to: string;
  readonly subject: string;
  readonly text: string;
}

export interface EmailProvider {
  /** Deduplicates on the key when the provider supports keys (declared by `idempotencyKeys`). */
  readonly idempotencyKeys: boolean;
  send(message: EmailMessage, options: { idempotencyKey?: string }): Promise<{ id: string }>;
}

export interface HttpEmailProviderOptions {
  /** e.g. https://api.resend.com, or the fake's http://127.0.0.1:<port> */
  readonly apiBase: string;
  readonly apiKey: string;
  /** Whether this provider deduplicates on Idempotency-Key (Resend does). */
  readonly idempotencyKeys: boolean;
  /** Per request. @default 5000 */
  readonly timeoutMs?: number;
}

export class HttpEmailProvider implements EmailProvider {
  readonly idempotencyKeys: boolean;
  readonly #url: string;
  readonly #apiKey: string;
  readonly #timeoutMs: number;

  constructor(options: HttpEmailProviderOptions) {
    this.idempotencyKeys = options.idempotencyKeys;
    this.#url = `${options.apiBase.replace(/\/+$/, '')}/emails`;
    this.#apiKey = options.apiKey;
    this.#timeoutMs = options.timeoutMs ?? 5_000;
  }

  async send(message: EmailMessage, options: { idempotencyKey?: string } = {}): Promise<{ id: string }> {
    let response: Response;
    try {
      response = await fetch(this.#url, {
        method: 'POST',
        headers: {
          authorization: `Bearer ${this.#apiKey}`,
          'content-type': 'application/json',
          ...(options.idempotencyKey ? { 'idempotency-key': options.idempotencyKey } : {}),
        },
        body: JSON.stringify(message),
        signal: AbortSignal.timeout(this.#timeoutMs),
      });
    } catch (error) {
      const code = networkCode(error);
      // Refused: no connection, so no request reached the provider. Anything else (a reset, a
      // timeout) may have come after the provider got — and acted on — the request.
      if (code === 'ECONNREFUSED') throw new EffectError(EffectFailure.notExecuted, 'connection refused by the e-mail provider', { code, cause: error });
      throw new EffectError(EffectFailure.ambiguous, `no answer from the e-mail provider (${code ?? (error as Error).name})`, { ...(code ? { code } : {}), cause: error });
    }
    let body: { id?: unknown; name?: unknown; message?: unknown } = {};
    try {
      body = (await response.json()) as typeof body;
    } catch {
      if (response.ok) throw new EffectError(EffectFailure.ambiguous, `unreadable ${response.status} answer from the e-mail provider`, { code: String(response.status) });
    }
    if (response.ok) {
      if (typeof body.id !== 'string') throw new EffectError(EffectFailure.ambiguous, `${response.status} answer without an id`, { code: String(response.status) });
      return { id: body.id };
    }
    const name = typeof body.name === 'string' ? body.name : `http_${response.status}`;
    const text = `${response.status} ${name}${typeof body.message === 'string' ? `: ${body.message.slice(0, 200)}` : ''}`;
    throw new EffectError(classifyStatus(response.status, name), text, { code: name });
  }
}

export function classifyStatus(status: number, name: string): EffectFailure {
  if (status === 409) return name === 'concurrent_idempotent_requests' ? EffectFailure.notExecuted : EffectFailure.rejected;
  if (status === 429 || status === 401) return EffectFailure.notExecuted;
  if (status >= 400 && status < 500) return EffectFailure.rejected;
  return EffectFailure.ambiguous;
}

function networkCode(error: unknown): string | undefined {
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  if (typeof cause?.code === 'string') return cause.code;
  if ((error as Error | undefined)?.name === 'TimeoutError') return 'TIMEOUT';
  return undefined;
}
