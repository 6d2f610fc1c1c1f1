// Retention after the chaos soak: the soak's own data (Stripe events on, refunds, duplicates, rejected
// and poison messages, kills and database crashes), a third of its orders moved 100 days into the past
// (past every bound), a third 10 days (past the inbox payload bound, inside the others), a third left
// as it is; then one retention run as the application role with the default bounds and a clock
// advanced half a day. Exactly what is past each bound is gone, everything inside is untouched, the
// soak's invariant checker still finds nothing (told where retention cut the outbox), and a Stripe
// event redelivered after its payload was removed is a duplicate at the real webhook endpoint —
// answered 2xx, applied once.
//
// Why rows are moved and not only the clock: the lifecycle functions and the guards compare with the
// database's own clock (migration 017), so no `now` a caller passes makes a row written minutes ago
// due — by design. The move is explicit (test/lifecycle/support.ts ageRows: every time column of an
// order's rows, its outbox event ids re-made as uuidv7 of the moved time), and the checker's view of
// the fake Stripe's ledger moves with it (a PaymentIntent's creation time is compared with the trail's).
//
//   SOAK_RETENTION_ORDERS=300 npx vitest run test/lifecycle/soak-retention.test.ts
import { describe, expect, it } from 'vitest';
import { RETENTION_DEFAULTS, retentionCutoffs, runRetention, type RetentionRun } from '../../lambdas/payments/retention-store.ts';
import { formatReport, type InvariantReport } from '../../local/invariants.ts';
import { formatSoakReport, runSoak, type SoakAfterCheck } from '../../local/soak/soak.ts';
import { SHORT_CHAOS_SOAK } from '../support/soak.ts';
import { ageRows, asApplicationRole, DAY_MS } from './support.ts';

const ORDERS = Number(process.env.SOAK_RETENTION_ORDERS ?? 200);
const OLD_DAYS = 100; // past every bound (the longest of the soak's kinds: 30 days)
const MID_DAYS = 10; // past the inbox payload bound (4 days), inside the outbox (30), inbox row (30) and body (14) bounds
const ADVANCE_MS = DAY_MS / 2; // the clock given to retention; the database allows a day at most (payload floor 3 days, bound 4)

interface Observed {
  agedClean?: InvariantReport;
  afterRetention?: InvariantReport;
  afterRedelivery?: InvariantReport;
  untold?: InvariantReport;
  toldTooEarly?: InvariantReport;
  run?: RetentionRun;
  sets?: Record<string, { due: number; kept: number }>;
  mismatches?: string[];
  redelivery?: Record<string, unknown>;
}

describe('retention after a soak', () => {
  it(`${ORDERS} orders: retention removes what is past each bound and nothing else; the invariants hold, a redelivery of a reduced event is a duplicate`, { timeout: 420_000 }, async () => {
    const observed: Observed = {};
    const lines: string[] = [];
    const report = await runSoak({
      ...SHORT_CHAOS_SOAK,
      orders: ORDERS,
      seed: Number(process.env.SOAK_SEED ?? 20261202),
      log: (line) => lines.push(line),
      afterCheck: (soak) => retentionAfterSoak(soak, observed),
    });
    const text = formatSoakReport(report);
    console.log(JSON.stringify({ orders: ORDERS, sets: observed.sets, removed: observed.run?.removed, outboxEvents: { soak: report.check.outboxEvents, after: observed.afterRetention?.outboxEvents }, redelivery: observed.redelivery }));
    expect(report.check.violations, `${text}\n${lines.slice(-40).join('\n')}`).toEqual([]);
    expect(report.settled, text).toBe(true);
    expect(report.stripeEvents?.received, text).toBeGreaterThan(0);
    expect(report.refunds.atStripe.succeeded ?? 0, text).toBeGreaterThan(0);
    expect(report.check.rejectedMessages, text).toBeGreaterThan(0);

    // Moving the data alone breaks nothing the checker sees.
    expect(observed.agedClean?.violations, formatReport(observed.agedClean!)).toEqual([]);
    // Each kind had rows past its bound and rows inside it; retention took exactly the first.
    expect(observed.run?.unfinished).toEqual([]);
    expect(observed.run?.maxOverdueSeconds).toBe(0);
    for (const [kind, { due, kept }] of Object.entries(observed.sets!)) {
      expect(due, `${kind}: rows past the bound`).toBeGreaterThan(0);
      expect(kept, `${kind}: rows inside the bound`).toBeGreaterThan(0);
    }
    expect(observed.mismatches).toEqual([]);
    // The invariants after retention: the same operations, no violation.
    const after = observed.afterRetention!;
    expect(after.violations, formatReport(after)).toEqual([]);
    expect(after.byStatus).toEqual(report.check.byStatus);
    expect(after.outboxEvents).toBeLessThan(report.check.outboxEvents);
    expect(observed.untold?.violationsByKind.outbox_mismatch ?? 0).toBeGreaterThan(0);
    expect(observed.toldTooEarly?.violationsByKind.outbox_mismatch ?? 0).toBe(observed.untold?.violationsByKind.outbox_mismatch);
    expect(Object.keys(observed.untold!.violationsByKind)).toEqual(['outbox_mismatch']);
    // The redelivered event: answered 2xx, its row as retention left it, nothing applied again.
    expect(observed.redelivery).toMatchObject({ rowAfter: { payload: null }, sameOutcome: true, sameTrail: true, sameOutbox: true, sameInbox: true, sameOperation: true });
    // Answered 2xx (a late delivery of the soak's own may be answered in the same window too).
    expect(observed.redelivery?.answered2xx).toBeGreaterThanOrEqual(1);
    expect(observed.afterRedelivery?.violations, formatReport(observed.afterRedelivery!)).toEqual([]);
  });
});

