// Human-readable output of an OpsResponse: tables and short sentences for a person on call. Pure:
// the same response renders the same text whichever entry point produced it.
import type { AuditEvent } from '../payments/audit-trail.ts';
import type { OpsResponse } from './response.ts';
import type { OperationDetailResult, ResultOf } from './results.ts';

export interface Rendered {
  readonly stdout: string[];
  readonly stderr: string[];
}

// ── Formatting helpers ───────────────────────────────────────────────────────────────────────────

/** 1999 eur → "19.99 EUR"; 500 jpy → "500 JPY" (Intl knows each currency's minor units). */
export function formatAmount(amount: number, currency: string): string {
  const code = currency.toUpperCase();
  let digits = 2;
  try {
    digits = new Intl.NumberFormat('en', { style: 'currency', currency: code }).resolvedOptions().maximumFractionDigits ?? 2;
  } catch {
    // Not an ISO code Intl knows: show minor units as they are.
    return `${amount} ${currency} (minor units)`;
  }
  return `${(amount / 10 ** digits).toFixed(digits)} ${code}`;
}

export function formatSeconds(total: number): string {
  const s = Math.max(0, Math.round(total));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m ${String(s % 60).padStart(2, '0')}s`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${String(m % 60).padStart(2, '0')}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

const dash = (value: string | number | null | undefined): string => (value === null || value === undefined || value === '' ? '—' : String(value));

function clip(text: string, width: number): string {
  const flat = text.replace(/\s+/g, ' ');
  return flat.length <= width ? flat : `${flat.slice(0, width - 1)}…`;
}

export function table(headers: readonly string[], rows: readonly (readonly string[])[]): string[] {
  const widths = headers.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? '').length)));
  const line = (cells: readonly string[]) =>
    cells
      .map((c, i) => (i === cells.length - 1 ? c : c.padEnd(widths[i]!)))
      .join('  ')
      .trimEnd();
  return [line(headers), ...rows.map(line)];
}

const indent = (lines: readonly string[], by = '  ') => lines.map((l) => `${by}${l}`);

// ── Per command ──────────────────────────────────────────────────────────────────────────────────

function reviewList(r: ResultOf['review list']): string[] {
  if (r.total === 0) return [`The review queue is empty (as of ${r.asOf}).`];
  return [
    `${r.total} operation(s) in review${r.operations.length < r.total ? `, showing the oldest ${r.operations.length}` : ''} (as of ${r.asOf}):`,
    ...table(
      ['IN REVIEW', 'OPERATION', 'KIND', 'ORDER', 'REFUND ID', 'PAYMENT INTENT', 'AMOUNT', 'STATUS', 'GEN', 'REASON'],
      r.operations.map((op) => [
        formatSeconds(op.inReviewSeconds),
        op.id,
        op.kind,
        clip(op.orderId, 40),
        op.refund ? clip(op.refund.refundId, 40) : '—',
        // A charge's own PaymentIntent, if known; a refund's: the one it refunds.
        dash(op.refund ? op.refund.paymentIntent : op.externalId),
        formatAmount(op.amount, op.currency),
        op.status,
        String(op.keyGeneration),
        (op.refundsWaiting > 0 ? `[${op.refundsWaiting} refund(s) of this order wait for it] ` : '') + clip(op.reviewReason ?? '', 100),
      ]),
    ),
    '',
    'Next: npm run ops -- review show <operation>',
  ];
}

function auditRows(events: readonly AuditEvent[]): string[] {
  return table(
    ['#', 'TIME', 'ACTOR', 'ACTION', 'STEP', 'STATUS', 'GEN', 'STRIPE ID', 'ERROR', 'DETAIL'],
    events.map((e) => [
      String(e.id),
      e.occurredAt,
      e.actor,
      e.action,
      dash(e.step),
      e.fromStatus === e.toStatus ? dash(e.toStatus) : `${dash(e.fromStatus)}→${dash(e.toStatus)}`,
      dash(e.keyGeneration),
      dash(e.externalId),
      dash([e.errorClass, e.errorCode].filter(Boolean).join(' ')),
      clip(JSON.stringify(e.detail), 120),
    ]),
  );
}

/** Where the operation is at Stripe: the platform, or the connected account every request is made as; a destination charge's account and the fee. */
function connectLine(op: OperationDetailResult['operation']): string {
  const where = op.account ? `Stripe account ${op.account} (every Stripe request of the operation is made as it)` : 'Stripe account: the platform';
  const destination = op.transferDestination ? `   transfer destination ${op.transferDestination}` : '';
  const fee = op.applicationFeeAmount !== null ? `   application fee ${formatAmount(op.applicationFeeAmount, op.currency)} (${op.applicationFeeAmount} ${op.currency})` : '';
  return `${where}${destination}${fee}`;
}

/** The evidence is read as the operation's account (review.ts gatherStripeEvidence): say so. */
const asWhom = (op: OperationDetailResult['operation']): string => (op.account ? `, as ${op.account}` : ', on the platform');

function detail(r: OperationDetailResult): string[] {
  const op = r.operation;
  const since = op.inReview ? ` — IN REVIEW since ${op.updatedAt} (${formatSeconds((Date.parse(r.asOf) - Date.parse(op.updatedAt)) / 1000)})` : '';
  const out = [
    `${op.kind === 'refund' ? 'Refund operation' : 'Operation'} ${op.id}${since}`,
    ...indent([
      `order ${op.orderId}   ${formatAmount(op.amount, op.currency)} (${op.amount} ${op.currency})   status ${op.status}`,
      ...(op.refund
        ? [`refund id ${op.refund.refundId}   reason ${dash(op.refund.reason)}   of charge ${op.refund.chargeOperationId}   PaymentIntent refunded ${dash(op.refund.paymentIntent)}`]
        : []),
      ...(op.refund?.failedAfterSuccess
        ? [`succeeded, then FAILED at Stripe (${op.refund.failedAfterSuccess.failureReason ?? 'no reason'}; recorded ${op.refund.failedAfterSuccess.at}): nothing was given back, the amount is refundable again`]
        : []),
      ...(op.reviewReason ? [`review reason: ${op.reviewReason}`] : []),
      `customer ${op.customerId}   payment method ${op.paymentMethod}`,
      connectLine(op),
      `key generation ${op.keyGeneration} (${op.idempotencyKey})   external id ${dash(op.externalId)}   attempts ${op.attempts}`,
      `first attempt ${dash(op.firstAttemptedAt)}   next attempt ${dash(op.nextAttemptAt)}   lease until ${dash(op.leaseUntil)}`,
      ...(op.lastError ? [`last error: ${clip(op.lastError, 160)}`] : []),
      `created ${op.createdAt}   updated ${op.updatedAt}   settled ${dash(op.settledAt)}`,
    ]),
    '',
  ];
  if (r.stripe && r.stripe.kind === 'refund') {
    const s = r.stripe;
    out.push(`Stripe (checked ${s.checkedAt}${asWhom(op)}; List of ${dash(s.refundedPaymentIntent)}'s refunds, all key generations, and every Refund id we know):`);
    if (s.refunds.length === 0) out.push('  no Refund of this operation found');
    else {
      out.push(
        ...indent(
          table(
            ['REFUND', 'STATUS', 'AMOUNT', 'PAYMENT INTENT', 'GEN', 'FOUND BY'],
            s.refunds.map((x) => [x.id, x.status, formatAmount(x.amount, x.currency), dash(x.paymentIntent), dash(x.metadata.key_generation), x.foundBy.join('+')]),
          ),
        ),
      );
    }
    for (const x of s.unrelated) {
      out.push(`  not this operation's: ${x.id} ${x.status} ${formatAmount(x.amount, x.currency)} (metadata.operation_id ${dash(x.metadata.operation_id)}, refund id ${dash(x.metadata.refund_id)})`);
    }
    if (s.missing.length > 0) out.push(`  ids we hold that Stripe does not know: ${s.missing.join(', ')}`);
    for (const p of s.problems) out.push(`  INCOMPLETE: ${p}`);
  } else if (r.stripe) {
    const s = r.stripe;
    out.push(`Stripe (checked ${s.checkedAt}${asWhom(op)}; Search by metadata.operation_id, all key generations, and every id we know):`);
    if (s.paymentIntents.length === 0) out.push('  no PaymentIntent found for this operation');
    else {
      out.push(
        ...indent(
          table(
            ['PAYMENT INTENT', 'STATUS', 'AMOUNT', 'GEN', 'CREATED', 'FOUND BY'],
            s.paymentIntents.map((pi) => [pi.id, pi.status, formatAmount(pi.amount, pi.currency), dash(pi.metadata.key_generation), dash(pi.created), pi.foundBy.join('+')]),
          ),
        ),
      );
    }
    for (const pi of s.unrelated) out.push(`  not this operation's: ${pi.id} ${pi.status} (metadata.operation_id ${dash(pi.metadata.operation_id)})`);
    if (s.missing.length > 0) out.push(`  ids we hold that Stripe does not know: ${s.missing.join(', ')}`);
    for (const p of s.problems) out.push(`  INCOMPLETE: ${p}`);
  } else {
    out.push(`Stripe: not looked up (${r.stripeSkipped ?? 'not asked'})`);
  }
  out.push('');
  if (r.options) {
    const o = r.options;
    const reason = '--reason "…"';
    out.push('What you can do:');
    out.push(
      o.resolveSucceeded.length > 0
        ? `  resolve as succeeded: npm run ops -- review resolve ${op.id} --as succeeded ${o.proofFlag} ${o.resolveSucceeded[0]} ${reason}`
        : o.notAcceptable.length > 0
          ? `  resolve as succeeded: refused — ${o.notAcceptable.map((n) => n.reason).join('; ')}`
          : `  resolve as succeeded: no succeeded ${op.kind === 'refund' ? 'Refund' : 'PaymentIntent'} of this operation found`,
    );
    out.push(
      o.resolveFailed.allowed
        ? `  resolve as failed:    npm run ops -- review resolve ${op.id} --as failed ${reason}`
        : `  resolve as failed:    refused — ${o.resolveFailed.reason}`,
    );
    out.push(
      o.reissue.allowed
        ? `  reissue (new key):    npm run ops -- review reissue ${op.id} --confirm-no-charge ${reason}`
        : `  reissue (new key):    refused — ${o.reissue.reason}`,
    );
    out.push('');
  }
  if (r.orderRefunds.length > 0) {
    out.push(
      `Refund operations of order ${op.orderId}:`,
      ...indent(
        table(
          ['OPERATION', 'REFUND ID', 'AMOUNT', 'STATUS', 'REFUND', 'OF PAYMENT INTENT', 'REVIEW / LAST ERROR'],
          r.orderRefunds.map((x) => [
            `${x.id}${x.id === op.id ? ' (this)' : ''}`,
            x.refund?.refundId ?? '—',
            formatAmount(x.amount, x.currency),
            `${x.status}${x.inReview ? ' (review)' : ''}`,
            dash(x.externalId),
            dash(x.refund?.paymentIntent),
            clip(x.reviewReason ?? x.lastError ?? '—', 80),
          ]),
        ),
      ),
      '',
    );
  }
  out.push(`Audit trail (${r.auditTrail.length} events):`, ...indent(auditRows(r.auditTrail)), '');
  if (r.outcomeEvents.length > 0) {
    out.push(
      'Outcome events (outbox):',
      ...indent(
        table(
          ['EVENT', 'TYPE', 'CREATED', 'PUBLISHED', 'ATTEMPTS', 'LAST ERROR'],
          r.outcomeEvents.map((e) => [e.eventId, e.eventType, e.createdAt, dash(e.publishedAt), String(e.attempts), dash(e.lastError)]),
        ),
      ),
      '',
    );
  }
  if (r.rejectedMessages.length > 0) {
    out.push(
      'Rejected messages for this order:',
      ...indent(table(['RECEIVED', 'MESSAGE', 'CODE', 'REASON'], r.rejectedMessages.map((m) => [m.receivedAt, m.messageId, m.reasonCode, clip(m.reason, 100)]))),
    );
  }
  return out;
}

