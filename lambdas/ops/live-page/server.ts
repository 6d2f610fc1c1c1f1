// The live page's HTTP server: plain node:http on 127.0.0.1, no framework. It serves the static page
// (page/index.html, page/app.js: hand-written, nothing to build), the state as JSON and as
// server-sent events (one refresh per interval, pushed to every open page), one operation's
// timeline, and — only when started with actions allowed — the review actions, each the ops command
// itself. The handlers are thin: the figures come from a LivePageSource, the rules from model.ts and
// the ops commands.
import { readFile } from 'node:fs/promises';
import http, { type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import path from 'node:path';
import { actionArgv, PageRequestError, parseActionRequest, type LivePageSource, type PageState } from './model.ts';

const PAGE_DIR = path.join(import.meta.dirname, 'page');
const STATIC: Readonly<Record<string, { file: string; type: string }>> = {
  '/': { file: 'index.html', type: 'text/html; charset=utf-8' },
  '/app.js': { file: 'app.js', type: 'text/javascript; charset=utf-8' },
};
const MAX_BODY_BYTES = 16_384;

export interface LivePageOptions {
  readonly source: LivePageSource;
  /** 0: any free port. */
  readonly port?: number;
  /** Review actions from the page (resolve, reissue, note); false: read-only. */
  readonly actionsAllowed: boolean;
  /** How often the state is read and pushed. Default 1000 ms. */
  readonly intervalMs?: number;
  /** A read that failed (the database went away): shown on the page, and told here. */
  readonly onError?: (error: unknown) => void;
}

export interface LivePage {
  readonly url: string;
  readonly port: number;
  /** The last state pushed (null before the first read). */
  latest(): PageState | null;
  close(): Promise<void>;
}

function send(res: ServerResponse, status: number, body: unknown): void {
  const text = JSON.stringify(body);
  res.writeHead(status, { 'Content-Type': 'application/json; charset=utf-8', 'Cache-Control': 'no-store' });
  res.end(text);
}

async function readBody(req: IncomingMessage): Promise<unknown> {
  let size = 0;
  const chunks: Buffer[] = [];
  for await (const chunk of req as AsyncIterable<Buffer>) {
    size += chunk.length;
    if (size > MAX_BODY_BYTES) throw new PageRequestError('the body is too large');
    chunks.push(chunk);
  }
  try {
    return JSON.parse(Buffer.concat(chunks).toString('utf8'));
  } catch {
    throw new PageRequestError('the body must be JSON');
  }
}

const message = (error: unknown) => (error instanceof Error ? error.message : String(error));

export async function startLivePage(options: LivePageOptions): Promise<LivePage> {
  const { source } = options;
  const clients = new Set<ServerResponse>();
  let latest: PageState | null = null;
  let lastError: string | null = null;
  let port = 0;

  // Only this page may call it: a write needs the page's own origin (no other site's form or fetch
  // can send one), and every request names this host (a DNS-rebinding name is refused).
  const sameHost = (req: IncomingMessage) => req.headers.host === `127.0.0.1:${port}` || req.headers.host === `localhost:${port}`;
  const sameOrigin = (req: IncomingMessage) => req.headers.origin === `http://127.0.0.1:${port}` || req.headers.origin === `http://localhost:${port}`;

  const withFlag = (state: PageState): PageState => ({ ...state, actionsAllowed: options.actionsAllowed });

  // One read at a time, shared by whoever asks meanwhile (the ticker, a first GET, a write's push):
  // a slow database is not asked twice, and through the ops Lambda the same command is never signed
  // twice in one second (the function refuses an identity proof it has seen).
  let reading: Promise<void> | null = null;
  const refresh = (): Promise<void> => (reading ??= read().finally(() => (reading = null)));
  const read = async (): Promise<void> => {
    try {
      latest = withFlag(await source.state());
      lastError = null;
      const frame = `event: state\ndata: ${JSON.stringify(latest)}\n\n`;
      for (const client of clients) client.write(frame);
    } catch (error) {
      lastError = message(error);
      options.onError?.(error);
      const frame = `event: problem\ndata: ${JSON.stringify({ message: lastError })}\n\n`;
      for (const client of clients) client.write(frame);
    }
  };

  const handle = async (req: IncomingMessage, res: ServerResponse): Promise<void> => {
    if (!sameHost(req)) return send(res, 421, { error: 'this server answers on 127.0.0.1 and localhost only' });
    const url = new URL(req.url ?? '/', `http://127.0.0.1:${port}`);
    const route = `${req.method} ${url.pathname}`;
    const page = STATIC[url.pathname];
    if (req.method === 'GET' && page) {
      const body = await readFile(path.join(PAGE_DIR, page.file));
      res.writeHead(200, {
        'Content-Type': page.type,
        'Cache-Control': 'no-store',
        'Content-Security-Policy': "default-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:",
        'X-Content-Type-Options': 'nosniff',
      });
      return void res.end(body);
    }
    switch (route) {
      case 'GET /api/state':
        if (!latest) await refresh();
        return latest ? send(res, 200, latest) : send(res, 503, { error: lastError ?? 'no state yet' });
      case 'GET /api/events': {
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store', Connection: 'keep-alive' });
        res.write('retry: 2000\n\n');
        if (latest) res.write(`event: state\ndata: ${JSON.stringify(latest)}\n\n`);
        clients.add(res);
        req.on('close', () => clients.delete(res));
        return;
      }
      case 'GET /api/timeline': {
        const key = url.searchParams.get('key')?.trim() ?? '';
        if (!key) return send(res, 400, { error: 'key (an order id or an operation id) is required' });
        return send(res, 200, await source.timeline(key));
      }
      case 'POST /api/actions': {
        if (!sameOrigin(req)) return send(res, 403, { error: 'a write must come from this page' });
        if (!options.actionsAllowed) return send(res, 403, { error: 'read-only: this page was started without --allow-actions' });
        let argv: string[];
        try {
          argv = actionArgv(parseActionRequest(await readBody(req)));
        } catch (error) {
          if (error instanceof PageRequestError) return send(res, 400, { error: error.message });
          throw error;
        }
        const response = await source.act(argv);
        // The queue and the counts change with it: push at once rather than at the next tick.
        void refresh();
        return send(res, 200, { argv, response });
      }
      default:
        return send(res, 404, { error: `no such page: ${route}` });
    }
  };

  const server = http.createServer((req, res) => {
    handle(req, res).catch((error: unknown) => {
      options.onError?.(error);
      if (!res.headersSent) send(res, 502, { error: message(error) });
      else res.end();
    });
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(options.port ?? 0, '127.0.0.1', () => resolve());
  });
  port = (server.address() as AddressInfo).port;

  let stopped = false;
  let ticking: Promise<void> = refresh();
  const timer = setInterval(() => {
    if (!stopped) ticking = refresh();
  }, options.intervalMs ?? 1_000);
  timer.unref();

  return {
    url: `http://127.0.0.1:${port}/`,
    port,
    latest: () => latest,
    close: async () => {
      stopped = true;
      clearInterval(timer);
      for (const client of clients) client.end();
      clients.clear();
      await ticking.catch(() => undefined);
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
      await source.close();
    },
  };
}
