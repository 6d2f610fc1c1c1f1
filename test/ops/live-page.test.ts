// `npm run ops -- ui`: the live page's server over the ops commands, against a test database and the
// fake Stripe (the page itself is driven in a browser by test/local/live-page.test.ts). Its figures
// are the commands' own; read-only unless --allow-actions; a write needs the page's origin and the
// confirmation, and is audited exactly as the same command from the CLI.
import http from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { parseUiArgs, startOpsUi, type UiOptions } from '../../lambdas/ops/live-page/cli.ts';
import { actionArgv, commandLine, parseActionRequest, PageRequestError, type PageState } from '../../lambdas/ops/live-page/model.ts';
import { createTestDatabase } from '../support/db.ts';
import { startStripe } from '../support/stripe.ts';
import { auditEvents, cli, cliJson, intoReviewNothingCharged, opsEnv, resultOf, type Harness } from './support.ts';

let h: Harness;
let env: NodeJS.ProcessEnv;

beforeAll(async () => {
  h = { db: await createTestDatabase('ops_live_page'), stripe: await startStripe() };
  env = opsEnv(h);
});
afterAll(async () => {
  await h.stripe.close();
  await h.db.drop();
});

const options = (argv: string[]) => parseUiArgs(argv) as UiOptions;

async function post(url: string, body: unknown, origin: string | null = new URL(url).origin) {
  const res = await fetch(new URL('/api/actions', url), { method: 'POST', headers: { 'Content-Type': 'application/json', ...(origin ? { Origin: origin } : {}) }, body: JSON.stringify(body) });
  return { status: res.status, body: (await res.json()) as Record<string, unknown> };
}

