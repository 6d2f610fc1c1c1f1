// Operation kinds: the I/O half of what makes a charge a charge and a refund a refund. One engine
// (engine.ts) and one set of pure decisions (decisions.ts, KIND_RULES for the pure half) serve every
// kind; a kind only says which Stripe endpoint creates, retrieves and lists its object.
//
//   engine ─ chooseStep (shared) ─▶ KIND_ADAPTERS[op.kind].create | retrieve | list ─▶ decide* (shared)
//
// A third kind (a capture, a payout, …) is: a value in the `kind` CHECK (a migration), one adapter
// here, one KindRules entry in decisions.ts, its request statement in operations-store.ts, and its
// event names in the outbox — never a second engine or a copied state machine.
import { idempotencyKey, paymentIntentMetadata, refundMetadata, type ListWindow } from './decisions.ts';
import type { GatewayResult, ListAnswer, PaymentGateway } from './gateway.ts';
import { paymentIntentOfRefund, type ClaimedOperation, type OperationKind, type PaymentIntentView } from './types.ts';

export interface KindAdapter {
  create(gateway: PaymentGateway, op: ClaimedOperation): Promise<GatewayResult<PaymentIntentView>>;
  retrieve(gateway: PaymentGateway, id: string): Promise<GatewayResult<PaymentIntentView>>;
  list(
    gateway: PaymentGateway,
    scope: Readonly<Record<string, string>>,
    window: ListWindow,
    beforePage: () => Promise<boolean>,
  ): Promise<GatewayResult<ListAnswer<PaymentIntentView>>>;
}

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
    }),
  retrieve: (gateway, id) => gateway.retrievePaymentIntent(id),
  list: (gateway, scope, window, beforePage) => gateway.listPaymentIntents({ scope, ...window, beforePage }),
};

const refund: KindAdapter = {
  create: (gateway, op) => {
    // A refund is claimable only once its charge is final (operations-store.ts CLAIMABLE), and one of
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
    });
  },
  retrieve: (gateway, id) => gateway.retrieveRefund(id),
  list: (gateway, scope, window, beforePage) => gateway.listRefunds({ scope, ...window, beforePage }),
};

export const KIND_ADAPTERS: Readonly<Record<OperationKind, KindAdapter>> = { charge, refund };
