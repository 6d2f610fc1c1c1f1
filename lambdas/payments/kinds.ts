// Operation kinds: the I/O half of what makes a charge a charge and a refund a refund. One engine
// (engine.ts) and one set of pure decisions (decisions.ts, KIND_RULES for the pure half) serve every
// kind; a kind only says which Stripe endpoint creates, retrieves and lists its object.
//
//   engine ─ chooseStep (shared) ─▶ KIND_ADAPTERS[op.kind].create | retrieve | list ─▶ decide* (shared)
//
// A third kind (a capture, a payout, …) is: a value in the `kind` CHECK (a migration), one adapter
// here, one KindRules entry in decisions.ts, its request statement in operations-store.ts, and its
// event names in the outbox — never a second engine or a copied state machine.
import { authorizationKey, idempotencyKey, paymentIntentMetadata, refundMetadata, type ListWindow } from './decisions.ts';
import type { AuthorizationActionRequest, GatewayResult, ListAnswer, PaymentGateway } from './gateway.ts';
import { paymentIntentOfRefund, type ClaimedOperation, type OperationKind, type PaymentIntentView } from './types.ts';

/**
 * Every call is made as the operation's account (`op.account`, `account`: Connect's Stripe-Account;
 * null: the platform): a connected account's objects, keys, List and Search are its own, so a call
 * made as another account would see nothing of the operation (docs/model.md#connected-accounts).
 */
export interface KindAdapter {
  create(gateway: PaymentGateway, op: ClaimedOperation): Promise<GatewayResult<PaymentIntentView>>;
  retrieve(gateway: PaymentGateway, id: string, account: string | null): Promise<GatewayResult<PaymentIntentView>>;
  list(
    gateway: PaymentGateway,
    scope: Readonly<Record<string, string>>,
    window: ListWindow,
    beforePage: () => Promise<boolean>,
    account: string | null,
  ): Promise<GatewayResult<ListAnswer<PaymentIntentView>>>;
}

/** The account an operation's Stripe requests are made as; null: the platform. */
export const accountOf = (op: { readonly account?: string | undefined }): string | null => op.account ?? null;

const charge: KindAdapter = {
  create: (gateway, op) =>
    gateway.createPaymentIntent({
      idempotencyKey: idempotencyKey(op.id, op.keyGeneration),
      amount: op.amount,
      currency: op.currency,
      customerId: op.customerId,
      paymentMethod: op.paymentMethod,
      // The producer's keys first: ours (operation_id, order_id, key_generation) always win (and the
      // schema refuses producer metadata that names them).
      metadata: { ...(op.metadata ?? {}), ...paymentIntentMetadata(op) },
      ...(op.description ? { description: op.description } : {}),
      ...(op.statementDescriptorSuffix ? { statementDescriptorSuffix: op.statementDescriptorSuffix } : {}),
      ...(op.applicationFeeAmount ? { applicationFeeAmount: op.applicationFeeAmount } : {}),
      ...(op.transferDestination ? { transferDestination: op.transferDestination } : {}),
      ...(op.captureMethod ? { captureMethod: op.captureMethod } : {}),
      account: accountOf(op),
    }),
  retrieve: (gateway, id, account) => gateway.retrievePaymentIntent(id, { account }),
  list: (gateway, scope, window, beforePage, account) => gateway.listPaymentIntents({ scope, ...window, beforePage, account }),
};

const refund: KindAdapter = {
  create: (gateway, op) => {
    // A refund is claimable only once its charge is final (operations-store.ts claimable), and one of
    // a failed charge never gets here (decidePrecondition): the PaymentIntent is known.
    // The duplicate-charge remedy names the extra PaymentIntent it refunds; any other refund is of the charge's.
    const paymentIntentId = paymentIntentOfRefund(op, op.charge?.paymentIntentId ?? null);
    if (!op.refund || !paymentIntentId) throw new Error(`refund operation ${op.id} was claimed without its charge's PaymentIntent`);
    return gateway.createRefund({
      idempotencyKey: idempotencyKey(op.id, op.keyGeneration),
      paymentIntentId,
      amount: op.amount,
      reason: op.refund.reason,
      metadata: refundMetadata(op),
      // A refund row carries its charge's account (migrations/018's trigger): a direct charge is
      // refunded on the connected account, a destination charge on the platform.
      account: accountOf(op),
    });
  },
  retrieve: (gateway, id, account) => gateway.retrieveRefund(id, { account }),
  list: (gateway, scope, window, beforePage, account) => gateway.listRefunds({ scope, ...window, beforePage, account }),
};

/**
 * A capture or a cancel acts on the charge's PaymentIntent (claimable only once the charge is final:
 * operations-store.ts claimable; one of a failed charge never gets here: decidePrecondition). Its
 * evidence is a retrieve of that PaymentIntent (decisions.ts chooseStep): it has no List.
 */
function authorizationAdapter(act: (gateway: PaymentGateway, request: AuthorizationActionRequest) => Promise<GatewayResult<PaymentIntentView>>, withAmount: boolean): KindAdapter {
  return {
    create: (gateway, op) => {
      const paymentIntentId = op.charge?.paymentIntentId;
      if (!paymentIntentId) throw new Error(`${op.kind} operation ${op.id} was claimed without its charge's PaymentIntent`);
      return act(gateway, {
        idempotencyKey: authorizationKey(op),
        paymentIntentId,
        ...(withAmount ? { amount: op.amount } : {}),
        account: accountOf(op),
      });
    },
    retrieve: (gateway, id, account) => gateway.retrievePaymentIntent(id, { account }),
    list: () => Promise.reject(new Error('a capture or cancel has no List: its evidence is its PaymentIntent')),
  };
}

export const KIND_ADAPTERS: Readonly<Record<OperationKind, KindAdapter>> = {
  charge,
  refund,
  capture: authorizationAdapter((gateway, request) => gateway.capturePaymentIntent(request), true),
  cancel_authorization: authorizationAdapter((gateway, request) => gateway.cancelPaymentIntent(request), false),
};
