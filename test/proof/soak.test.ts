// The chaos soak, short: ~85 orders (a fifth of them refunded) through the whole local pipeline with the unchanged handlers in
// worker processes SIGKILLed at every step of an attempt, PostgreSQL restarted and crashed, Stripe and
// EventBridge faults, duplicate and conflicting sends, poison bodies and keys pruned on a fast
// time-lapse clock; then the faults stop, the reconciler settles everything, and the checker must find
// nothing. The full run is `npm run soak -- --orders 10000` (docs/proofs.md).
//
//   SOAK_ORDERS=300 npx vitest run test/proof/soak.test.ts
import { describe, expect, it } from 'vitest';
import { formatSoakReport, runSoak } from '../../local/soak/soak.ts';
import { renderSoakCharts } from '../../local/soak/charts.ts';
import { SHORT_CHAOS_SOAK } from '../support/soak.ts';

// 85: with a fifth of the orders refunded instead of sent twice, about the traffic 100 orders made
// before refunds (~135 messages).
const ORDERS = Number(process.env.SOAK_ORDERS ?? 85);

describe('chaos soak (short)', () => {
  it(`${ORDERS} orders under kills, database restarts and crashes, Stripe faults: no violation`, { timeout: 300_000 }, async () => {
    const lines: string[] = [];
    const report = await runSoak({
      ...SHORT_CHAOS_SOAK,
      orders: ORDERS,
      seed: Number(process.env.SOAK_SEED ?? 20261129),
      // Manual capture instead of a refund or a duplicate (so the traffic stays what it was): enough
      // orders that every scenario — full, partial, above the authorization, cancel, expiry — comes up.
      authorizationRate: 0.15,
      log: (line) => lines.push(line),
    });
    const text = formatSoakReport(report);
    console.log(text);
    expect(report.check.violations, `${text}\n${lines.join('\n')}`).toEqual([]);
    expect(report.settled, text).toBe(true);
    expect(report.unpublishedEvents, text).toBe(0);
    // Its charts (--svg-dir) carry the same figures as its report.
    const outcomes = renderSoakCharts(report).find((c) => c.name === 'soak-outcomes.svg')!.svg;
    expect(outcomes).toContain(`succeeded: operations ${report.check.byStatus.succeeded.toLocaleString('en')}`);
    expect(outcomes).toContain('violations: operations 0');
    // The only second PaymentIntents are the ones made behind the pipeline's back, each refunded once by
    // the remedy — or, when its refund could not be settled in the compressed key window (as a charge
    // can end in review too), in the review queue with its reason, which the checker reports.
    const remediesInReview = report.check.warnings.filter((w) => w.kind === 'duplicate_awaiting_review').length;
    expect(report.refunds.duplicates.made, text).toBeGreaterThan(0);
    expect(report.refunds.duplicates.remedied + remediesInReview, text).toBe(report.refunds.duplicates.made);
    expect(report.stripe.doubleCharges, text).toBe(report.refunds.duplicates.made);
    // The soak really did what it says: kills, restarts, faults, pruning, duplicates.
    expect(Object.values(report.kills).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(report.postgres.restarts + report.postgres.crashes).toBe(2);
    expect(Object.values(report.stripeFaults).reduce((a, b) => a + b, 0)).toBeGreaterThan(0);
    expect(report.sends.duplicatesNewDedupId).toBeGreaterThan(0);
    // Refunds met the same kills and faults (the net-amount invariant is in report.check above).
    expect(Object.keys(report.refunds.byScenario).length, text).toBeGreaterThanOrEqual(4);
    expect(report.refunds.atStripe.succeeded ?? 0, text).toBeGreaterThan(0);
    expect((report.refunds.operations.pending ?? 0) + (report.refunds.operations.unknown ?? 0), text).toBe(
      report.check.warnings.filter((w) => w.kind === 'refund_awaiting_review').length,
    );
    // Manual capture met the same kills and faults: authorizations captured in full and in part, one
    // above its authorization refused, canceled, and holds left to expire recorded as expired by the
    // reconciler's expiry check (every capture and cancel is judged by report.check above).
    const auth = report.authorizations;
    expect(auth.orders, text).toBeGreaterThan(0);
    expect((auth.operations['capture succeeded'] ?? 0) + (auth.operations['cancel_authorization succeeded'] ?? 0), text).toBeGreaterThan(0);
    expect(auth.atStripe.succeeded ?? 0, text).toBeGreaterThan(0);
    expect(Object.entries(auth.atStripe).filter(([status]) => status.startsWith('canceled')).reduce((n, [, k]) => n + k, 0), text).toBeGreaterThan(0);
    // One recorded expiry per aged order; Stripe cancels every aged hold, and an order may hold two
    // when it is aged (seen once: 3 automatic cancels for 2 aged orders).
    expect(auth.operations['cancel_authorization succeeded (expired)'] ?? 0, text).toBe(auth.agedOrders);
    expect(auth.atStripe['canceled (automatic)'] ?? 0, text).toBe(auth.aged);
    // Stripe events in were on (the default): delivered through the same restarts and crashes, no forgery accepted.
    expect(report.stripeEvents?.received, text).toBeGreaterThan(0);
    expect(report.stripeEvents?.delivery?.forgedAccepted).toBe(0);
    // Every finding is explained by what the soak made: one contradiction per extra charge behind the
    // pipeline's back (each one's remedy is above), and any others only about PaymentIntents Stripe
    // committed late under a key the operation had been re-issued away from (the watch's, or an
    // event's, finding; the checker judged their money above). None about anything else.
    expect(report.findingsByCause.unexplained, text).toEqual([]);
    expect(report.findingsByCause.duplicate, text).toEqual({ contradiction: report.refunds.duplicates.made });
  });
});