function rejected(r: ResultOf['rejected list']): string[] {
  if (r.total === 0) return [`No rejected messages match (as of ${r.asOf}).`];
  const out = [
    `${r.total} rejected message(s)${r.messages.length < r.total ? `, showing the newest ${r.messages.length}` : ''} (as of ${r.asOf}):`,
    ...table(
      ['RECEIVED', 'MESSAGE', 'CODE', 'ORDER', 'BYTES', 'REASON'],
      r.messages.map((m) => [m.receivedAt, m.messageId, m.reasonCode, dash(m.orderId), m.bodyBytes === null ? `removed (${m.bodyRemoved?.why ?? 'unknown'})` : String(m.bodyBytes), clip(m.reason, 100)]),
    ),
  ];
  for (const m of r.messages) if (m.rawBody !== undefined) out.push('', `body of ${m.messageId}:`, m.rawBody);
  return out;
}

function refundsList(r: ResultOf['refunds list']): string[] {
  const c = r.charge;
  const head = `order ${r.orderId}: charge ${c.id} ${c.status}${c.inReview ? ' (in review)' : ''}, ${c.amount} ${c.currency}; refunded ${r.refunded}${r.reversed > 0 ? `, failed at Stripe after succeeding ${r.reversed}` : ''}, in flight ${r.inFlight}, left ${r.left} (as of ${r.asOf})`;
  if (r.refunds.length === 0) return [head, 'No refund operations.'];
  return [
    head,
    ...table(
      ['OPERATION', 'REFUND ID', 'AMOUNT', 'REASON', 'STATUS', 'REFUND', 'OF PAYMENT INTENT', 'CREATED', 'LAST ERROR / REVIEW'],
      r.refunds.map((x) => [
        x.id,
        x.refundId,
        `${x.amount} ${x.currency}`,
        dash(x.refundReason),
        x.failedAfterSuccess ? `succeeded, then failed at Stripe (${x.failedAfterSuccess.failureReason ?? 'no reason'})` : `${x.status}${x.inReview ? ' (review)' : ''}`,
        dash(x.externalId),
        `${dash(x.refund?.paymentIntent)}${x.refundedPaymentIntent ? ' (duplicate)' : ''}`,
        x.createdAt,
        clip(x.reviewReason ?? x.lastError ?? '—', 80),
      ]),
    ),
  ];
}

