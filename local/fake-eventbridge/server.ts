// A local PutEvents endpoint for the REAL @aws-sdk/client-eventbridge (no maintained EventBridge
// emulator exists on npm). It speaks the AWS JSON 1.1 protocol (POST /, `X-Amz-Target:
// AWSEvents.PutEvents`), validates like EventBridge, records what it accepts, and fails on demand the
// three ways that matter to an outbox relay:
//
//   failEntries   200 with some entries failed (ErrorCode per entry): the SDK does NOT retry these; the
//                 caller must resend exactly those entries.
//   callError     500 InternalException for the whole call, nothing accepted: the SDK retries the
//                 call by itself (maxAttempts, 3 by default), so one fault = one failed attempt.
//   dropResponse  accept and record the events, then destroy the socket without answering: the
//                 caller cannot know they were accepted, and resending duplicates them (which is why
//                 every outcome event carries a stable eventId in its detail).
//
// Not emulated: rules, targets, archives, authentication (any signature is accepted), and the
// per-account PutEvents rate limit. Only PutEvents is implemented.
import { randomUUID } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { mulberry32 } from '../random.ts';

/** EventBridge's documented limit on the summed entry sizes of one PutEvents call. */
export const MAX_PUT_EVENTS_BYTES = 262_144;
export const MAX_PUT_EVENTS_ENTRIES = 10;

/** An entry as it arrived (wire field names), for fault predicates. */
export interface PutEventsEntryView {
  readonly index: number;
  readonly source: unknown;
  readonly detailType: unknown;
  readonly eventBusName: unknown;
  /** The parsed Detail when it is valid JSON, else undefined. */
  readonly detail: unknown;
  readonly raw: Readonly<Record<string, unknown>>;
}

export interface RecordedEvent {
  readonly eventId: string;
  readonly eventBusName: string;
  readonly source: string;
  readonly detailType: string;
  readonly detail: unknown;
  readonly rawDetail: string;
  readonly resources: readonly string[];
  /** The entry's own Time, when it set one. */
  readonly time?: Date;
  /** The PutEvents call it came in (RecordedCall.id) and its position there. */
  readonly callId: number;
  readonly entryIndex: number;
  readonly receivedAt: Date;
}

export type CallOutcome =
  | 'accepted' // every entry recorded
  | 'partial' // 200, some entries failed
  | 'rejected' // 4xx: the request was invalid, nothing recorded
  | 'error' // injected 5xx (or other whole-call error), nothing recorded
  | 'dropped'; // entries recorded, then the connection was destroyed without an answer

export interface RecordedCall {
  readonly id: number;
  readonly operation: string;
  readonly receivedAt: Date;
  readonly entryCount: number;
  readonly outcome: CallOutcome;
  /** HTTP status answered; 0 when the response was dropped. */
  readonly status: number;
  readonly errorCode?: string;
  readonly failedEntryCount: number;
  /** EventIds of the entries accepted by this call. */
  readonly eventIds: readonly string[];
}

export type Fault =
  | {
      readonly kind: 'failEntries';
      /** Which entries fail: by predicate, by index in the call, or (neither given) all of them. */
      readonly match?: (entry: PutEventsEntryView) => boolean;
      readonly indexes?: readonly number[];
      /** Default 'InternalFailure'; 'ThrottlingException' is the other one EventBridge returns. */
      readonly errorCode?: string;
      readonly errorMessage?: string;
      /** Calls affected (a call counts when at least one of its entries matched); default 1. */
      readonly times?: number;
    }
  | {
      readonly kind: 'callError';
      /** Default 500 / 'InternalException'. A 400 'ThrottlingException' is also useful. */
      readonly status?: number;
      readonly code?: string;
      readonly message?: string;
      readonly times?: number;
    }
  | { readonly kind: 'dropResponse'; readonly times?: number };

export interface FaultHandle {
  /** Calls this fault will still affect. */
  readonly remaining: () => number;
  readonly cancel: () => void;
}

export interface FaultRates {
  /** Seed of the PRNG: the same seed and the same calls give the same faults. Default 1. */
  readonly seed?: number;
  /** Probability that an otherwise valid entry fails. */
  readonly entryFailure?: number;
  /** Probability that a valid call answers 500 InternalException. */
  readonly callError?: number;
  /** Probability that a call is accepted and its response dropped. */
  readonly dropResponse?: number;
  /** Codes drawn for failed entries; default ['InternalFailure', 'ThrottlingException']. */
  readonly entryErrorCodes?: readonly string[];
}

