// End to end: the local pipeline's outcome events → the local rule → fauxqs → the receipt notifier,
// once per policy, against fake e-mail APIs injecting lost answers, 500s and 429s. The ledger's
// figures must be exactly what each policy promises, fault by fault:
//   at-least-once  no miss; one duplicate receipt per ambiguous answer that came after the send
//   idempotent     no miss, no duplicate (the provider replays on the key)
//   at-most-once   no duplicate; one miss per ambiguous answer that came before the send
import { describe, expect, it } from 'vitest';
import { RECEIPTS_SCHEMAS } from '../../lambdas/consumers/receipts/contract.ts';
import { startLocalConsumers } from '../../local/consumers.ts';
import { buildWorkload, runWorkload } from '../../local/demo.ts';
import { startTestPipeline } from './support.ts';

describe('the receipt notifier on the local bus, once per policy', () => {
  it('produces exactly the duplicates and misses each policy accepts, and absorbs every repeated delivery', async () => {
    const pipeline = await startTestPipeline({ stripe: { kind: 'fake', faults: 'none', seed: 7 }, pollers: 4 });
    // Generous timeouts: on a loaded machine a timeout would be an ambiguous answer the faults did not
    // inject, and the exact relations below count injected faults.
    const consumers = await startLocalConsumers({
      pipeline,
      faults: 'chaos',
      seed: 7,
      duplicateRate: 0.2,
      holdRate: 0.1,
      timing: { emailTimeoutMs: 8_000, functionTimeoutMs: 9_000, leaseMs: 9_500, visibilitySeconds: 10 },
    });
    try {
      // A fifth refunded: a refund's receipt is owed beside its charge's (two split refunds, two more),
      // and none of them is a duplicate of another.
      const workload = buildWorkload({ orders: 50, duplicates: 0.2, refunds: 0.2, seed: 7, tag: 'e2e-consumers', processing: false });
      const run = await runWorkload(pipeline, workload, { timeoutMs: 60_000 });
      expect(run.outcome).toBe('settled');
      expect(await consumers.drain(90_000)).toBe(true); // a few retry rounds of one visibility timeout each
      const ledger = await consumers.ledger();
      const by = Object.fromEntries(ledger.map((e) => [e.policy, e]));
      const succeeded = run.ledger.operations.succeeded + run.ledger.refunds.operations.succeeded;
      expect(run.ledger.refunds.operations.succeeded).toBeGreaterThan(1);
      const f = (policy: string, kind: string) => by[policy]!.providerFaults[kind] ?? 0;
      for (const entry of ledger) {
        expect(entry.distinctEvents, entry.consumer).toBe(succeeded);
        expect(entry.inbox.open, entry.consumer).toBe(0);
        expect(entry.inbox.poison, entry.consumer).toBe(0);
        expect(entry.deliveries, entry.consumer).toBeGreaterThan(succeeded); // rule duplicates and retries arrived…
        expect(entry.outcomes.duplicates, entry.consumer).toBeGreaterThan(0); // …and were absorbed
      }
      expect(by['at-least-once']).toMatchObject({ missedReceipts: 0, duplicateReceipts: f('at-least-once', 'lostResponse') + f('at-least-once', 'error500AfterCommit') });
      expect(by['at-least-once']!.duplicateReceipts).toBeGreaterThan(0);
      expect(by.idempotent).toMatchObject({ missedReceipts: 0, duplicateReceipts: 0, receiptsSent: succeeded });
      expect(by.idempotent!.providerReplays).toBeGreaterThan(0);
      expect(by['at-most-once']).toMatchObject({ duplicateReceipts: 0, missedReceipts: f('at-most-once', 'error500BeforeCommit') });
      expect(by['at-most-once']!.inbox.abandoned).toBe(f('at-most-once', 'lostResponse') + f('at-most-once', 'error500AfterCommit') + f('at-most-once', 'error500BeforeCommit'));
      // As deployed: the notifiers ran as their own role (one per database), which owns their schemas (it migrated them) and nothing else.
      expect(consumers.role).toMatch(/^receipt_notifier_[0-9a-f]{10}$/);
      const owners = await pipeline.db.query(`SELECT nspname, pg_get_userbyid(nspowner) AS owner FROM pg_namespace WHERE nspname = ANY($1) ORDER BY nspname`, [[...RECEIPTS_SCHEMAS]]);
      expect(owners.rows).toEqual(RECEIPTS_SCHEMAS.map((nspname) => ({ nspname, owner: consumers.role })));
      const granted = await pipeline.db.query(`SELECT count(*)::int AS n FROM information_schema.role_table_grants WHERE grantee = $1 AND table_schema = 'public'`, [consumers.role]);
      expect(granted.rows[0]).toEqual({ n: 0 });
    } finally {
      await consumers.stop();
      await pipeline.stop();
    }
  }, 170_000);
});