describe('ops ui', () => {
  it('parses its options; the transport options are the CLI’s', () => {
    expect(parseUiArgs(['--help'])).toBe('help');
    expect(options([])).toMatchObject({ port: 0, allowActions: false, actor: null, intervalMs: 1000, lambda: null });
    expect(options(['--lambda', 'charges-ops', '--region', 'eu-west-1', '--allow-actions'])).toMatchObject({ allowActions: true, intervalMs: 5000, transportArgv: ['--lambda', 'charges-ops', '--region', 'eu-west-1'] });
    expect(() => parseUiArgs(['--port', 'x'])).toThrow(/--port must be an integer/);
    expect(() => parseUiArgs(['--yes'])).toThrow(/Unknown option '--yes'/);
  });

  it('turns a page action into the CLI’s argv, and refuses one that was not confirmed', () => {
    const base = { operationId: '01a2b3c4-0000-4000-8000-000000000000', reason: 'TICKET-9: checked', confirmed: true };
    expect(actionArgv(parseActionRequest({ ...base, action: 'resolve', as: 'succeeded', proof: 'pi_123' }))).toEqual(['review', 'resolve', base.operationId, '--as', 'succeeded', '--payment-intent', 'pi_123', '--reason', base.reason]);
    expect(actionArgv(parseActionRequest({ ...base, action: 'resolve', as: 'succeeded', proof: 're_9' }))).toContain('--refund');
    expect(actionArgv(parseActionRequest({ ...base, action: 'reissue' }))).toEqual(['review', 'reissue', base.operationId, '--confirm-no-charge', '--reason', base.reason]);
    expect(commandLine(actionArgv(parseActionRequest({ ...base, action: 'note' })))).toBe(`npm run ops -- review note ${base.operationId} --reason 'TICKET-9: checked'`);
    expect(() => actionArgv(parseActionRequest({ ...base, action: 'note', confirmed: false }))).toThrow(PageRequestError);
    expect(() => parseActionRequest({ ...base, action: 'drop' })).toThrow(/action must be one of/);
  });

  it('shows what ops stats and ops review list show, and is read-only by default', async () => {
    const id = await intoReviewNothingCharged(h);
    const { page } = await startOpsUi(options([]), env);
    try {
      const state = (await (await fetch(new URL('/api/state', page.url))).json()) as PageState;
      const stats = resultOf((await cliJson(['stats'], env)).response, 'stats');
      const listed = resultOf((await cliJson(['review', 'list', '--limit', '200'], env)).response, 'review list');
      expect(state).toMatchObject({ mode: 'ops', actionsAllowed: false, flow: { queue: null, charges: stats.byKind.charge, refunds: stats.byKind.refund, review: { size: stats.review.size } } });
      expect(state.review.operations.map((o) => o.id)).toEqual(listed.operations.map((o) => o.id));
      expect(state.review.operations.map((o) => o.id)).toContain(id);
      // The timeline is operations show --stripe, with what Stripe holds.
      const timeline = (await (await fetch(new URL(`/api/timeline?key=${id}`, page.url))).json()) as { show: { ok: boolean; result: { auditTrail: { id: number }[] } }; stripe: { source: string; objects: unknown[] } };
      const shown = resultOf((await cliJson(['operations', 'show', id, '--stripe'], env)).response, 'operations show');
      expect(timeline.show.result.auditTrail.map((e) => e.id)).toEqual(shown.auditTrail.map((e) => e.id));
      expect(timeline.stripe).toMatchObject({ source: 'Stripe, as operations show --stripe reads it', objects: [] });
      const before = await auditEvents(h, id);
      expect(await post(page.url, { operationId: id, action: 'note', reason: 'x', confirmed: true })).toEqual({ status: 403, body: { error: 'read-only: this page was started without --allow-actions' } });
      expect(await auditEvents(h, id)).toHaveLength(before.length);
      // Another host name (DNS rebinding) is refused outright.
      // (fetch will not set Host: node:http does.)
      const status = await new Promise<number | undefined>((resolve, reject) =>
        http.get({ host: '127.0.0.1', port: page.port, path: '/api/state', headers: { Host: `evil.example:${page.port}` } }, (res) => resolve(res.resume().statusCode)).on('error', reject),
      );
      expect(status).toBe(421);
    } finally {
      await page.close();
    }
  });

  it('with --allow-actions: a confirmed write from the page is the CLI’s command, audited the same way', async () => {
    const [a, b] = [await intoReviewNothingCharged(h), await intoReviewNothingCharged(h)];
    const { page } = await startOpsUi(options(['--allow-actions', '--actor', 'pat']), env);
    try {
      const note = { operationId: a, action: 'note', reason: 'TICKET-7: looked at the dashboard', confirmed: true };
      // Not from the page's origin, or not confirmed: refused, nothing written.
      expect((await post(page.url, note, 'http://evil.example')).status).toBe(403);
      expect((await post(page.url, { ...note, confirmed: false })).status).toBe(400);
      // No reason: the CLI's own refusal.
      const noReason = await post(page.url, { ...note, reason: '' });
      expect(noReason.body.response).toMatchObject({ ok: false, exitCode: 2, error: { code: 'usage', message: expect.stringMatching(/--reason is required/) } });

      const byPage = await post(page.url, { operationId: a, action: 'resolve', as: 'failed', reason: 'TICKET-7: nothing at Stripe', confirmed: true });
      expect(byPage.status).toBe(200);
      expect(byPage.body.response).toMatchObject({ ok: true, command: 'review resolve' });
      const byCli = await cli(['review', 'resolve', b, '--as', 'failed', '--reason', 'TICKET-8: nothing at Stripe', '--actor', 'sam'], env);
      expect(byCli.code, byCli.stderr).toBe(0);
      const [pageRow, cliRow] = [(await auditEvents(h, a)).at(-1)!, (await auditEvents(h, b)).at(-1)!];
      const shape = (row: typeof pageRow) => ({ action: row.action, to: row.to_status, actorKind: row.actor.split(':')[0], fields: Object.keys(row.detail).sort(), command: row.detail.command, transport: row.detail.transport });
      expect(shape(pageRow)).toEqual(shape(cliRow));
      expect(pageRow).toMatchObject({ actor: 'operator:pat', detail: { reason: 'TICKET-7: nothing at Stripe', identity: { verified: false, claimed: 'pat', claimedFrom: '--actor' } } });
    } finally {
      await page.close();
    }
  });
});