export interface FakeEventBridgeOptions {
  /** Default 0 (any free port). */
  readonly port?: number;
  /** Default '127.0.0.1'. */
  readonly host?: string;
  /**
   * Default true: an entry without EventBusName fails with InvalidArgument. Deliberately stricter than
   * AWS, which would put it on the account's `default` bus, where no rule of ours would ever see it.
   */
  readonly requireEventBusName?: boolean;
  readonly faultRates?: FaultRates;
  /** Called after each call is answered (or dropped); the CLI logs with it. */
  readonly onCall?: (call: RecordedCall, events: readonly RecordedEvent[]) => void;
}

export interface FakeEventBridge {
  /** `http://127.0.0.1:<port>`: the EventBridgeClient `endpoint`. */
  readonly url: string;
  readonly port: number;
  /** Accepted events, oldest first (copies). */
  events(): RecordedEvent[];
  calls(): RecordedCall[];
  injectFault(fault: Fault): FaultHandle;
  /** Replace the random faults; `null` turns them off. Restarts the PRNG from the seed. */
  setFaultRates(rates: FaultRates | null): void;
  /** Forget events, calls, scripted faults and rates. Call ids keep counting, so they stay unique. */
  reset(): void;
  close(): Promise<void>;
}

/** Entry size as EventBridge documents it: Time 14 bytes; Source, DetailType, Detail, each Resource in UTF-8. */
export function putEventsEntrySize(entry: Readonly<Record<string, unknown>>): number {
  const bytes = (v: unknown) => (typeof v === 'string' ? Buffer.byteLength(v, 'utf8') : 0);
  let size = entry.Time === undefined || entry.Time === null ? 0 : 14;
  size += bytes(entry.Source) + bytes(entry.DetailType) + bytes(entry.Detail);
  if (Array.isArray(entry.Resources)) for (const r of entry.Resources) size += bytes(r);
  return size;
}

interface ActiveFault {
  readonly fault: Fault;
  left: number;
}

/** Request bodies above this are refused before parsing (a guard, far above any valid PutEvents). */
const MAX_BODY_BYTES = 8 * 1024 * 1024;