function findings(r: ResultOf['findings list']): string[] {
  if (r.total === 0) return [`No findings match (as of ${r.asOf}).`];
  return [
    `${r.total} finding(s)${r.findings.length < r.total ? `, showing the oldest ${r.findings.length}` : ''} (as of ${r.asOf}):`,
    ...table(
      // The Stripe object the finding is about: a PaymentIntent (pi_…), or a Refund (re_…) for a refund's.
      ['ID', 'FOUND', 'KIND', 'STRIPE OBJECT', 'STATUS', 'AMOUNT', 'ORDER', 'OPERATION', 'RESOLVED', 'REASON'],
      r.findings.map((f) => [
        String(f.id),
        f.foundAt,
        f.kind,
        f.paymentIntentId,
        dash(f.status),
        f.amount === null ? '—' : `${f.amount} ${f.currency ?? ''}`.trim(),
        dash(f.orderId),
        dash(f.operationId ?? f.claimedOperationId),
        f.resolvedAt ? `${f.resolvedAt} by ${f.resolvedBy}` : '—',
        clip(f.reason, 100),
      ]),
    ),
  ];
}

function stats(r: ResultOf['stats']): string[] {
  const o = r.operations;
  return [
    `As of ${r.asOf}`,
    ...table(
      ['', ''],
      [
        [
          'operations',
          r.totalsEstimated
            ? `≈ ${o.total} total: ${o.pending} pending, ${o.unknown} unknown, ≈ ${o.succeeded} succeeded, ≈ ${o.failed} failed (settled figures estimated from the table's statistics)`
            : `${o.total} total: ${o.pending} pending, ${o.unknown} unknown, ${o.succeeded} succeeded, ${o.failed} failed`,
        ],
        ['open (not in review)', `${r.open.pending} pending, ${r.open.unknown} unknown (due now ${r.open.dueNow}, leased ${r.open.leased})`],
        [
          'oldest open',
          r.open.oldestOperationId ? `${formatSeconds(r.open.oldestAgeSeconds)} — ${r.open.oldestOperationId} (created ${r.open.oldestCreatedAt})` : '—',
        ],
        [
          'review queue',
          `${r.review.size}${r.review.oldestOperationId ? ` (oldest in review ${formatSeconds(r.review.oldestAgeSeconds)} — ${r.review.oldestOperationId})` : ''}`,
        ],
        ['rejected (24 h)', String(r.rejected.last24h)],
        [
          'unpublished events',
          `${r.outbox.unpublished}${r.outbox.unpublished > 0 ? ` (oldest ${formatSeconds(r.outbox.oldestUnpublishedAgeSeconds)})` : ''}`,
        ],
      ],
    ).slice(1),
  ];
}

