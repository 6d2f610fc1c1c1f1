// The live page in a real browser (Debian's chromium driven by playwright-core): a small local run
// with faults that send a few charges to review, the page open while it runs. The page's counts
// reach the ledger's; its review queue is what `ops review list` lists; one operation's timeline is
// what `ops operations show` shows beside the fake Stripe's own record; an operation resolved from
// the page (reason, confirmation) leaves an audit row of the same shape as one resolved with the
// CLI; and a page started without actions refuses them. No durations are asserted: every wait is
// for a condition, with a generous bound.
import { accessSync, constants } from 'node:fs';
import path from 'node:path';
import { chromium, type Browser, type Page } from 'playwright-core';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildWorkload, runWorkload, type WorkloadRun } from '../../local/demo.ts';
import { localOpsEnv, startLocalLivePage } from '../../local/live-page.ts';
import type { Pipeline } from '../../local/pipeline.ts';
import type { LivePage } from '../../lambdas/ops/live-page/server.ts';
import { cliJson, resultOf } from '../ops/support.ts';
import { startTestPipeline } from './support.ts';

/**
 * CHROMIUM_PATH when set (and only it), else the first chromium on PATH (Debian's package installs
 * /usr/bin/chromium), as `command -v chromium` finds it. None: the test fails, saying what to install.
 */
function findChromium(): string {
  const set = process.env.CHROMIUM_PATH;
  const candidates = set
    ? [set]
    : (process.env.PATH ?? '').split(path.delimiter).flatMap((dir) => (dir ? [path.join(dir, 'chromium'), path.join(dir, 'chromium-browser')] : []));
  for (const candidate of candidates) {
    try {
      accessSync(candidate, constants.X_OK);
      return candidate;
    } catch {
      // not this one
    }
  }
  throw new Error(
    `no Chromium found for the live page test${set ? ` at CHROMIUM_PATH=${set}` : ' on PATH'}: apt-get install chromium (or set CHROMIUM_PATH to a Chromium binary)`,
  );
}

const ORDERS = 40;

/** Charges and refunds with an end state (succeeded, failed, in review), by the ledger. */
const settledOf = (ledger: WorkloadRun['ledger']) =>
  [ledger.operations, ledger.refunds.operations].reduce((sum, o) => sum + o.succeeded + o.failed + o.inReview, 0);
/** Charges whose first create meets a 500 before Stripe executed it: under AMBIGUOUS_RESOLUTION=review they end in review. */
const FAULTED = 3;

