// /__fake/: the same inspection and control as the module API, as JSON over HTTP, so that another
// process (a soak worker, the CLI user with curl) can script faults and read the ground truth.
// No authentication: the server only ever listens on 127.0.0.1.
import type { IncomingMessage, ServerResponse } from 'node:http';
import { FAULT_PROFILES, isFaultKind, isFaultProfileName } from './faults.ts';
import type { Endpoint, FakeStripe, FaultMatch, FaultRates, RefundSettleStatus, SettleStatus } from './types.ts';

class ControlError extends Error {
  override name = 'ControlError';
}

const ENDPOINTS: readonly Endpoint[] = ['create', 'retrieve', 'search', 'list', 'capture', 'cancel', 'refund_create', 'refund_retrieve', 'refund_list'];
const SETTLE_STATUSES: readonly SettleStatus[] = ['succeeded', 'canceled', 'requires_payment_method'];
const REFUND_SETTLE_STATUSES: readonly RefundSettleStatus[] = ['succeeded', 'failed', 'canceled'];

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === 'object' && value !== null && !Array.isArray(value);
}

function optionalString(body: Record<string, unknown>, name: string): string | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'string') throw new ControlError(`${name} must be a string`);
  return value;
}

function optionalNumber(body: Record<string, unknown>, name: string): number | undefined {
  const value = body[name];
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'number' || !Number.isFinite(value)) throw new ControlError(`${name} must be a number`);
  return value;
}

function parseMatch(value: unknown): FaultMatch {
  if (value === undefined) return {};
  if (!isRecord(value)) throw new ControlError('match must be an object');
  const endpoint = optionalString(value, 'endpoint');
  if (endpoint !== undefined && !(ENDPOINTS as readonly string[]).includes(endpoint)) {
    throw new ControlError(`match.endpoint must be one of ${ENDPOINTS.join(', ')}`);
  }
  const match: { -readonly [K in keyof FaultMatch]: FaultMatch[K] } = {};
  if (endpoint !== undefined) match.endpoint = endpoint as Endpoint;
  for (const name of ['operationId', 'orderId', 'idempotencyKey', 'paymentIntentId', 'refundId', 'customerId'] as const) {
    const field = optionalString(value, name);
    if (field !== undefined) match[name] = field;
  }
  return match;
}

async function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  let text = '';
  for await (const chunk of req) text += String(chunk);
  if (text.trim() === '') return {};
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    throw new ControlError('body must be JSON');
  }
  if (!isRecord(parsed)) throw new ControlError('body must be a JSON object');
  return parsed;
}

function reply(res: ServerResponse, status: number, body: unknown): void {
  res.writeHead(status, { 'Content-Type': 'application/json' });
  res.end(JSON.stringify(body));
}