function actionLines(response: Extract<OpsResponse, { ok: true }>): string[] {
  switch (response.command) {
    case 'review resolve': {
      const r = response.result;
      const e = r.outcomeEvent;
      return [
        `Resolved ${r.operation.id} (order ${r.operation.orderId}) as ${r.operation.status}${r.operation.externalId ? ` — ${r.operation.externalId}` : ''}.`,
        `  audit event #${r.auditEvent.id} by ${r.auditEvent.actor}: ${r.auditEvent.action}`,
        e
          ? `  outcome event ${e.eventType} ${e.eventId}: ${r.published === true ? 'published' : r.published === false ? 'not published yet; the relay retries' : 'in the outbox; the reconciler publishes it'}`
          : '  no outcome event',
        ...(r.remedies ?? []).map((m) =>
          m.refundOperationId
            ? `  duplicate ${m.paymentIntentId}: refund operation ${m.refundOperationId} ${m.status ?? ''} (${m.created ? 'created' : 'existed already'})`
            : `  duplicate ${m.paymentIntentId}: not refunded (${m.disposition})`,
        ),
        ...r.warnings.map((w) => `WARNING: ${w}`),
      ];
    }
    case 'review reissue': {
      const r = response.result;
      return [
        `Reissued ${r.operation.id} (order ${r.operation.orderId}): key generation ${r.operation.keyGeneration - 1} → ${r.operation.keyGeneration}.`,
        `  new key ${r.newKey} (the old key ${r.previousKey} is never sent again)`,
        `  status ${r.operation.status}, due ${r.operation.nextAttemptAt}: the reconciler's next sweep attempts it`,
        `  audit event #${r.auditEvent.id} by ${r.auditEvent.actor}: ${r.auditEvent.action}`,
      ];
    }
    case 'refunds create': {
      const r = response.result;
      return [
        `Refund ${r.operation.id} of order ${r.operation.orderId}: ${r.operation.amount} ${r.operation.currency}, ${r.operation.status}${r.operation.externalId ? ` — ${r.operation.externalId}` : ''} (${r.disposition ?? 'not executed'}).`,
        ...(r.auditEvent ? [`  audit event #${r.auditEvent.id} by ${r.auditEvent.actor}: ${r.auditEvent.action}`] : []),
        ...(r.operation.status === 'pending' || r.operation.status === 'unknown' ? ["  open: the reconciler settles it (it waits for the order's charge if that is not final)"] : []),
      ];
    }
    case 'refunds remedy': {
      const { charge, remedy, refund } = response.result;
      return [
        `Duplicate-charge remedy of ${remedy.paymentIntentId} (order ${charge.orderId}, charge ${charge.id} keeps ${charge.externalId}):`,
        refund
          ? `  refund operation ${refund.id}, ${refund.amount} ${refund.currency}, ${refund.status}${refund.externalId ? ` — ${refund.externalId}` : ''} (${remedy.created ? 'created' : 'existed already'}; ${remedy.disposition ?? 'not executed'})`
          : `  no refund operation: ${remedy.disposition ?? 'unknown'}`,
        ...(refund && (refund.status === 'pending' || refund.status === 'unknown') ? ['  open: the reconciler settles it'] : []),
      ];
    }
    case 'findings resolve': {
      const f = response.result.finding;
      return [`Resolved finding ${f.id} (${f.kind}, ${f.paymentIntentId}) by ${f.resolvedBy} at ${f.resolvedAt}.`];
    }
    case 'erase customer': {
      const e = response.result.erasure;
      return [
        `Erasure #${e.erasureId}: ${e.operations} operation(s) erased now (${e.operationIds.length} of the customer in all), ${e.stripeEvents} Stripe event payload(s) and ${e.rejectedBodies} rejected body(ies) removed.`,
        '  amounts, currencies, states, order and Stripe ids stay; every operation has an audit line of it',
      ];
    }
    case 'review note':
      return [`Noted on ${response.result.operation.id}: audit event #${response.result.auditEvent.id} by ${response.result.auditEvent.actor}.`];
    default:
      return [];
  }
}

