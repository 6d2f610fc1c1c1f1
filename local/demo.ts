// The demo workload: what a few producer services would put on the queue, sent through the REAL
// producer client (lambdas/producer/client.ts), plus the things producers get wrong.
//
//   orders           N distinct orders; mostly pm_card_visa, some declines (pm_card_chargeDeclined,
//                    pm_card_insufficientFunds) and, on the fake, some pm_fake_processing
//   duplicate sends  R × N repeats of orders already sent, each in a call of its own (a retry after
//                    a timeout, a double click): SQS FIFO drops them within its 5-minute window
//   late duplicates  a tenth of the repeats arrive as if sent after that window (another
//                    MessageDeduplicationId stands for the 5 minutes nobody wants to wait): SQS
//                    delivers them, and the database's one-operation-per-order absorbs them
//   bad messages     sent raw with the SQS client, past the producer's validation: a body that is
//                    not JSON, one against the schema, and an order repeated with another amount —
//                    each must end in rejected_messages, acknowledged, never charged
//   refunds          a share of the orders refunded through the producer's sendRefundRequest,
//                    on the order's FIFO group, one scenario each, in turn (send-report.ts RefundScenario): a
//                    partial refund, a full one, two partials summing to the amount, a repeated
//                    request, the same refund id with another amount, an over-refund, a refund sent
//                    while its charge may still be open, a refund of a declined order
//   duplicate        once everything settled, a few orders charged a second time behind
//   charges          the pipeline's back (another system, another key, the order's metadata): the
//                    product learns it from Stripe's event and refunds the extra PaymentIntent itself
//   connected        (`connect`, on the fake) direct charges on two connected accounts, destination
//   accounts         charges to them with the platform's fee, a refund of a direct charge on each:
//                    local/connect-demo.ts, a section of its own after the platform orders
//   authorizations   (`authorizations`, on the fake) manual-capture charges: one captured in full, one
//                    in part, one canceled, one left to expire: local/authorization-demo.ts, a section
//                    of its own after those
import { createHash } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import { SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import {
  chargeRequestMessage,
  refundRequestMessage,
  sendAuthorizationRequest,
  sendChargeRequests,
  sendRefundRequest,
  type AuthorizationRequest,
  type ChargeRequest,
  type RefundRequest,
} from '../lambdas/producer/client.ts';
import { AnotherSystem, remediesSettled } from './another-system.ts';
import { planAuthorizations, type PlannedAuthorization } from './authorization-demo.ts';
import { planConnectOrders } from './connect-demo.ts';
import { buildLedger, type Ledger, type RunOutcome } from './ledger.ts';
import { isSettled, type Pipeline, type PipelineSnapshot, type SettleResult } from './pipeline.ts';
import { mulberry32 } from './random.ts';
import { emptySendReport, REFUND_SCENARIOS, type RefundScenario, type SendReport } from './send-report.ts';

export interface DemoOptions {
  readonly orders: number;
  /** Duplicate sends per order (0.3 = 30 %). */
  readonly duplicates: number;
  readonly seed: number;
  /** Prefix of the order ids (unique per run). */
  readonly tag: string;
  /** Include pm_fake_processing (only the fake knows it). Default true. */
  readonly processing?: boolean;
  /** Every order's customer; default a few made-up cus_demo_… (the fake accepts any). */
  readonly customerId?: string;
  /** Send the three bad messages. Default true (when there is at least one order). */
  readonly badMessages?: boolean;
  /** Share of the orders that get a refund scenario (0.2 = 20 %). Default 0 (`npm start`: 0.2, --refunds). */
  readonly refunds?: number;
  /** Orders charged a second time behind the pipeline's back once the run settled. Default 0 (`npm start`: 2). */
  readonly duplicateCharges?: number;
  /**
   * Charges on the two connected accounts of local/connect-demo.ts (direct, destination, refunds of
   * direct charges), after the platform orders. Needs a Stripe that has the accounts (the fake:
   * startPipeline gives them to it). Default false (`npm start` on the fake: true).
   */
  readonly connect?: boolean;
  /**
   * Manual-capture charges of local/authorization-demo.ts (captured in full, in part, canceled, left to
   * expire), after the Connect orders. The expiry needs a Stripe that lets an authorization lapse
   * within the run (the fake under the time-lapse). Default false (`npm start` on the fake: true).
   */
  readonly authorizations?: boolean;
}

export interface PlannedRefunds {
  readonly orderId: string;
  readonly scenario: RefundScenario;
  /** The distinct requests the scenario makes (a repeat is one; a conflict is the original and its rival). */
  readonly requests: readonly RefundRequest[];
}

export type SendStep =
  | { readonly kind: 'orders'; readonly requests: readonly ChargeRequest[] }
  | { readonly kind: 'duplicate'; readonly request: ChargeRequest }
  | { readonly kind: 'late_duplicate'; readonly request: ChargeRequest }
  | { readonly kind: 'bad'; readonly reason: 'invalid_json' | 'invalid_body' | 'order_conflict'; readonly body: string; readonly groupId: string }
  /** Through the producer's sendRefundRequest, after `after` was sent (its order, or an earlier refund). */
  | { readonly kind: 'refund'; readonly scenario: RefundScenario; readonly request: RefundRequest; readonly after: string; readonly repeat?: boolean }
  /** A capture or cancel_authorization, through the producer's sendAuthorizationRequest, after its order was sent. */
  | { readonly kind: 'authorization'; readonly request: AuthorizationRequest }
  /** Raw, with a fresh deduplication id: as if sent after SQS's 5-minute window. */
  | { readonly kind: 'late_refund'; readonly scenario: RefundScenario; readonly request: RefundRequest; readonly after: string };

export interface Workload {
  readonly orders: readonly ChargeRequest[];
  readonly steps: readonly SendStep[];
  /** How many orders of each payment method, for the ledger. */
  readonly paymentMethods: Readonly<Record<string, number>>;
  /** The refunded orders, in the order their scenarios were planned. */
  readonly refunds: readonly PlannedRefunds[];
  /** Orders (with a card that succeeds, not refunded) to charge again behind the pipeline's back. */
  readonly duplicateCharges: readonly string[];
  /**
   * The other such orders, in the PRNG's order: taken in turn when a planned one cannot be charged
   * again (its charge did not succeed under the faults, or Stripe declined the second charge).
   */
  readonly duplicateChargeCandidates: readonly string[];
  /** The manual-capture orders and what settles each (none for the one left to expire). */
  readonly authorizations: readonly PlannedAuthorization[];
}

function pick<T>(random: () => number, weighted: readonly (readonly [T, number])[]): T {
  const total = weighted.reduce((sum, [, w]) => sum + w, 0);
  let r = random() * total;
  for (const [value, weight] of weighted) {
    r -= weight;
    if (r < 0) return value;
  }
  return weighted.at(-1)![0];
}

export function buildWorkload(options: DemoOptions): Workload {
  const random = mulberry32(options.seed ^ 0x5eed);
  const methods: (readonly [string, number])[] = [
    ['pm_card_visa', 0.88],
    ['pm_card_mastercard', 0.04],
    ['pm_card_chargeDeclined', 0.03],
    ['pm_card_insufficientFunds', 0.02],
    ...(options.processing === false ? [] : ([['pm_fake_processing', 0.03]] as const)),
  ];
  const width = String(Math.max(1, options.orders)).length;
  const orders: ChargeRequest[] = [];
  const paymentMethods: Record<string, number> = {};
  for (let i = 1; i <= options.orders; i++) {
    const paymentMethod = pick(random, methods);
    paymentMethods[paymentMethod] = (paymentMethods[paymentMethod] ?? 0) + 1;
    orders.push({
      orderId: `${options.tag}-${String(i).padStart(width, '0')}`,
      amount: 100 + Math.floor(random() * 199) * 100 + (random() < 0.5 ? 99 : 0),
      currency: pick(random, [['eur', 5], ['usd', 4], ['gbp', 1]] as const),
      customerId: options.customerId ?? `cus_demo${String(1 + Math.floor(random() * 40)).padStart(3, '0')}`,
      paymentMethod,
    });
  }

  // Duplicates refer to orders sent before them: chosen per chunk among the orders already out.
  // Every tenth one stands for a send after SQS's 5-minute deduplication window.
  const duplicateCount = Math.round(options.orders * Math.max(0, options.duplicates));
  const chunks = Math.ceil(options.orders / 10);
  const steps: SendStep[] = [];
  let made = 0;
  const refunds = planRefunds(orders, options);
  const refundSteps = refundStepsByOrder(refunds);
  for (let c = 0; c < chunks; c++) {
    const chunk = orders.slice(c * 10, c * 10 + 10);
    steps.push({ kind: 'orders', requests: chunk });
    const sentSoFar = Math.min(options.orders, (c + 1) * 10);
    const dueByNow = Math.round((duplicateCount * (c + 1)) / chunks);
    for (; made < dueByNow; made++) {
      const request = orders[Math.floor(random() * sentSoFar)]!;
      steps.push(made % 10 === 9 ? { kind: 'late_duplicate', request } : { kind: 'duplicate', request });
    }
    // A chunk's refunds right behind it: each waits for its order's send, so FIFO puts it after the charge.
    for (const order of chunk) steps.push(...(refundSteps.get(order.orderId) ?? []));
  }

  // Connect: a section of its own (its own PRNG and order ids), so the platform orders, their
  // duplicates, refunds and second charges are those of the seed with it or without.
  const connect = options.connect ? planConnectOrders(options) : null;
  if (connect) {
    for (let c = 0; c < connect.orders.length; c += 10) steps.push({ kind: 'orders', requests: connect.orders.slice(c, c + 10) });
    const connectRefunds = refundStepsByOrder(connect.refunds);
    for (const order of connect.orders) steps.push(...(connectRefunds.get(order.orderId) ?? []));
  }

  // Authorizations: a section of their own too; each capture or cancel right behind its charge (FIFO).
  const authorizing = options.authorizations ? planAuthorizations(options) : null;
  if (authorizing) {
    steps.push({ kind: 'orders', requests: authorizing.orders });
    for (const a of authorizing.authorizations) if (a.settlement) steps.push({ kind: 'authorization', request: a.settlement });
  }

  if (options.badMessages !== false && orders.length > 0) {
    const victim = orders[Math.floor(random() * orders.length)]!;
    steps.push(
      { kind: 'bad', reason: 'invalid_json', groupId: `${options.tag}-garbled`, body: '{"orderId": "garbled", "amount": 12' },
      {
        kind: 'bad',
        reason: 'invalid_body',
        groupId: `${options.tag}-bad-amount`,
        body: JSON.stringify({ orderId: `${options.tag}-bad-amount`, amount: -500, currency: 'EUR', customerId: 'cus_demo001', paymentMethod: 'pm_card_visa' }),
      },
      {
        kind: 'bad',
        reason: 'order_conflict',
        // Same order, same group (so FIFO delivers it after the original), another amount.
        groupId: victim.orderId,
        body: chargeRequestMessage({ ...victim, amount: victim.amount + 100 }).MessageBody,
      },
    );
  }
  const duplicateCharges = pickDuplicateCharges(orders, refunds, options);
  for (const order of [...(connect?.orders ?? []), ...(authorizing?.orders ?? [])]) paymentMethods[order.paymentMethod] = (paymentMethods[order.paymentMethod] ?? 0) + 1;
  return {
    orders: [...orders, ...(connect?.orders ?? []), ...(authorizing?.orders ?? [])],
    steps,
    paymentMethods,
    refunds: connect ? [...refunds, ...connect.refunds] : refunds,
    ...duplicateCharges,
    authorizations: authorizing?.authorizations ?? [],
  };
}

function pickDuplicateCharges(orders: readonly ChargeRequest[], refunds: readonly PlannedRefunds[], options: DemoOptions): Pick<Workload, 'duplicateCharges' | 'duplicateChargeCandidates'> {
  const refunded = new Set(refunds.map((r) => r.orderId));
  const pool = orders.filter((o) => SUCCEEDING.has(o.paymentMethod) && !refunded.has(o.orderId)).map((o) => o.orderId);
  const random = mulberry32(options.seed ^ 0xd0b1e);
  const out: string[] = [];
  for (let i = 0; i < Math.max(0, options.duplicateCharges ?? 0) && pool.length > 0; i++) out.push(pool.splice(Math.floor(random() * pool.length), 1)[0]!);
  return { duplicateCharges: out, duplicateChargeCandidates: out.length > 0 ? pool : [] };
}

const SUCCEEDING = new Set(['pm_card_visa', 'pm_card_mastercard']);
const DECLINING = new Set(['pm_card_chargeDeclined', 'pm_card_insufficientFunds']);

/**
 * Which orders are refunded, and how: round(share × orders) of them, the scenarios in turn, each on an
 * order that suits it (a card that succeeds; a processing one for before_final when there is one; a
 * declined one for failed_charge, replaced by a partial refund when none is left). A PRNG of its own,
 * so that the charges of a seed are the same with refunds or without.
 */
function planRefunds(orders: readonly ChargeRequest[], options: DemoOptions): PlannedRefunds[] {
  const share = Math.max(0, Math.min(1, options.refunds ?? 0));
  const count = Math.round(orders.length * share);
  if (count === 0) return [];
  const random = mulberry32(options.seed ^ 0x4ef0d5);
  const pools = {
    succeeding: orders.filter((o) => SUCCEEDING.has(o.paymentMethod)),
    processing: orders.filter((o) => o.paymentMethod === 'pm_fake_processing'),
    declining: orders.filter((o) => DECLINING.has(o.paymentMethod)),
  };
  const take = (pool: ChargeRequest[]): ChargeRequest | null => (pool.length === 0 ? null : pool.splice(Math.floor(random() * pool.length), 1)[0]!);
  const planned: PlannedRefunds[] = [];
  for (let i = 0; i < count; i++) {
    let scenario: RefundScenario = REFUND_SCENARIOS[i % REFUND_SCENARIOS.length]!;
    let order =
      scenario === 'before_final' ? (take(pools.processing) ?? take(pools.succeeding)) : scenario === 'failed_charge' ? take(pools.declining) : take(pools.succeeding);
    if (order === null && scenario === 'failed_charge') {
      scenario = 'partial';
      order = take(pools.succeeding);
    }
    if (order === null) break; // fewer suitable orders than the share asks for
    const id = (n: number) => `${order.orderId}-r${n}`;
    const refund = (n: number, amount: number): RefundRequest => ({ type: 'refund', orderId: order.orderId, refundId: id(n), amount, reason: 'requested_by_customer' });
    const part = Math.max(1, Math.floor(order.amount * (0.2 + random() * 0.5)));
    const requests: RefundRequest[] =
      scenario === 'full'
        ? [refund(1, order.amount)]
        : scenario === 'split'
          ? [refund(1, part), refund(2, order.amount - part)]
          : scenario === 'conflict'
            ? [refund(1, part), refund(1, part + 1)]
            : scenario === 'over_refund'
              ? [refund(1, order.amount + 100)]
              : scenario === 'failed_charge'
                ? [refund(1, order.amount)]
                : [refund(1, part)];
    planned.push({ orderId: order.orderId, scenario, requests });
  }
  return planned;
}

/** The send steps of each planned refund, keyed by order. */
function refundStepsByOrder(planned: readonly PlannedRefunds[]): Map<string, SendStep[]> {
  const out = new Map<string, SendStep[]>();
  for (const { orderId, scenario, requests } of planned) {
    const [first, second] = requests as [RefundRequest, RefundRequest | undefined];
    const key = refundKey(first);
    const steps: SendStep[] = [{ kind: 'refund', scenario, request: first, after: orderId }];
    if (scenario === 'split') steps.push({ kind: 'refund', scenario, request: second!, after: orderId });
    if (scenario === 'repeat') {
      steps.push({ kind: 'refund', scenario, request: first, after: key, repeat: true }, { kind: 'late_refund', scenario, request: first, after: key });
    }
    // The rival must follow its original into the queue, or the original would be the conflict.
    if (scenario === 'conflict') steps.push({ kind: 'late_refund', scenario, request: second!, after: key });
    out.set(orderId, steps);
  }
  return out;
}

const refundKey = (r: Pick<RefundRequest, 'orderId' | 'refundId'>) => `refund:${r.orderId}:${r.refundId}`;

/**
 * Send the workload; `report` is updated as it goes (the progress view reads it). Steps go out
 * `concurrency` at a time, in order, as several producer services would send them; a repeat of an
 * order waits until the order's own send has been answered, so that "SQS dropped it" is observable
 * (the answer carries the original MessageId). Resolves when everything is sent or `signal` aborts.
 */
export async function sendWorkload(
  sqs: SQSClient,
  queueUrl: string,
  workload: Workload,
  report: SendReport = emptySendReport(),
  signal?: AbortSignal,
  concurrency = 8,
): Promise<SendReport> {
  const messageIds = new Map<string, string>();
  const sent = new Map<string, PromiseWithResolvers<void>>();
  const whenSent = (orderId: string) => sent.get(orderId)?.promise ?? Promise.resolve();
  const stamp = () => {
    const now = new Date();
    report.firstSendAt ??= now;
    report.lastSendAt = now;
  };
  const options = signal ? { abortSignal: signal } : {};
  report.ordersPlanned = workload.orders.length;
  let lateSerial = 0;

  const run = async (step: SendStep): Promise<void> => {
    switch (step.kind) {
      case 'orders': {
        stamp();
        try {
          const results = await sendChargeRequests(sqs, queueUrl, step.requests, options);
          for (const result of results) {
            if (result.ok) {
              messageIds.set(result.orderId, result.messageId);
              report.sentOrderIds.push(result.orderId);
              report.ordersSent += 1;
              report.messagesEnqueued += 1;
            } else {
              report.sendFailures += 1;
            }
          }
        } finally {
          for (const request of step.requests) sent.get(request.orderId)?.resolve();
        }
        break;
      }
      case 'duplicate': {
        await whenSent(step.request.orderId);
        stamp();
        // A call of its own, as a retrying producer would make it.
        const [result] = await sendChargeRequests(sqs, queueUrl, [step.request], options);
        report.duplicateSends += 1;
        if (result?.ok && result.messageId === messageIds.get(step.request.orderId)) report.duplicatesDroppedBySqs += 1;
        else if (result?.ok) report.messagesEnqueued += 1;
        break;
      }
      case 'late_duplicate':
        await whenSent(step.request.orderId);
        stamp();
        await sendRaw(sqs, queueUrl, chargeRequestMessage(step.request).MessageBody, step.request.orderId, `late-${++lateSerial}`, signal);
        report.duplicateSends += 1;
        report.lateDuplicates += 1;
        report.messagesEnqueued += 1;
        break;
      case 'bad':
        // The conflicting repeat must follow its original into the queue (same group: FIFO order).
        await whenSent(step.groupId);
        stamp();
        await sendRaw(sqs, queueUrl, step.body, step.groupId, step.reason, signal);
        report.badMessages[step.reason] = (report.badMessages[step.reason] ?? 0) + 1;
        report.messagesEnqueued += 1;
        break;
      case 'refund': {
        await whenSent(step.after);
        stamp();
        report.refunds.scenarios[step.request.orderId] = step.scenario;
        const key = refundKey(step.request);
        try {
          const result = await sendRefundRequest(sqs, queueUrl, step.request, options);
          report.refunds.sent += 1;
          report.sentRefunds.push({ orderId: step.request.orderId, refundId: step.request.refundId });
          if (step.repeat && result.messageId === messageIds.get(key)) report.refunds.droppedBySqs += 1;
          else report.messagesEnqueued += 1;
          if (!step.repeat) messageIds.set(key, result.messageId);
        } catch (error) {
          // An order whose refund did not go out is still judged (its net amount is then the charge's).
          if (signal?.aborted) throw error;
          report.refunds.failures += 1;
        } finally {
          if (!step.repeat) sent.get(key)?.resolve();
        }
        break;
      }
      case 'authorization':
        await whenSent(step.request.orderId);
        stamp();
        await sendAuthorizationRequest(sqs, queueUrl, step.request, options);
        report.messagesEnqueued += 1;
        break;
      case 'late_refund':
        await whenSent(step.after);
        stamp();
        await sendRaw(sqs, queueUrl, refundRequestMessage(step.request).MessageBody, step.request.orderId, `late-refund-${++lateSerial}`, signal);
        report.refunds.sent += 1;
        report.sentRefunds.push({ orderId: step.request.orderId, refundId: step.request.refundId });
        report.refunds.late += 1;
        report.messagesEnqueued += 1;
        break;
    }
  };

  let next = 0;
  let failure: unknown;
  const worker = async () => {
    while (next < workload.steps.length && !signal?.aborted && failure === undefined) {
      const step = workload.steps[next++]!;
      // Registered when dispatched, before any later step can look for it.
      if (step.kind === 'orders') for (const request of step.requests) sent.set(request.orderId, Promise.withResolvers<void>());
      if (step.kind === 'refund' && !step.repeat) sent.set(refundKey(step.request), Promise.withResolvers<void>());
      try {
        await run(step);
      } catch (error) {
        failure ??= error;
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: Math.max(1, concurrency) }, worker));
    if (failure !== undefined && !signal?.aborted) throw failure;
  } finally {
    for (const deferred of sent.values()) deferred.resolve();
    report.done = true;
  }
  return report;
}

