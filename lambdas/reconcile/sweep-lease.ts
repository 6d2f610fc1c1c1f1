// The reconcile sweep's lease (migrations/003_reconcile_sweep_lease.sql): overlapping sweeps are
// made impossible rather than budgeted, so RECONCILE_MAX_RPS is the reconciler's rate whatever the
// schedule and the function timeout. A row, not an advisory lock: it needs no connection held for the
// whole sweep (the pool has DB_POOL_MAX of them), and it lapses by itself when the holder's
// invocation is past its deadline.
import type { Db } from '../payments/db.ts';

export interface SweepLease {
  readonly acquired: boolean;
  /** Who holds it when not acquired (another invocation's request id), and until when. */
  readonly heldBy?: string;
  readonly heldUntil?: Date;
}

/** Take the lease for `ttlMs` (the invocation's remaining time and a margin) if nobody holds it. */
export async function acquireSweepLease(db: Db, holder: string, ttlMs: number): Promise<SweepLease> {
  const taken = await db.query(
    `UPDATE reconcile_sweep_lease
        SET holder = $1, lease_until = now() + $2::bigint * interval '1 millisecond'
      WHERE lease_until < now()
      RETURNING holder`,
    [holder, Math.max(1, Math.ceil(ttlMs))],
  );
  if ((taken.rowCount ?? 0) > 0) return { acquired: true };
  const { rows } = await db.query<{ holder: string | null; lease_until: Date }>('SELECT holder, lease_until FROM reconcile_sweep_lease');
  return { acquired: false, ...(rows[0]?.holder ? { heldBy: rows[0].holder } : {}), ...(rows[0] ? { heldUntil: rows[0].lease_until } : {}) };
}

/** Give it back at the end of the sweep (only if still ours). */
export async function releaseSweepLease(db: Db, holder: string): Promise<void> {
  await db.query(`UPDATE reconcile_sweep_lease SET holder = NULL, lease_until = '-infinity' WHERE holder = $1`, [holder]);
}