export function render(response: OpsResponse, json: boolean): Rendered {
  if (json) {
    // Machines get the whole document on stdout, failures included (with the exit code inside too).
    return { stdout: [JSON.stringify(response, null, 2)], stderr: [] };
  }
  if (!response.ok) {
    const lines = [`${response.exitCode === 2 ? 'error' : 'refused'}: ${response.error.message}`];
    if (response.exitCode === 2 && response.error.code === 'usage') lines.push('Run with --help for usage.');
    if (response.exitCode === 1 && response.error.code !== 'not_found') lines.push('Nothing was changed.');
    return { stdout: [], stderr: lines };
  }
  switch (response.command) {
    case 'help':
      return { stdout: [response.result.usage], stderr: [] };
    case 'review list':
      return { stdout: reviewList(response.result), stderr: [] };
    case 'review show':
    case 'operations show':
      return { stdout: detail(response.result), stderr: [] };
    case 'rejected list':
      return { stdout: rejected(response.result), stderr: [] };
    case 'findings list':
      return { stdout: findings(response.result), stderr: [] };
    case 'refunds list':
      return { stdout: refundsList(response.result), stderr: [] };
    case 'refunds show':
      return { stdout: detail(response.result), stderr: [] };
    case 'stats':
      return { stdout: stats(response.result), stderr: [] };
    default:
      return { stdout: actionLines(response), stderr: [] };
  }
}
