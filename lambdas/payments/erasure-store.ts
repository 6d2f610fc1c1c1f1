// A customer's personal data out of the pipeline's tables (docs/operations.md "Erasure", the list of
// what is personal data and what accounting keeps): ONE call of migration 017's
// lifecycle_erase_customer, which changes everything in one transaction, or nothing — refused while
// any of the customer's operations is open or any of their Stripe events is not applied yet.
import type { Db } from './db.ts';

export const CUSTOMER_ID = /^cus_[A-Za-z0-9_]{1,250}$/;

export interface ErasureRequest {
  readonly customerId: string;
  readonly actor: string;
  /** The actor is an identity STS verified (the ops function), not a name said. */
  readonly verified: boolean;
  readonly reason: string;
  /** How the command arrived, who ran it: written into customer_erasures and every audit line. Never the customer id. */
  readonly detail: Readonly<Record<string, unknown>>;
}

export interface ErasureResult {
  readonly erasureId: number;
  /** Operations whose personal data was erased now (already erased ones are not counted again). */
  readonly operations: number;
  /** Every operation of the customer, erased now or before: each has an audit line of this erasure. */
  readonly operationIds: readonly string[];
  /** Applied inbox rows reduced to their columns. */
  readonly stripeEvents: number;
  /** Rejected messages whose raw body was removed. */
  readonly rejectedBodies: number;
}

/** The erasure refused (nothing changed): what to wait for first. */
export class ErasureRefused extends Error {
  override readonly name = 'ErasureRefused';
}

export async function eraseCustomer(db: Db, request: ErasureRequest): Promise<ErasureResult> {
  if (!CUSTOMER_ID.test(request.customerId)) throw new ErasureRefused('a customer id is cus_…');
  try {
    const { rows } = await db.query<{ r: { erasureId: number | string; operations: number; operationIds: string[]; stripeEvents: number; rejectedBodies: number } }>(
      'SELECT lifecycle_erase_customer($1, $2, $3, $4, $5::jsonb) AS r',
      [request.customerId, request.actor, request.verified, request.reason, JSON.stringify(request.detail)],
    );
    const r = rows[0]!.r;
    return { erasureId: Number(r.erasureId), operations: r.operations, operationIds: r.operationIds, stripeEvents: r.stripeEvents, rejectedBodies: r.rejectedBodies };
  } catch (error) {
    // 55000: the customer has open operations or unapplied events (the function's refusal).
    if ((error as { code?: string }).code === '55000') throw new ErasureRefused((error as Error).message);
    throw error;
  }
}