export async function startFakeEventBridge(options: FakeEventBridgeOptions = {}): Promise<FakeEventBridge> {
  const requireBus = options.requireEventBusName ?? true;
  let events: RecordedEvent[] = [];
  let calls: RecordedCall[] = [];
  let faults: ActiveFault[] = [];
  let rates: FaultRates | null = null;
  let random: () => number = () => 1;
  let nextCallId = 1;
  const sockets = new Set<Socket>();

  const setRates = (next: FaultRates | null) => {
    rates = next;
    random = mulberry32(next?.seed ?? 1);
  };
  setRates(options.faultRates ?? null);

  /** The first scripted fault of this kind with calls left; consumes one call. */
  const takeCallFault = <K extends 'callError' | 'dropResponse'>(kind: K) => {
    const active = faults.find((f) => f.fault.kind === kind && f.left > 0);
    if (!active) return undefined;
    active.left--;
    return active.fault as Extract<Fault, { kind: K }>;
  };

  const record = (call: RecordedCall, accepted: readonly RecordedEvent[]) => {
    calls.push(call);
    options.onCall?.(call, accepted);
  };

  const server = http.createServer((req, res) => {
    void handle(req, res).catch((error: unknown) => {
      if (!res.headersSent) sendJson(res, 500, { __type: 'InternalException', message: String(error) }, 'InternalException');
    });
  });
  server.on('connection', (socket) => {
    sockets.add(socket);
    socket.on('close', () => sockets.delete(socket));
  });

  async function handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const receivedAt = new Date();
    // Read-only inspection for other processes (the local runtime's ledger, a curious human).
    if (req.method === 'GET' && (req.url === '/_fake/events' || req.url === '/_fake/calls')) {
      sendJson(res, 200, req.url === '/_fake/events' ? events : calls);
      return;
    }
    const body = await readBody(req);
    const target = String(req.headers['x-amz-target'] ?? '');
    const operation = target.startsWith('AWSEvents.') ? target.slice('AWSEvents.'.length) : target || '(none)';
    const id = nextCallId++;
    const reject = (status: number, code: string, message: string, entryCount = 0) => {
      sendJson(res, status, { __type: code, message }, code);
      record({ id, receivedAt, operation, entryCount, outcome: 'rejected', status, errorCode: code, failedEntryCount: 0, eventIds: [] }, []);
    };

    if (req.method !== 'POST' || operation !== 'PutEvents') {
      reject(400, 'UnknownOperationException', `Operation ${operation} is not supported by the fake EventBridge`);
      return;
    }
    if (body === undefined) {
      reject(413, 'ValidationException', 'Request body too large');
      return;
    }
    let input: unknown;
    try {
      input = JSON.parse(body.toString('utf8') || '{}');
    } catch {
      reject(400, 'SerializationException', 'Request body is not valid JSON');
      return;
    }
    const entries = (input as { Entries?: unknown }).Entries;
    if (!Array.isArray(entries) || entries.length < 1 || entries.length > MAX_PUT_EVENTS_ENTRIES) {
      const n = Array.isArray(entries) ? entries.length : 0;
      // The message EventBridge gives for a constraint on the Entries list.
      reject(
        400,
        'ValidationException',
        `1 validation error detected: Value at 'entries' failed to satisfy constraint: Member must have length ${n < 1 ? 'greater than or equal to 1' : `less than or equal to ${MAX_PUT_EVENTS_ENTRIES}`}`,
        n,
      );
      return;
    }
    const raws = entries.map((e): Record<string, unknown> => (typeof e === 'object' && e !== null ? (e as Record<string, unknown>) : {}));
    const total = raws.reduce((sum, e) => sum + putEventsEntrySize(e), 0);
    if (total > MAX_PUT_EVENTS_BYTES) {
      reject(400, 'ValidationException', 'Total size of the entries in the request is over the limit.', raws.length);
      return;
    }

    // Whole-call error: nothing is recorded, as when EventBridge fails before accepting anything.
    const callFault = takeCallFault('callError') ?? (rates?.callError && random() < rates.callError ? { kind: 'callError' as const } : undefined);
    if (callFault) {
      const status = callFault.status ?? 500;
      const code = callFault.code ?? 'InternalException';
      sendJson(res, status, { __type: code, message: callFault.message ?? 'Injected failure' }, code);
      record({ id, receivedAt, operation, entryCount: raws.length, outcome: 'error', status, errorCode: code, failedEntryCount: 0, eventIds: [] }, []);
      return;
    }

    const views = raws.map((raw, index): PutEventsEntryView => ({
      index,
      source: raw.Source,
      detailType: raw.DetailType,
      eventBusName: raw.EventBusName,
      detail: tryParse(raw.Detail),
      raw,
    }));
    const entryFaults = faults.filter((f) => f.fault.kind === 'failEntries' && f.left > 0);
    const matchedBy = new Set<ActiveFault>();
    const accepted: RecordedEvent[] = [];
    const results = views.map((view): { EventId: string } | { ErrorCode: string; ErrorMessage: string } => {
      const invalid = validateEntry(view, requireBus);
      if (invalid) return invalid;
      for (const active of entryFaults) {
        const f = active.fault as Extract<Fault, { kind: 'failEntries' }>;
        const hit = f.match ? f.match(view) : f.indexes ? f.indexes.includes(view.index) : true;
        if (hit && (!f.indexes || f.indexes.includes(view.index))) {
          matchedBy.add(active);
          return { ErrorCode: f.errorCode ?? 'InternalFailure', ErrorMessage: f.errorMessage ?? 'Injected entry failure' };
        }
      }
      if (rates?.entryFailure && random() < rates.entryFailure) {
        const codes = rates.entryErrorCodes ?? ['InternalFailure', 'ThrottlingException'];
        const code = codes[Math.floor(random() * codes.length)] ?? 'InternalFailure';
        return { ErrorCode: code, ErrorMessage: 'Injected entry failure' };
      }
      const event: RecordedEvent = {
        eventId: randomUUID(),
        eventBusName: String(view.eventBusName ?? 'default'),
        source: String(view.source),
        detailType: String(view.detailType),
        detail: view.detail,
        rawDetail: String(view.raw.Detail),
        resources: Array.isArray(view.raw.Resources) ? view.raw.Resources.map(String) : [],
        ...(view.raw.Time === undefined || view.raw.Time === null ? {} : { time: toDate(view.raw.Time) }),
        callId: id,
        entryIndex: view.index,
        receivedAt,
      };
      accepted.push(event);
      return { EventId: event.eventId };
    });
    for (const active of matchedBy) active.left--;
    events.push(...accepted);
    const failedEntryCount = results.filter((r) => 'ErrorCode' in r).length;
    const eventIds = accepted.map((e) => e.eventId);

    const drop = takeCallFault('dropResponse') ?? (rates?.dropResponse && random() < rates.dropResponse ? { kind: 'dropResponse' as const } : undefined);
    if (drop) {
      // Accepted and recorded; the caller only sees its connection die.
      record({ id, receivedAt, operation, entryCount: raws.length, outcome: 'dropped', status: 0, failedEntryCount, eventIds }, accepted);
      req.socket.destroy();
      return;
    }
    sendJson(res, 200, { FailedEntryCount: failedEntryCount, Entries: results });
    record(
      { id, receivedAt, operation, entryCount: raws.length, outcome: failedEntryCount > 0 ? 'partial' : 'accepted', status: 200, failedEntryCount, eventIds },
      accepted,
    );
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, options.host ?? '127.0.0.1', () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = options.host ?? '127.0.0.1';

  return {
    url: `http://${host.includes(':') ? `[${host}]` : host}:${port}`,
    port,
    events: () => events.map((e) => ({ ...e })),
    calls: () => calls.map((c) => ({ ...c })),
    injectFault(fault) {
      const active: ActiveFault = { fault, left: fault.times ?? 1 };
      faults.push(active);
      return {
        remaining: () => active.left,
        cancel: () => {
          active.left = 0;
        },
      };
    },
    setFaultRates: setRates,
    reset() {
      events = [];
      calls = [];
      faults = [];
      setRates(null);
    },
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
        // Keep-alive sockets of SDK clients would hold close() open.
        for (const socket of sockets) socket.destroy();
      }),
  };
}

