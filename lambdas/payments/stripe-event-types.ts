// The Stripe event types the inbox is subscribed to, apart from the decisions that read them: the
// construct (lib/stripe-events.ts) lists them in its rule and stack output, and the npm package
// compiles lib/ with what it imports, so this file imports nothing (no runtime dependency).

/** The events the endpoint is subscribed to (the stack output lists exactly these). */
export const SUBSCRIBED_EVENT_TYPES = [
  'payment_intent.succeeded',
  'payment_intent.payment_failed',
  'payment_intent.canceled',
  'payment_intent.processing',
  'payment_intent.requires_action',
  'charge.refunded',
  'charge.dispute.created',
  'charge.dispute.closed',
  // Refunds settled by Stripe's word (docs.stripe.com/api/refunds.md, "Events"; since API
  // 2024-10-28.acacia they apply to every refund, changelog "refund-webhook-update"): data.object is
  // a Refund. charge.refund.updated is the older, "selected payment methods" form of refund.updated
  // (same Refund object): subscribed too, for accounts that still send it. docs/decisions.md.
  'refund.created',
  'refund.updated',
  'refund.failed',
  'charge.refund.updated',
] as const;
export type SubscribedEventType = (typeof SUBSCRIBED_EVENT_TYPES)[number];