/**
 * The duplicate-charge remedy, end to end: a second succeeded PaymentIntent for each of these (settled)
 * orders, made behind the pipeline's back — another system with the same key to the account, another
 * idempotency key, the order's metadata. Only Stripe's event tells the product (a contradiction: the
 * charge operation holds another PaymentIntent), so this needs the fake's webhooks; it then waits until
 * each extra PaymentIntent has its remedy refund operation and everything settled again.
 */
async function chargeAgainBehindItsBack(
  pipeline: Pipeline,
  orderIds: readonly string[],
  candidates: readonly string[],
  send: SendReport,
  options: RunWorkloadOptions,
): Promise<SettleResult['kind']> {
  if (!pipeline.fakeStripe || !pipeline.webhooks) return 'settled'; // nobody would tell the product
  const another = new AnotherSystem(pipeline.fakeStripe.url, { maxNetworkRetries: 3, timeoutMs: 5_000 });
  const extra: string[] = [];
  // The planned orders first, then the candidates, until as many second charges succeeded as were
  // planned: under faults a planned order's own charge may have failed, or Stripe may decline the
  // second one (test/local/pipeline-flaky once made none of 1).
  const left = [...orderIds, ...candidates];
  while (extra.length < orderIds.length && left.length > 0) {
    const tried = await another.chargeAgain(pipeline.db, left, orderIds.length - extra.length);
    if (tried.length === 0) break; // none of the rest has a succeeded charge
    for (const { orderId, paymentIntent } of tried) {
      left.splice(left.indexOf(orderId), 1);
      if (paymentIntent?.status !== 'succeeded') continue;
      send.duplicateCharges[orderId] = paymentIntent.id;
      extra.push(paymentIntent.id);
    }
    // No answer (a fault the SDK's retries did not get past): it may have charged all the same, so no
    // other order is charged in its place — one extra charge more than planned would be a second finding.
    if (tried.some((t) => t.paymentIntent === null)) break;
  }
  if (extra.length === 0) return 'settled';
  const deadline = Date.now() + Math.max(30_000, options.timeoutMs / 2);
  for (;;) {
    const snapshot = await pipeline.snapshot();
    options.onSnapshot?.(snapshot, send);
    if ((await remediesSettled(pipeline.db, extra)) && isSettled(snapshot)) return 'settled';
    if (options.signal?.aborted) return 'aborted';
    if (Date.now() >= deadline) return 'timeout';
    await sleep(250, undefined, options.signal ? { signal: options.signal } : {}).catch(() => {});
  }
}

