// The operator tool's read-only view of Stripe, through the real SDK: retrieve one PaymentIntent, and
// find every PaymentIntent of an operation across ALL key generations. The engine's gateway searches
// one generation (the one it may adopt); a human deciding "nothing was charged" must see them all.
// Refunds: retrieve one, and List every refund of a PaymentIntent — the engine's own readers
// (StripeGateway.retrieveRefund / listRefunds, one paged-list reader), which already see every
// generation (List is not filtered by key generation). Errors are classified exactly as the engine
// classifies them (classifyStripeError).
import type Stripe from 'stripe';
import { type AccountScope, type GatewayResult } from '../payments/gateway.ts';
import type { RefundView } from '../payments/gateway.ts';
import type { StripeLookup, StripePaymentIntent, StripeRefund } from '../payments/review.ts';
import { classifyStripeError, StripeGateway } from '../payments/stripe-gateway.ts';
import { createConfiguredStripeClient } from '../runtime/resources.ts';
import { ConfigError, type RuntimeConfig } from '../runtime/config.ts';
import { OpsConfigError } from './errors.ts';

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;
/** Pages of 100 read before the answer is declared cut off (an operation has one PaymentIntent, or a few). */
const MAX_SEARCH_PAGES = 5;

function toPaymentIntent(raw: unknown): StripePaymentIntent | null {
  if (typeof raw !== 'object' || raw === null) return null;
  const pi = raw as Record<string, unknown>;
  if (pi.object !== 'payment_intent' || typeof pi.id !== 'string' || typeof pi.status !== 'string') return null;
  if (typeof pi.amount !== 'number' || typeof pi.currency !== 'string') return null;
  const metadata: Record<string, string> = {};
  if (typeof pi.metadata === 'object' && pi.metadata !== null) {
    for (const [key, value] of Object.entries(pi.metadata)) if (typeof value === 'string') metadata[key] = value;
  }
  const created = typeof pi.created === 'number' ? new Date(pi.created * 1000).toISOString() : null;
  // The customer, when the answer names one: the duplicate-charge remedy compares it with the order's.
  const customer = typeof pi.customer === 'string' ? pi.customer : typeof pi.customer === 'object' && pi.customer !== null ? ((pi.customer as { id?: unknown }).id as string | undefined) ?? null : null;
  return {
    id: pi.id,
    status: pi.status,
    amount: pi.amount,
    currency: pi.currency,
    metadata,
    created,
    customer,
    // What a capture took, and why a PaymentIntent was released: a capture's or cancel's evidence.
    ...(typeof pi.amount_received === 'number' ? { amountReceived: pi.amount_received } : {}),
    ...(typeof pi.cancellation_reason === 'string' ? { cancellationReason: pi.cancellation_reason } : {}),
  };
}

/** stripe-node's request option for a call made as a connected account (the Stripe-Account header); nothing for the platform. */
const asAccount = (scope: AccountScope): { stripeAccount?: string } => (scope.account ? { stripeAccount: scope.account } : {});

/** stripe-node resolves a non-2xx answer without an `error` body as a success: check the status too. */
function httpStatusOf(resource: unknown): number | undefined {
  const status = (resource as { lastResponse?: { statusCode?: unknown } } | null)?.lastResponse?.statusCode;
  return typeof status === 'number' ? status : undefined;
}

function unexpected(status: number | undefined, message: string): GatewayResult<never> {
  return { ok: false, failure: { kind: 'ambiguous', errorClass: 'UnexpectedResponse', ...(status !== undefined ? { httpStatus: status } : {}), message } };
}

/** The engine's RefundView as the operator sees it (the engine's reader does not keep `created`). */
const toStripeRefund = (view: RefundView): StripeRefund => ({ ...view, created: null });

export class StripePaymentIntentLookup implements StripeLookup {
  readonly #stripe: Stripe;
  readonly #gateway: StripeGateway;

  constructor(stripe: Stripe) {
    this.#stripe = stripe;
    this.#gateway = new StripeGateway(stripe);
  }

  async retrieveRefund(id: string, scope: AccountScope = {}): Promise<GatewayResult<StripeRefund>> {
    const got = await this.#gateway.retrieveRefund(id, scope);
    return got.ok ? { ok: true, value: toStripeRefund(got.value) } : got;
  }

  async listRefunds(paymentIntentId: string, scope: AccountScope = {}): Promise<GatewayResult<{ refunds: StripeRefund[]; pages: number; complete: boolean }>> {
    // The gateway's refund list reads the PaymentIntent's whole life (the created range is not sent).
    const listed = await this.#gateway.listRefunds({ scope: { payment_intent: paymentIntentId }, createdGte: 0, createdLte: 0, account: scope.account ?? null });
    if (!listed.ok) return listed;
    return { ok: true, value: { refunds: listed.value.items.map(toStripeRefund), pages: listed.value.pages, complete: listed.value.complete } };
  }

  async retrieve(id: string, scope: AccountScope = {}): Promise<GatewayResult<StripePaymentIntent>> {
    try {
      const answer = await this.#stripe.paymentIntents.retrieve(id, {}, asAccount(scope));
      const status = httpStatusOf(answer);
      if (status !== undefined && (status < 200 || status >= 300)) return unexpected(status, `HTTP ${status} answered without an error body`);
      const pi = toPaymentIntent(answer);
      return pi ? { ok: true, value: pi } : unexpected(status, 'answer is not a PaymentIntent');
    } catch (error) {
      return { ok: false, failure: classifyStripeError(error, 'retrieve') };
    }
  }

  async searchByOperation(operationId: string, scope: AccountScope = {}): Promise<GatewayResult<{ paymentIntents: StripePaymentIntent[]; complete: boolean }>> {
    // Built from a uuid read from our own table, never from free text.
    if (!UUID.test(operationId)) throw new Error(`refusing to build a search query from ${operationId}`);
    const query = `metadata['operation_id']:'${operationId}'`;
    const found: StripePaymentIntent[] = [];
    let page: string | undefined;
    try {
      for (let pages = 0; pages < MAX_SEARCH_PAGES; pages++) {
        const result = await this.#stripe.paymentIntents.search({ query, limit: 100, ...(page ? { page } : {}) }, asAccount(scope));
        const status = httpStatusOf(result);
        if (status !== undefined && (status < 200 || status >= 300)) return unexpected(status, `HTTP ${status} answered without an error body`);
        if (!Array.isArray(result.data)) return unexpected(status, 'search answer has no data');
        for (const item of result.data) {
          const pi = toPaymentIntent(item);
          if (pi) found.push(pi);
        }
        if (!result.has_more || !result.next_page) return { ok: true, value: { paymentIntents: found, complete: true } };
        page = result.next_page;
      }
      return { ok: true, value: { paymentIntents: found, complete: false } };
    } catch (error) {
      return { ok: false, failure: classifyStripeError(error, 'search') };
    }
  }
}

/** The Stripe client from the runtime configuration (the same key handling as the functions'). */
export async function stripeFromConfig(config: RuntimeConfig): Promise<Stripe> {
  try {
    return await createConfiguredStripeClient(config);
  } catch (error) {
    if (error instanceof ConfigError) throw new OpsConfigError(`${error.message} — Stripe is needed for this command`);
    throw error;
  }
}