describe('the live page of a local run, in a real browser', () => {
  let pipeline: Pipeline;
  let live: LivePage;
  let browser: Browser;
  let page: Page;
  let run: WorkloadRun;
  let env: NodeJS.ProcessEnv;

  /** No browser: every test below FAILS with it (a failing hook would only mark them skipped). */
  let missing: Error | null = null;

  beforeAll(async () => {
    let executablePath: string;
    try {
      executablePath = findChromium();
    } catch (error) {
      missing = error as Error;
      return;
    }
    pipeline = await startTestPipeline({
      stripe: { kind: 'fake', faults: 'none', seed: 7 },
      pollers: 4,
      // A create that met a 500 before commit: Search after the key window finds nothing, and a person decides.
      env: { AMBIGUOUS_RESOLUTION: 'review' },
    });
    env = localOpsEnv(pipeline);
    live = await startLocalLivePage(pipeline, { actionsAllowed: true, actor: 'page-operator', env });
    browser = await chromium.launch({ executablePath, args: ['--no-sandbox'] });
    page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    await page.goto(live.url);
  }, 60_000);

  afterAll(async () => {
    await browser?.close();
    await live?.close();
    await pipeline?.stop();
  }, 60_000);

  it('follows the run, lists the review queue, shows a timeline and resolves from the page as the CLI does', async () => {
    if (missing) throw missing;
    const workload = buildWorkload({ orders: ORDERS, duplicates: 0.3, refunds: 0.1, duplicateCharges: 0, seed: 7, tag: 'e2e-page', processing: false });
    const refunded = new Set(workload.refunds.map((r) => r.orderId));
    const faulted = workload.orders.filter((o) => !refunded.has(o.orderId)).slice(0, FAULTED).map((o) => o.orderId);
    for (const orderId of faulted) pipeline.fakeStripe!.injectFault({ orderId, endpoint: 'create' }, 'error_500_before_commit');

    // The page is open and live while the run goes (server-sent events, no reload).
    run = await runWorkload(pipeline, workload, { timeoutMs: 80_000 });
    expect(run.outcome).toBe('settled');
    const { ledger } = run;
    expect(ledger.invariants.violations).toEqual([]);
    expect(ledger.operations.inReview).toBeGreaterThanOrEqual(2);

    // The counts reach the ledger's and stay there.
    const cell = (id: string) => page.locator(`#${id}`).textContent();
    const expected: Record<string, number> = {
      'charge-succeeded': ledger.operations.succeeded,
      'charge-failed': ledger.operations.failed,
      'charge-inReview': ledger.operations.inReview,
      'charge-total': ledger.operations.total,
      'refund-succeeded': ledger.refunds.operations.succeeded,
      'refund-failed': ledger.refunds.operations.failed,
      'refund-inReview': ledger.refunds.operations.inReview,
      'refund-total': ledger.refunds.operations.total,
      'queue-waiting': 0,
      'outbox-unpublished': ledger.events.unpublished,
    };
    await expect.poll(async () => Object.fromEntries(await Promise.all(Object.keys(expected).map(async (id) => [id, Number(await cell(id))]))), { timeout: 20_000 }).toEqual(expected);
    // The charts drew something, with their figures as text.
    expect(await page.locator('#chart-rate svg polyline').count()).toBe(1);
    expect(await page.locator('#chart-rate svg').getAttribute('aria-label')).toMatch(new RegExp(`; ${settledOf(ledger)} settled in all$`));
    expect(await page.locator('#chart-faults svg').getAttribute('aria-label')).toMatch(/error_500_before_commit [1-9]/);

    // The review queue: what `ops review list` lists, in its order.
    const listed = resultOf((await cliJson(['review', 'list'], env)).response, 'review list');
    expect(listed.operations.map((o) => o.orderId).sort()).toEqual(expect.arrayContaining(faulted));
    const rows = () => page.locator('#review-table tbody tr').evaluateAll((trs) => trs.map((tr) => tr.getAttribute('data-operation-id')));
    await expect.poll(rows, { timeout: 10_000 }).toEqual(listed.operations.map((o) => o.id));
    const first = listed.operations[0]!;
    expect(await page.locator(`#review-table tr[data-operation-id="${first.id}"]`).textContent()).toContain(first.reviewReason!);

    // One operation's timeline, opened from the queue with the keyboard: its audit trail is `ops operations show`'s.
    await page.getByRole('button', { name: `Open the timeline of ${first.orderId} (${first.kind})` }).focus();
    await page.keyboard.press('Enter');
    await page.locator(`#timeline-title[data-operation-id="${first.id}"]`).waitFor({ timeout: 10_000 });
    const shown = resultOf((await cliJson(['operations', 'show', first.id], env)).response, 'operations show');
    const trail = () => page.locator('#trail li').evaluateAll((lis) => lis.map((li) => [Number(li.getAttribute('data-event-id')), li.querySelector('strong')!.textContent]));
    expect(await trail()).toEqual(shown.auditTrail.map((e) => [e.id, e.action]));
    // Beside it, the fake Stripe's own record: nothing was executed for this operation.
    expect(await page.locator('#stripe-source').textContent()).toMatch(/fake Stripe's own record/);
    expect(pipeline.fakeStripe!.paymentIntents({ operationId: first.id })).toEqual([]);
    expect(await page.locator('#stripe-objects').textContent()).toBe('Nothing.');

    // Resolve it from the page: a reason, then the confirmation step showing the CLI's command.
    await page.getByLabel('Resolve as failed').check();
    await page.getByLabel(/^Reason/).fill('page: fake shows no PaymentIntent for the operation');
    await page.getByRole('button', { name: 'Review the command…' }).click();
    await expect.poll(() => page.locator('#confirm-command').textContent()).toContain(`review resolve ${first.id} --as failed --reason`);
    await page.getByRole('button', { name: 'Confirm and run' }).click();
    await expect.poll(() => page.locator('#action-result').textContent(), { timeout: 20_000 }).toMatch(/^Done: review resolve — audit event #\d+ operator_resolved by operator:page-operator/);

    // Another resolved with the CLI: the two audit rows have the same shape.
    const second = listed.operations[1]!;
    const byCli = await cliJson(['review', 'resolve', second.id, '--as', 'failed', '--reason', 'cli: fake shows no PaymentIntent for the operation', '--actor', 'cli-operator'], env);
    expect(byCli.code, JSON.stringify(byCli.response)).toBe(0);
    const lastRow = async (id: string) =>
      (await pipeline.db.query<{ actor: string; action: string; to_status: string; detail: Record<string, unknown> }>('SELECT actor, action, to_status, detail FROM payment_operation_events WHERE operation_id = $1 ORDER BY id DESC LIMIT 1', [id])).rows[0]!;
    const fromPage = await lastRow(first.id);
    const fromCli = await lastRow(second.id);
    const shape = (row: typeof fromPage) => ({
      actorKind: row.actor.split(':')[0],
      action: row.action,
      toStatus: row.to_status,
      detailFields: Object.keys(row.detail).sort(),
      evidenceFields: Object.keys(row.detail.evidence as object).sort(),
      reviewedFields: Object.keys(row.detail.reviewed as object).sort(),
      command: row.detail.command,
      transport: (row.detail.transport as { kind: string }).kind,
      identity: row.detail.identity,
    });
    expect(shape(fromPage)).toEqual({ ...shape(fromCli), identity: { verified: false, claimed: 'page-operator', claimedFrom: '--actor' } });
    expect(shape(fromCli).identity).toEqual({ verified: false, claimed: 'cli-operator', claimedFrom: '--actor' });
    expect(fromPage).toMatchObject({ actor: 'operator:page-operator', action: 'operator_resolved', to_status: 'failed', detail: { reason: 'page: fake shows no PaymentIntent for the operation' } });
    // The page's timeline shows the new row, and the queue no longer lists the operation.
    await expect.poll(() => page.locator('#trail li strong').last().textContent(), { timeout: 10_000 }).toBe('operator_resolved');
    await expect.poll(rows, { timeout: 10_000 }).not.toContain(first.id);

    // `npm run screenshot:ui` (docs/images/live-page.png): the page with an item still in review open.
    const shot = process.env.LIVE_PAGE_SCREENSHOT;
    const open = listed.operations[2];
    if (shot && open) {
      await page.getByRole('button', { name: `Open the timeline of ${open.orderId} (${open.kind})` }).click();
      await page.locator(`#timeline-title[data-operation-id="${open.id}"]`).waitFor({ timeout: 10_000 });
      await page.locator('#action-reason').fill('TICKET-42: the dashboard shows no PaymentIntent');
      await page.screenshot({ path: shot, fullPage: true, clip: { x: 0, y: 0, width: 1280, height: 1900 } });
    }
  }, 110_000);

  it('started without actions, says so and refuses a write', async () => {
    if (missing) throw missing;
    const readOnly = await startLocalLivePage(pipeline, { actionsAllowed: false, env });
    try {
      const tab = await browser.newPage();
      await tab.goto(readOnly.url);
      await expect.poll(() => tab.locator('#mode-banner').textContent(), { timeout: 10_000 }).toMatch(/^Read-only — started without --allow-actions/);
      const left = resultOf((await cliJson(['review', 'list'], env)).response, 'review list').operations[0];
      expect(left, 'an operation still in review').toBeDefined();
      await tab.getByRole('button', { name: `Open the timeline of ${left!.orderId} (${left!.kind})` }).click();
      await tab.locator('#action-readonly').waitFor({ state: 'visible', timeout: 10_000 });
      expect(await tab.locator('#action-form').isHidden()).toBe(true);
      // The server refuses it too, whatever the page shows.
      const answer = await tab.evaluate(async (id) => {
        const res = await fetch('/api/actions', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ operationId: id, action: 'note', reason: 'x', confirmed: true }) });
        return { status: res.status, body: (await res.json()) as { error: string } };
      }, left!.id);
      expect(answer).toEqual({ status: 403, body: { error: 'read-only: this page was started without --allow-actions' } });
      await tab.close();
    } finally {
      await readOnly.close();
    }
  }, 60_000);
});