/**
 * The authorizations nothing captures or cancels: Stripe lets them lapse after its validity (the
 * time-lapse's, local/pipeline.ts; 7 days for real), and the reconciler's expiry check, once the
 * validity and its margin have passed, reads each canceled and records it (Authorization Expired).
 * Waits until every one that authorized has its final settlement row and everything settled again.
 */
async function waitForExpiries(pipeline: Pipeline, orderIds: readonly string[], send: SendReport | null, options: RunWorkloadOptions): Promise<SettleResult['kind']> {
  const deadline = Date.now() + Math.max(60_000, options.timeoutMs / 2);
  for (;;) {
    const snapshot = await pipeline.snapshot();
    options.onSnapshot?.(snapshot, send);
    const { rows } = await pipeline.db.query<{ n: number }>(
      `SELECT count(*)::int AS n FROM payment_operations c
        WHERE c.order_id = ANY($1::text[]) AND c.kind = 'charge' AND c.capture_method = 'manual' AND c.status = 'succeeded'
          AND NOT EXISTS (SELECT 1 FROM payment_operations s WHERE s.parent_operation_id = c.id
                           AND s.kind IN ('capture', 'cancel_authorization') AND s.status IN ('succeeded', 'failed'))`,
      [orderIds],
    );
    if (rows[0]!.n === 0 && isSettled(snapshot)) return 'settled';
    if (options.signal?.aborted) return 'aborted';
    if (Date.now() >= deadline) return 'timeout';
    await sleep(250, undefined, options.signal ? { signal: options.signal } : {}).catch(() => {});
  }
}

