// What every job of the charge engine works with: the options it was made with, resolved once.
// The façade (engine.ts) builds it; the charge path (charge-requests.ts), the refund path
// (refund-requests.ts), the remedy (duplicate-remedy.ts), the reconcile page (reconcile-due.ts) and
// the attempt of claimed operations (claimed-execution.ts) take it as their first argument.
import type { Db } from './db.ts';
import { DEFAULT_POLICY, type EnginePolicy, type Step } from './decisions.ts';
import type { PaymentGateway } from './gateway.ts';
import type { Execution } from './request-results.ts';
import type { Operation } from './types.ts';

export interface EngineOptions {
  readonly db: Db;
  readonly gateway: PaymentGateway;
  /** Written into the audit trail: 'charge-handler', 'reconciler', 'operator:alice'. */
  readonly actor?: string;
  readonly policy?: Partial<EnginePolicy>;
  /** Stripe calls in flight at once within one batch or page. */
  readonly concurrency?: number;
  /** Jitter source (tests make it deterministic). */
  readonly random?: () => number;
  /**
   * Called before every Stripe call; resolves when the call may start (a rate limiter). Returning
   * false means "do not start" — the operation is released, untouched, for a later run. `account`:
   * the Stripe account the call is made as (Connect's Stripe-Account; null: the platform).
   */
  readonly beforeCall?: (step: Step['kind'], account: string | null) => Promise<boolean> | boolean;
  /**
   * A monotonic clock in ms (tests inject one): how long after its claim a call starts. The key window
   * is checked again right before a create goes out, since a rate limiter or a busy batch may hold it
   * past the window's end after a claim made inside it. Default performance.now.
   */
  readonly now?: () => number;
}

/** EngineOptions with every default applied. */
export interface EngineContext {
  readonly db: Db;
  readonly gateway: PaymentGateway;
  readonly actor: string;
  readonly policy: EnginePolicy;
  readonly concurrency: number;
  readonly random: () => number;
  readonly publishLeaseMs: number;
  readonly beforeCall: EngineOptions['beforeCall'];
  readonly now: () => number;
}

export function engineContext(options: EngineOptions): EngineContext {
  const policy = { ...DEFAULT_POLICY, ...options.policy, backoff: { ...DEFAULT_POLICY.backoff, ...options.policy?.backoff } };
  return {
    db: options.db,
    gateway: options.gateway,
    actor: options.actor ?? 'engine',
    policy,
    concurrency: options.concurrency ?? 10,
    random: options.random ?? Math.random,
    publishLeaseMs: policy.publishLeaseMs,
    beforeCall: options.beforeCall,
    now: options.now ?? (() => performance.now()),
  };
}

/** The execution of an operation that was not claimed (final, leased elsewhere, not due): as it is. */
export function skipped(op: Operation): Execution {
  return { operationId: op.id, status: op.status, disposition: 'skipped', reviewReason: op.reviewReason };
}
