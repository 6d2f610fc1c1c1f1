// A local e-mail API for the receipt notifier (and any other outcome consumer that sends e-mail),
// shaped after Resend's documented API so that the real HTTP path is exercised:
//
//   POST /emails   JSON { from, to, subject, text?, html? }, `Authorization: Bearer <key>`,
//                  optional `Idempotency-Key` → 200 { id }
//   errors         { statusCode, name, message } — 400 validation_error / invalid_idempotency_key,
//                  401 missing_api_key, 409 invalid_idempotent_request / concurrent_idempotent_requests,
//                  429 rate_limit_exceeded, 500 application_error
//
// Documented behaviour relied on (https://resend.com/docs/dashboard/emails/idempotency-keys and
// https://resend.com/docs/api-reference/errors): a key of 1-256 characters; the same key within 24 h
// returns the first response without sending again; the same key with a different payload is a
// 409 invalid_idempotent_request; a second request while the first with that key is still being
// processed is a 409 concurrent_idempotent_requests (nothing sent).
//
// `idempotency: false` stands for a provider WITHOUT idempotency keys (docs/events.md#which-policy: many mail
// APIs have none): the header is ignored and every accepted request sends a mail.
//
// Faults, scripted (inject) or random (rates, seeded), the ways that matter to a consumer:
//   lostResponse        send (record the mail), then destroy the socket: the caller cannot know
//   error500AfterCommit send, then answer 500: ambiguous, and a retry without a key duplicates
//   error500BeforeCommit answer 500 without sending: also ambiguous to the caller
//   rateLimited         429 without sending (documented as not executed)
// A hook (`onRequest`) runs at the exact points before and after the mail is recorded: the crash
// tests kill the consumer process there.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { mulberry32 } from '../random.ts';

export type EmailFaultKind = 'lostResponse' | 'error500AfterCommit' | 'error500BeforeCommit' | 'rateLimited';
export const EMAIL_FAULT_KINDS: readonly EmailFaultKind[] = ['lostResponse', 'error500AfterCommit', 'error500BeforeCommit', 'rateLimited'];

export interface SentEmail {
  readonly id: string;
  readonly from: string;
  readonly to: readonly string[];
  readonly subject: string;
  readonly text: string;
  readonly idempotencyKey: string | null;
  readonly sentAt: Date;
}

export interface EmailRequestView {
  readonly idempotencyKey: string | null;
  readonly body: Readonly<Record<string, unknown>>;
}

export interface FakeEmailOptions {
  readonly port?: number;
  /** Honour Idempotency-Key (Resend does). Default true. */
  readonly idempotency?: boolean;
  /** Random faults per POST /emails; seeded. */
  readonly faultRates?: { readonly seed?: number } & Partial<Record<EmailFaultKind, number>>;
  /**
   * Runs before the mail is recorded ('before-commit') and after it is recorded but before the
   * answer ('after-commit'). Awaited: a test can kill the caller here. Returning 'abort' at
   * 'before-commit' drops the connection without sending (the request never got processed).
   */
  readonly onRequest?: (request: EmailRequestView, phase: 'before-commit' | 'after-commit') => void | 'abort' | Promise<void | 'abort'>;
  /** Added to every answer. Default 0. */
  readonly latencyMs?: number;
}

export interface FakeEmailStats {
  /** POST /emails received. */
  readonly requests: number;
  readonly sent: number;
  /** Answers replayed for a known key (no mail sent). */
  readonly replays: number;
  readonly faults: Readonly<Record<EmailFaultKind, number>>;
  readonly rejected: number;
}

export interface FakeEmail {
  readonly url: string;
  readonly idempotency: boolean;
  sent(): SentEmail[];
  stats(): FakeEmailStats;
  /** The next `times` requests (matching `match`, default all) get this fault. */
  injectFault(kind: EmailFaultKind, options?: { times?: number; match?: (r: EmailRequestView) => boolean }): void;
  /** Forget every idempotency key (standing for the provider pruning keys after their 24 h). */
  forgetKeys(): void;
  reset(): void;
  close(): Promise<void>;
}

interface KeyEntry {
  readonly fingerprint: string;
  /** null while the first request is still being processed. */
  response: { status: number; body: unknown } | null;
  readonly at: number;
}

const KEY_LIFETIME_MS = 24 * 3_600_000;
const EMAIL = /^[^@\s]+@[^@\s]+$/;