/**
 * Past the producer client. The deduplication id differs from the producer's (a hash of the order
 * id and the request's parameters) because these stand for messages sent more than 5 minutes after
 * the original, when SQS no longer remembers it.
 */
async function sendRaw(sqs: SQSClient, queueUrl: string, body: string, groupId: string, salt: string, signal?: AbortSignal): Promise<void> {
  await sqs.send(
    new SendMessageCommand({
      QueueUrl: queueUrl,
      MessageBody: body,
      MessageGroupId: groupId,
      MessageDeduplicationId: createHash('sha256').update(`late:${groupId}:${salt}:${body}`).digest('hex'),
    }),
    signal ? { abortSignal: signal } : {},
  );
}

// ── One run of a workload through a started pipeline (npm start, the end-to-end tests, a soak) ────

export interface RunWorkloadOptions {
  /** Give up waiting for the pipeline to settle after this long. */
  readonly timeoutMs: number;
  /** Aborts sending and waiting (Ctrl-C); the ledger is still built. */
  readonly signal?: AbortSignal;
  /** Each snapshot taken while waiting (the progress view). */
  readonly onSnapshot?: (snapshot: PipelineSnapshot, send: SendReport | null) => void;
  /** Keep running after the workload (`--serve`) until `signal` aborts. */
  readonly serve?: boolean;
  /** Concurrent producer calls. Default 8. */
  readonly sendConcurrency?: number;
  /** What the run waits for when the counts alone would not say (the progress view's notes). */
  readonly onNote?: (line: string) => void;
}

