// The vocabulary of the payments domain. Plain data; no I/O, no Lambda, no CDK.

export const OperationStatus = {
  pending: 'pending', // never known to have reached Stripe
  unknown: 'unknown', // may have reached Stripe, or reached it and is not settled yet
  succeeded: 'succeeded',
  failed: 'failed',
} as const;
export type OperationStatus = (typeof OperationStatus)[keyof typeof OperationStatus];

export const OPEN_STATUSES: readonly OperationStatus[] = ['pending', 'unknown'];
export const isFinal = (status: OperationStatus): boolean => status === 'succeeded' || status === 'failed';

/** What a producer asks for (DESIGN §8), in the engine's terms. */
export interface ChargeInput {
  readonly orderId: string;
  readonly amount: number;
  readonly currency: string;
  readonly customerId: string;
  readonly paymentMethod: string;
}

/** A row of payment_operations as the engine sees it. */
export interface Operation extends ChargeInput {
  readonly id: string;
  readonly status: OperationStatus;
  readonly externalId: string | null;
  readonly attempts: number;
  readonly firstAttemptedAt: Date | null;
  readonly lastError: string | null;
  readonly lastErrorClass: string | null;
  readonly leaseToken: string | null;
  readonly leaseUntil: Date | null;
  readonly nextAttemptAt: Date | null;
  readonly reviewReason: string | null;
  readonly keyGeneration: number;
  readonly createdAt: Date;
  readonly updatedAt: Date;
  readonly settledAt: Date | null;
}

/** An operation this worker holds the lease of, with the database clock at the moment of the claim. */
export interface ClaimedOperation extends Operation {
  readonly leaseToken: string;
  readonly firstAttemptedAt: Date;
  readonly claimedAt: Date;
}

/** The subset of a Stripe PaymentIntent the engine reasons about. */
export interface PaymentIntentView {
  readonly id: string;
  readonly status: string;
  readonly amount: number;
  readonly currency: string;
  readonly metadata: Readonly<Record<string, string>>;
  /** The customer it belongs to, when the answer said (List evidence compares it). */
  readonly customer?: string | null;
}