async function retentionAfterSoak({ pipeline, check }: SoakAfterCheck, observed: Observed): Promise<void> {
  const db = pipeline.db;
  // Thirds, by order (an order's operations, trail, outbox, Stripe events and rejections move together).
  const { rows: orderRows } = await db.query<{ order_id: string }>(
    `SELECT order_id FROM payment_operations UNION SELECT order_id FROM rejected_messages WHERE order_id IS NOT NULL ORDER BY 1`,
  );
  const { rows: orphanRejects } = await db.query<{ id: string }>(`SELECT id::text FROM rejected_messages WHERE order_id IS NULL ORDER BY id`);
  const third = <T>(xs: readonly T[], i: number) => xs.filter((_, k) => k % 3 === i);
  const orders = orderRows.map((r) => r.order_id);
  const old = new Set(third(orders, 0));
  const mid = new Set(third(orders, 1));
  await ageRows(db, OLD_DAYS, { orderIds: [...old], rejectedIds: third(orphanRejects.map((r) => r.id), 0) });
  await ageRows(db, MID_DAYS, { orderIds: [...mid], rejectedIds: third(orphanRejects.map((r) => r.id), 1) });
  // The ledger's times the checker compares with the trail's, moved with their orders.
  const movedBy = (orderId: string | undefined) => (orderId !== undefined && old.has(orderId) ? OLD_DAYS : orderId !== undefined && mid.has(orderId) ? MID_DAYS : 0) * DAY_MS;
  const paymentIntents = () => pipeline.fakeStripe!.paymentIntents().map((pi) => ({ ...pi, createdAtMs: pi.createdAtMs - movedBy(pi.metadata.order_id) }));
  observed.agedClean = await check({ paymentIntents: paymentIntents() });

  // What is due, per kind, before the run (the retention functions' own conditions, at the cutoffs).
  const now = new Date(Date.now() + ADVANCE_MS);
  const cutoffs = retentionCutoffs(RETENTION_DEFAULTS, now);
  type Row = { id: string; due: boolean; reduced: boolean; gone_due: boolean };
  const outboxBefore = (await db.query<Row>(`SELECT event_id::text AS id, published_at < $1 AS due, false AS reduced, false AS gone_due FROM outcome_events`, [cutoffs.outbox])).rows;
  const inboxBefore = (
    await db.query<Row>(
      `SELECT s.event_id AS id, (s.applied_at IS NOT NULL AND s.payload IS NOT NULL AND s.received_at < $1) AS due, s.payload IS NULL AS reduced,
              (s.applied_at IS NOT NULL AND s.received_at < $2 AND NOT EXISTS (SELECT 1 FROM stripe_event_findings f WHERE f.event_id = s.event_id)) AS gone_due
         FROM stripe_events s`,
      [cutoffs.stripeEventPayloads, cutoffs.stripeEvents],
    )
  ).rows;
  const bodiesBefore = (await db.query<Row>(`SELECT id::text, (raw_body IS NOT NULL AND received_at < $1) AS due, raw_body IS NULL AS reduced, false AS gone_due FROM rejected_messages`, [cutoffs.rejectedBodies])).rows;

  // The event to redeliver afterwards, chosen now: applied 10 days ago, its payload due for removal,
  // its row inside the bound (deduplication must outlive the payload).
  const webhooks = pipeline.webhooks!;
  const candidates = new Map(webhooks.dispatcher.events().map((e) => [e.id, e]));
  const dueForReduction = new Set(inboxBefore.filter((r) => r.due && !r.gone_due).map((r) => r.id));
  const { rows: settling } = await db.query<{ event_id: string; operation_id: string }>(
    `SELECT s.event_id, s.operation_id::text FROM stripe_events s JOIN payment_operations p ON p.id = s.operation_id
      WHERE s.applied_at IS NOT NULL AND p.order_id = ANY($1::text[]) AND s.event_type = 'payment_intent.succeeded'
      ORDER BY s.event_id`,
    [[...mid]],
  );
  const chosen = settling.find((r) => dueForReduction.has(r.event_id) && candidates.has(r.event_id));
  if (!chosen) throw new Error(`no applied payment_intent.succeeded event of the middle third due for reduction among the ${candidates.size} the fake sent`);

  observed.run = await asApplicationRole(db, (client) => runRetention(client, RETENTION_DEFAULTS, () => now));

  const outboxAfter = new Set((await db.query<{ id: string }>(`SELECT event_id::text AS id FROM outcome_events`)).rows.map((r) => r.id));
  const inboxAfter = new Map((await db.query<{ id: string; reduced: boolean }>(`SELECT event_id AS id, payload IS NULL AS reduced FROM stripe_events`)).rows.map((r) => [r.id, r.reduced]));
  const bodiesAfter = new Map(
    (await db.query<{ id: string; reduced: boolean; why: string | null }>(`SELECT id::text, raw_body IS NULL AS reduced, raw_body_removed_why AS why FROM rejected_messages`)).rows.map((r) => [r.id, r]),
  );
  const mismatches: string[] = [];
  for (const r of outboxBefore) if (outboxAfter.has(r.id) === r.due) mismatches.push(`outbox ${r.id}: ${r.due ? 'past the bound, kept' : 'inside the bound, removed'}`);
  for (const r of inboxBefore) {
    const after = inboxAfter.get(r.id);
    if (r.gone_due) {
      if (after !== undefined) mismatches.push(`inbox ${r.id}: past the row bound, kept`);
    } else if (after === undefined) mismatches.push(`inbox ${r.id}: inside the row bound, deleted`);
    else if (after !== (r.reduced || r.due)) mismatches.push(`inbox ${r.id}: payload ${after ? 'removed inside' : 'kept past'} its bound`);
  }
  for (const r of bodiesBefore) {
    const after = bodiesAfter.get(r.id);
    if (after === undefined) mismatches.push(`rejected ${r.id}: deleted`);
    else if (after.reduced !== (r.reduced || r.due)) mismatches.push(`rejected ${r.id}: body ${after.reduced ? 'removed inside' : 'kept past'} its bound`);
    else if (r.due && after.why !== 'retention') mismatches.push(`rejected ${r.id}: removed as ${after.why}`);
  }
  observed.mismatches = mismatches;
  const count = (rows: readonly Row[], f: (r: Row) => boolean) => rows.filter(f).length;
  observed.sets = {
    outbox: { due: count(outboxBefore, (r) => r.due), kept: count(outboxBefore, (r) => !r.due) },
    stripeEventPayloads: { due: count(inboxBefore, (r) => r.due), kept: count(inboxBefore, (r) => !r.due && !r.reduced) },
    stripeEvents: { due: count(inboxBefore, (r) => r.gone_due), kept: count(inboxBefore, (r) => !r.gone_due) },
    rejectedBodies: { due: count(bodiesBefore, (r) => r.due), kept: count(bodiesBefore, (r) => !r.due && !r.reduced) },
  };
  observed.afterRetention = await check({ paymentIntents: paymentIntents(), outboxRemovedBefore: cutoffs.outbox });
  // The checker does not take a missing event on trust: not told of retention, or told of a cutoff
  // older than the events that are gone, it reports them.
  observed.untold = await check({ paymentIntents: paymentIntents() });
  observed.toldTooEarly = await check({ paymentIntents: paymentIntents(), outboxRemovedBefore: new Date(cutoffs.outbox.getTime() - 2 * OLD_DAYS * DAY_MS) });

  const facts = async () => {
    const { rows } = await db.query<{ trail: number; outbox: number; inbox: number; operation: unknown; row: unknown }>(
      `SELECT (SELECT count(*)::int FROM payment_operation_events WHERE operation_id = $2) AS trail,
              (SELECT count(*)::int FROM outcome_events WHERE operation_id = $2) AS outbox,
              (SELECT count(*)::int FROM stripe_events WHERE event_id = $1) AS inbox,
              (SELECT to_jsonb(p) FROM payment_operations p WHERE p.id = $2) AS operation,
              (SELECT jsonb_build_object('payload', s.payload, 'outcome', s.outcome, 'applied_at', s.applied_at) FROM stripe_events s WHERE s.event_id = $1) AS row`,
      [chosen.event_id, chosen.operation_id],
    );
    return rows[0]!;
  };
  // Stripe sends it again (a Dashboard resend), through the fake's signed delivery to the real webhook endpoint.
  // Whatever the soak's deliveries still had queued goes first, so that only this one is counted.
  await webhooks.dispatcher.drain();
  const before = await facts();
  const ok = () => Object.entries(webhooks.answers()).reduce((n, [status, k]) => n + (status.startsWith('2') ? k : 0), 0);
  const answeredBefore = ok();
  webhooks.dispatcher.setFaults({});
  webhooks.dispatcher.emit(candidates.get(chosen.event_id)!);
  await webhooks.dispatcher.drain();
  const after = await facts();
  observed.redelivery = {
    eventId: chosen.event_id,
    answered2xx: ok() - answeredBefore,
    rowAfter: after.row,
    sameOutcome: JSON.stringify(after.row) === JSON.stringify(before.row),
    sameTrail: after.trail === before.trail,
    sameOutbox: after.outbox === before.outbox,
    sameInbox: after.inbox === before.inbox,
    sameOperation: JSON.stringify(after.operation) === JSON.stringify(before.operation),
  };
  observed.afterRedelivery = await check({ paymentIntents: paymentIntents(), outboxRemovedBefore: cutoffs.outbox });
}