export interface WorkloadRun {
  readonly outcome: RunOutcome;
  readonly send: SendReport | null;
  readonly ledger: Ledger;
  /** Counters after the intake stopped. */
  readonly snapshot: PipelineSnapshot;
}

/**
 * Creates Stripe committed late (the chaos profile's faults) came after the re-issues they allowed.
 * With events, Stripe's event hands each late PaymentIntent to the remedy; without, only the watch
 * after the re-issue finds it — at its last look, after the retired key has aged out, which the run
 * would otherwise end before. Once nothing is pending at Stripe, the watches' next looks are brought
 * forward (as if their hours had passed) and the run waits for them and what they start.
 */
async function watchLastLooks(pipeline: Pipeline, options: RunWorkloadOptions): Promise<SettleResult['kind']> {
  if ((pipeline.fakeStripe?.stats().lateCommitsMade ?? 0) === 0) return 'settled';
  await pipeline.db.query('UPDATE payment_operation_watches SET next_check_at = now() WHERE next_check_at > now()');
  const waited = await pipeline.waitUntilSettled({ intakeDone: () => true, timeoutMs: Math.max(30_000, options.timeoutMs / 2), ...(options.signal ? { signal: options.signal } : {}) });
  return waited.kind;
}

/**
 * Send the workload, wait until everything accepted is settled (or in review) and every outcome is
 * published, stop the intake, and judge the run. The pipeline is left running (its data and fakes
 * readable) for the caller to inspect and stop.
 */