export async function handleControl(fake: FakeStripe, req: IncomingMessage, res: ServerResponse, url: URL): Promise<void> {
  const route = `${req.method ?? 'GET'} ${url.pathname}`;
  try {
    const body = req.method === 'POST' ? await readJson(req) : {};
    switch (route) {
      case 'GET /__fake/payment_intents': {
        // Ground truth, manual capture and Connect included: each record's amount_received (what was
        // captured), amount_capturable, status / cancellation_reason (`automatic`: the authorization
        // expired), stripeAccount and authorizationExpiresAtMs. ?account=acct_… (or `platform`) narrows it.
        const operationId = url.searchParams.get('operation_id') ?? undefined;
        const orderId = url.searchParams.get('order_id') ?? undefined;
        const accountParam = url.searchParams.get('account');
        const account = accountParam === null ? undefined : accountParam === 'platform' ? null : accountParam;
        return reply(res, 200, { data: fake.paymentIntents({ operationId, orderId, ...(account !== undefined ? { account } : {}) }) });
      }
      case 'POST /__fake/expire_authorizations':
        // Stripe cancels now every uncaptured authorization whose time is up on the fake's clock.
        return reply(res, 200, { expired: fake.expireAuthorizations() });
      case 'GET /__fake/connected_accounts':
        return reply(res, 200, { data: fake.connectedAccounts() });
      case 'POST /__fake/connected_accounts': {
        const id = optionalString(body, 'id');
        if (id === undefined) throw new ControlError('id is required');
        fake.addConnectedAccount(id);
        return reply(res, 200, { data: fake.connectedAccounts() });
      }
      case 'GET /__fake/refunds': {
        const paymentIntentId = url.searchParams.get('payment_intent') ?? undefined;
        const orderId = url.searchParams.get('order_id') ?? undefined;
        const operationId = url.searchParams.get('operation_id') ?? undefined;
        return reply(res, 200, { data: fake.refunds({ paymentIntentId, orderId, operationId }) });
      }
      case 'GET /__fake/stats':
        return reply(res, 200, fake.stats());
      case 'GET /__fake/requests': {
        const since = Number(url.searchParams.get('since') ?? '0');
        if (!Number.isInteger(since) || since < 0) throw new ControlError('since must be a non-negative integer');
        return reply(res, 200, { data: fake.requests(since) });
      }
      case 'POST /__fake/prune_keys': {
        const olderThanMs = optionalNumber(body, 'olderThanMs');
        const idempotencyKey = optionalString(body, 'idempotencyKey');
        return reply(res, 200, { pruned: fake.pruneKeys({ olderThanMs, idempotencyKey }) });
      }
      case 'POST /__fake/faults': {
        const fault = body.fault;
        if (!isFaultKind(fault)) throw new ControlError(`fault must be a fault kind, got ${JSON.stringify(fault)}`);
        const times = optionalNumber(body, 'times') ?? 1;
        fake.injectFault(parseMatch(body.match), fault, times);
        return reply(res, 200, { ok: true });
      }
      case 'POST /__fake/fault_rates': {
        // Either {profile: 'chaos'} or {rates: {...}}; an optional seed replaces the current one.
        const profile = optionalString(body, 'profile');
        let rates: FaultRates;
        if (profile !== undefined) {
          if (!isFaultProfileName(profile)) throw new ControlError(`unknown profile ${profile}`);
          rates = FAULT_PROFILES[profile];
        } else if (isRecord(body.rates)) {
          rates = body.rates as FaultRates; // validated (kinds and ranges) by setFaultRates
        } else {
          throw new ControlError('give either profile or rates');
        }
        fake.setFaultRates(rates, optionalNumber(body, 'seed'));
        return reply(res, 200, { ok: true });
      }
      case 'POST /__fake/config': {
        const latencyMs = optionalNumber(body, 'latencyMs');
        const searchLagMs = optionalNumber(body, 'searchLagMs');
        const overRefundError = optionalString(body, 'overRefundError');
        if (overRefundError !== undefined && overRefundError !== 'amount_too_large' && overRefundError !== 'no_code') {
          throw new ControlError('overRefundError must be amount_too_large or no_code');
        }
        if (latencyMs !== undefined) fake.setLatency(latencyMs);
        if (searchLagMs !== undefined) fake.setSearchLag(searchLagMs);
        if (overRefundError !== undefined) fake.setOverRefundError(overRefundError);
        return reply(res, 200, { ok: true });
      }
      case 'POST /__fake/settle': {
        const paymentIntentId = optionalString(body, 'paymentIntentId');
        const status = optionalString(body, 'status');
        if (paymentIntentId === undefined) throw new ControlError('paymentIntentId is required');
        if (status === undefined || !(SETTLE_STATUSES as readonly string[]).includes(status)) {
          throw new ControlError(`status must be one of ${SETTLE_STATUSES.join(', ')}`);
        }
        fake.settle(paymentIntentId, status as SettleStatus);
        return reply(res, 200, { ok: true });
      }
      case 'POST /__fake/settle_refund': {
        const refundId = optionalString(body, 'refundId');
        const status = optionalString(body, 'status');
        if (refundId === undefined) throw new ControlError('refundId is required');
        if (status === undefined || !(REFUND_SETTLE_STATUSES as readonly string[]).includes(status)) {
          throw new ControlError(`status must be one of ${REFUND_SETTLE_STATUSES.join(', ')}`);
        }
        fake.settleRefund(refundId, status as RefundSettleStatus);
        return reply(res, 200, { ok: true });
      }
      case 'POST /__fake/dashboard_refund': {
        // A refund made in the Dashboard: a Refund (empty metadata), listed and announced like any other.
        const paymentIntentId = optionalString(body, 'paymentIntentId');
        if (paymentIntentId === undefined) throw new ControlError('paymentIntentId is required');
        return reply(res, 200, fake.dashboardRefund(paymentIntentId, optionalNumber(body, 'amount')));
      }
      case 'POST /__fake/commit_late':
        // Stripe commits now what it answered 500 for, or left in flight (the late-commit faults).
        return reply(res, 200, { committed: fake.commitLate(parseMatch(body.match)) });
      case 'POST /__fake/reset':
        fake.reset();
        return reply(res, 200, { ok: true });
      default:
        return reply(res, 404, { error: { message: `no such control route: ${route}` } });
    }
  } catch (error) {
    // Bad input to the control API (including RangeErrors from the fake's own checks) is the caller's mistake.
    if (error instanceof ControlError || error instanceof RangeError) {
      return reply(res, 400, { error: { message: error.message } });
    }
    throw error;
  }
}
