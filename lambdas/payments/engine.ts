// The charge engine: durable operations, one Stripe attempt per claim, outcomes fenced by the lease.
//
//   request ─▶ claim (lease + first_attempted_at) ─▶ Stripe (no transaction open) ─▶ record (fenced)
//              └──────── one round trip ───────┘                                    └─ one round trip ─┘
//
// executeCharge / processRequests / reconcileDue may be called any number of times, concurrently,
// from any number of processes: the lease decides who calls Stripe, the key decides what Stripe
// does with a repeat, and the fence decides whose answer is written.
//
// This class is the engine's one entry point; each job lives in a module of its own:
//   charge-requests.ts    requesting charges (durable, claimed, conflicts)
//   refund-requests.ts    requesting refunds (durable, claimed when the charge is final, rejections)
//   authorization-requests.ts  capturing or releasing a manual charge's authorization (likewise)
//   duplicate-remedy.ts   the duplicate-charge remedy
//   reconcile-due.ts      one page of the reconcile sweep
//   claimed-execution.ts  executing claimed operations: evidence, attempt / create, recording outcomes
//   engine-context.ts     the options, resolved once, that every job takes
import { processAuthorizationRequest, type AuthorizationRequestResult } from './authorization-requests.ts';
import { processChargeRequests } from './charge-requests.ts';
import { executeOperation } from './claimed-execution.ts';
import type { EnginePolicy } from './decisions.ts';
import { remedyDuplicateCharge, type RemedyResult } from './duplicate-remedy.ts';
import { engineContext, type EngineContext, type EngineOptions } from './engine-context.ts';
import { reconcileDue } from './reconcile-due.ts';
import { processRefundRequest, type RefundRequestOptions } from './refund-requests.ts';
import type { Execution, RefundRequestResult, RequestResult } from './request-results.ts';
import type { AuthorizationInput, ChargeInput, PaymentIntentView, RefundInput } from './types.ts';

export type { EngineOptions } from './engine-context.ts';
export { conflictingFields } from './charge-requests.ts';
export { mapBounded } from './claimed-execution.ts';

export class ChargeEngine {
  readonly #ctx: EngineContext;

  constructor(options: EngineOptions) {
    this.#ctx = engineContext(options);
  }

  get policy(): EnginePolicy {
    return this.#ctx.policy;
  }

  /**
   * Make the operation durable before any side effect. The same order twice gives the same id; the
   * same order with other parameters is an OrderConflictError and never a second operation.
   */
  async requestCharge(input: ChargeInput): Promise<string> {
    const [result] = await this.processRequests([input], { execute: false });
    if (result!.conflict) throw result!.conflict;
    return result!.operationId;
  }

  /**
   * Attempt the operation once if it is claimable. Safe to call any number of times, concurrently:
   * a final operation is returned as it is and Stripe is not called again.
   */
  async executeCharge(operationId: string): Promise<Execution> {
    return executeOperation(this.#ctx, operationId);
  }

  /** The batch path of the charge handler (charge-requests.ts processChargeRequests). */
  async processRequests(inputs: readonly ChargeInput[], options: { execute?: boolean; canStart?: () => boolean } = {}): Promise<RequestResult[]> {
    return processChargeRequests(this.#ctx, inputs, options);
  }

  /** Make a refund durable (not executed): its operation id, or the RefundRejectedError. */
  async requestRefund(input: RefundInput): Promise<string> {
    const result = await this.processRefund(input, { execute: false });
    if (result.rejection) throw result.rejection;
    return result.operationId!;
  }

  /** A refund request, made durable and executed when it can be (refund-requests.ts processRefundRequest). */
  async processRefund(input: RefundInput, options: RefundRequestOptions = {}): Promise<RefundRequestResult> {
    return processRefundRequest(this.#ctx, input, options);
  }

  /** A capture or cancel of a manual charge's authorization, made durable and executed when it can be (authorization-requests.ts). */
  async processAuthorization(input: AuthorizationInput, options: { execute?: boolean; canStart?: () => boolean } = {}): Promise<AuthorizationRequestResult> {
    return processAuthorizationRequest(this.#ctx, input, options);
  }

  /** The duplicate-charge remedy (duplicate-remedy.ts). */
  async remedyDuplicateCharge(chargeOperationId: string, pi: PaymentIntentView, evidence: Readonly<Record<string, unknown>> = {}): Promise<RemedyResult> {
    return remedyDuplicateCharge(this.#ctx, chargeOperationId, pi, evidence);
  }

  /** One page of the reconcile sweep (reconcile-due.ts). */
  async reconcileDue(limit: number, canStart?: () => boolean): Promise<Execution[]> {
    return reconcileDue(this.#ctx, limit, canStart);
  }
}