export async function runWorkload(pipeline: Pipeline, workload: Workload | null, options: RunWorkloadOptions): Promise<WorkloadRun> {
  const send = emptySendReport();
  const sending = workload
    ? sendWorkload(pipeline.sqs.client, pipeline.sqs.queueUrl, workload, send, options.signal, options.sendConcurrency).catch((error: unknown) => {
        send.done = true;
        if (!options.signal?.aborted) throw error;
        return send;
      })
    : Promise.resolve(Object.assign(send, { done: true }));
  // Fail fast if the producer side breaks (fauxqs gone, …) instead of waiting for the timeout.
  let sendError: unknown;
  sending.catch((error: unknown) => (sendError = error));
  const waited = await pipeline.waitUntilSettled({
    intakeDone: () => send.done && !options.serve,
    timeoutMs: options.serve ? Number.MAX_SAFE_INTEGER : options.timeoutMs,
    ...(options.signal ? { signal: options.signal } : {}),
    onSnapshot: (s) => {
      if (sendError !== undefined) throw sendError;
      options.onSnapshot?.(s, workload ? send : null);
    },
  });
  await sending.catch(() => {});
  let outcomeOfWait = waited.kind;
  if (waited.kind === 'settled' && workload && workload.duplicateCharges.length > 0 && !options.serve) {
    options.onNote?.(
      `all settled; now charging ${workload.duplicateCharges.length} order(s) again behind the pipeline's back, and waiting for its remedy to refund each extra PaymentIntent (told by Stripe's events)…`,
    );
    outcomeOfWait = await chargeAgainBehindItsBack(pipeline, workload.duplicateCharges, workload.duplicateChargeCandidates, send, options);
  }
  const lapsing = workload?.authorizations.filter((a) => a.settlement === null).map((a) => a.orderId) ?? [];
  if (outcomeOfWait === 'settled' && lapsing.length > 0 && !options.serve) {
    options.onNote?.(`all settled; now waiting for ${lapsing.length} uncaptured authorization(s) to lapse at Stripe and the reconciler's expiry check to record them (Authorization Expired)…`);
    outcomeOfWait = await waitForExpiries(pipeline, lapsing, workload ? send : null, options);
  }
  if (outcomeOfWait === 'settled' && !options.serve) outcomeOfWait = await watchLastLooks(pipeline, options);
  await pipeline.stopIntake();
  const snapshot = await pipeline.snapshot();
  // --serve ends with Ctrl-C: a run whose last message had been settled by then is a settled run.
  const outcome: RunOutcome =
    outcomeOfWait === 'settled' || (outcomeOfWait === 'aborted' && options.serve && isSettled(snapshot)) ? 'settled' : outcomeOfWait === 'timeout' ? 'timeout' : 'interrupted';
  const ledger = await buildLedger({ pipeline, outcome, send: workload ? send : null, finishedAt: new Date(), snapshot, serve: options.serve ?? false });
  return { outcome, send: workload ? send : null, ledger, snapshot };
}