export async function startFakeEmail(options: FakeEmailOptions = {}): Promise<FakeEmail> {
  const idempotency = options.idempotency ?? true;
  let sent: SentEmail[] = [];
  let keys = new Map<string, KeyEntry>();
  let scripted: { kind: EmailFaultKind; left: number; match?: (r: EmailRequestView) => boolean }[] = [];
  const faults: Record<EmailFaultKind, number> = { lostResponse: 0, error500AfterCommit: 0, error500BeforeCommit: 0, rateLimited: 0 };
  let requests = 0;
  let replays = 0;
  let rejected = 0;
  let random = mulberry32(options.faultRates?.seed ?? 1);
  const sockets = new Set<Socket>();

  const pickFault = (view: EmailRequestView): EmailFaultKind | null => {
    const s = scripted.find((f) => f.left > 0 && (!f.match || f.match(view)));
    if (s) {
      s.left--;
      return s.kind;
    }
    const rates = options.faultRates;
    if (!rates) return null;
    for (const kind of EMAIL_FAULT_KINDS) {
      const p = rates[kind];
      if (p && random() < p) return kind;
    }
    return null;
  };

  const server = http.createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) answer(res, 500, { statusCode: 500, name: 'application_error', message: String(error) });
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    if (req.method === 'GET' && req.url === '/_fake/emails') return answer(res, 200, sent);
    const raw = await readBody(req);
    if (req.method !== 'POST' || req.url !== '/emails') return answer(res, 404, { statusCode: 404, name: 'not_found', message: 'The requested endpoint does not exist.' });
    requests++;
    if (options.latencyMs) await new Promise((r) => setTimeout(r, options.latencyMs));
    if (!/^Bearer \S+$/.test(String(req.headers.authorization ?? ''))) {
      rejected++;
      return answer(res, 401, { statusCode: 401, name: 'missing_api_key', message: 'Missing API key in the authorization header.' });
    }
    let body: Record<string, unknown>;
    try {
      const parsed: unknown = JSON.parse(raw || '{}');
      if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) throw new Error('not an object');
      body = parsed as Record<string, unknown>;
    } catch {
      rejected++;
      return answer(res, 400, { statusCode: 400, name: 'validation_error', message: 'Invalid JSON body.' });
    }
    const headerKey = req.headers['idempotency-key'];
    const key = typeof headerKey === 'string' ? headerKey : null;
    if (idempotency && key !== null && (key.length < 1 || key.length > 256)) {
      rejected++;
      return answer(res, 400, { statusCode: 400, name: 'invalid_idempotency_key', message: 'Idempotency keys, if present, must have between 1 and 256 characters.' });
    }
    const to = typeof body.to === 'string' ? [body.to] : Array.isArray(body.to) ? body.to.map(String) : [];
    // `from` is "address" or "Name <address>", as Resend takes it.
    const fromAddress = typeof body.from === 'string' ? (/<([^<>]+)>\s*$/.exec(body.from)?.[1] ?? body.from) : '';
    if (!EMAIL.test(fromAddress) || typeof body.subject !== 'string' || to.length === 0 || !to.every((t) => EMAIL.test(t))) {
      rejected++;
      return answer(res, 400, { statusCode: 400, name: 'validation_error', message: 'from, to (valid addresses) and subject are required.' });
    }
    const view: EmailRequestView = { idempotencyKey: key, body };
    const fingerprint = JSON.stringify([body.from, to, body.subject, body.text ?? null, body.html ?? null]);

    // Idempotency layer first (as Resend: a known key replays, whatever the faults would do).
    const useKey = idempotency && key !== null;
    if (useKey) {
      const known = keys.get(key);
      if (known && Date.now() - known.at < KEY_LIFETIME_MS) {
        if (known.fingerprint !== fingerprint) {
          return answer(res, 409, { statusCode: 409, name: 'invalid_idempotent_request', message: 'Same idempotency key used with a different request payload.' });
        }
        if (known.response === null) {
          return answer(res, 409, { statusCode: 409, name: 'concurrent_idempotent_requests', message: 'Same idempotency key used while original request is still in progress.' });
        }
        replays++;
        return answer(res, known.response.status, known.response.body);
      }
    }

    const fault = pickFault(view);
    if (fault === 'rateLimited') {
      faults.rateLimited++;
      return answer(res, 429, { statusCode: 429, name: 'rate_limit_exceeded', message: 'Too many requests.' });
    }
    if (fault === 'error500BeforeCommit') {
      faults.error500BeforeCommit++;
      return answer(res, 500, { statusCode: 500, name: 'application_error', message: 'An unexpected error occurred.' });
    }
    const entry: KeyEntry = { fingerprint, response: null, at: Date.now() };
    if (useKey) keys.set(key, entry);
    if ((await options.onRequest?.(view, 'before-commit')) === 'abort') {
      if (useKey) keys.delete(key);
      req.socket.destroy();
      return;
    }
    const email: SentEmail = {
      id: randomUUID(),
      from: String(body.from),
      to,
      subject: body.subject,
      text: typeof body.text === 'string' ? body.text : '',
      idempotencyKey: key,
      sentAt: new Date(),
    };
    sent.push(email);
    // Resend stores the first response for the key; a 500 after sending is NOT what it stores (the
    // mail was sent): a retry with the key gets the success.
    entry.response = { status: 200, body: { id: email.id } };
    await options.onRequest?.(view, 'after-commit');
    if (fault === 'lostResponse') {
      faults.lostResponse++;
      req.socket.destroy();
      return;
    }
    if (fault === 'error500AfterCommit') {
      faults.error500AfterCommit++;
      return answer(res, 500, { statusCode: 500, name: 'application_error', message: 'An unexpected error occurred.' });
    }
    answer(res, 200, { id: email.id });
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  return {
    url: `http://127.0.0.1:${port}`,
    idempotency,
    sent: () => sent.map((e) => ({ ...e })),
    stats: () => ({ requests, sent: sent.length, replays, faults: { ...faults }, rejected }),
    injectFault(kind, o = {}) {
      scripted.push({ kind, left: o.times ?? 1, ...(o.match ? { match: o.match } : {}) });
    },
    forgetKeys() {
      keys = new Map();
    },
    reset() {
      sent = [];
      keys = new Map();
      scripted = [];
      requests = replays = rejected = 0;
      for (const k of EMAIL_FAULT_KINDS) faults[k] = 0;
      random = mulberry32(options.faultRates?.seed ?? 1);
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        for (const socket of sockets) socket.destroy();
      }),
  };
}

function answer(res: http.ServerResponse, status: number, body: unknown): void {
  if (res.destroyed) return;
  const text = JSON.stringify(body);
  res.writeHead(status, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(text) });
  res.end(text);
}

async function readBody(req: http.IncomingMessage): Promise<string> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > 1024 * 1024) break;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks).toString('utf8');
}