/** The per-entry checks EventBridge makes; a bad entry fails alone, the others still go through. */
function validateEntry(view: PutEventsEntryView, requireBus: boolean): { ErrorCode: string; ErrorMessage: string } | undefined {
  const required = (name: string, value: unknown) =>
    typeof value === 'string' && value !== ''
      ? undefined
      : { ErrorCode: 'InvalidArgument', ErrorMessage: `Parameter ${name} is not valid. Reason: ${name} is a required argument.` };
  const missing =
    required('Source', view.source) ??
    required('DetailType', view.detailType) ??
    required('Detail', view.raw.Detail) ??
    (requireBus ? required('EventBusName', view.eventBusName) : undefined);
  if (missing) return missing;
  // Detail must be a JSON object: not an array, a string or a number.
  if (typeof view.detail !== 'object' || view.detail === null || Array.isArray(view.detail)) {
    return { ErrorCode: 'MalformedDetail', ErrorMessage: 'Detail is malformed.' };
  }
  return undefined;
}

function tryParse(value: unknown): unknown {
  if (typeof value !== 'string') return undefined;
  try {
    return JSON.parse(value);
  } catch {
    return undefined;
  }
}

/** The SDK sends Time as epoch seconds in JSON 1.1; accept ISO strings too. */
function toDate(value: unknown): Date {
  return typeof value === 'number' ? new Date(value * 1000) : new Date(String(value));
}

async function readBody(req: http.IncomingMessage): Promise<Buffer | undefined> {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size > MAX_BODY_BYTES) return undefined;
    chunks.push(chunk as Buffer);
  }
  return Buffer.concat(chunks);
}

function sendJson(res: http.ServerResponse, status: number, body: unknown, errorType?: string): void {
  const text = JSON.stringify(body);
  res.writeHead(status, {
    'content-type': 'application/x-amz-json-1.1',
    'content-length': Buffer.byteLength(text),
    'x-amzn-requestid': randomUUID(),
    ...(errorType ? { 'x-amzn-errortype': errorType } : {}),
  });
  res.end(text);
}
