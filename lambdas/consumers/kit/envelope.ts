// Reading one SQS record fed by an EventBridge rule: the body is the whole EventBridge event (the
// envelope: version, id, detail-type, source, time, …, detail). Deduplication uses detail.eventId,
// NEVER the envelope's `id`: EventBridge gives every PutEvents entry a new id, so an outbox re-send
// of the same event arrives with a different envelope id and the same detail.eventId.
import { z } from 'zod';
import type { OutcomeEvent } from './types.ts';

/** Fields every outcome event's detail carries (lambdas/events/contract.ts), whatever its type. */
export const baseDetailSchema = z.looseObject({
  eventId: z.uuid(),
  operationId: z.uuid(),
  // Per operation, strictly increasing across that operation's events. Optional: events written
  // before producers numbered them have none (ordering.ts says what happens to those).
  sequence: z.number().int().nonnegative().max(Number.MAX_SAFE_INTEGER).optional(),
});

const envelopeSchema = z.looseObject({
  'detail-type': z.string().min(1),
  source: z.string().min(1),
  detail: z.record(z.string(), z.unknown()),
});

export type ParsedRecord<D> = { readonly ok: true; readonly event: OutcomeEvent<D> } | { readonly ok: false; readonly reason: string };

export interface EnvelopeExpectations<D> {
  readonly detailTypes: readonly string[];
  /** Accepted envelope sources; undefined accepts any (the rule's pattern already chose). */
  readonly sources?: readonly string[];
  /** The consumer's own view of `detail`, checked after the base fields. */
  readonly detailSchema: z.ZodType<D>;
}

const MAX_REASON = 300;

function describeIssues(error: z.ZodError): string {
  return error.issues
    .slice(0, 3)
    .map((issue) => `${issue.path.join('.') || '(root)'}: ${issue.message}`)
    .join('; ')
    .slice(0, MAX_REASON);
}

/** Parse and check one body; a problem is a reason for the poison record, never a throw. */
export function parseRecordBody<D>(body: string, expect: EnvelopeExpectations<D>): ParsedRecord<D> {
  let json: unknown;
  try {
    json = JSON.parse(body);
  } catch {
    return { ok: false, reason: 'body is not JSON' };
  }
  const envelope = envelopeSchema.safeParse(json);
  if (!envelope.success) return { ok: false, reason: `not an EventBridge event: ${describeIssues(envelope.error)}` };
  const { 'detail-type': detailType, source, detail } = envelope.data;
  if (!expect.detailTypes.includes(detailType)) return { ok: false, reason: `detail-type ${JSON.stringify(detailType).slice(0, 80)} is not one this consumer subscribed to` };
  if (expect.sources && !expect.sources.includes(source)) return { ok: false, reason: `source ${JSON.stringify(source).slice(0, 80)} is not one this consumer accepts` };
  const base = baseDetailSchema.safeParse(detail);
  if (!base.success) return { ok: false, reason: `detail: ${describeIssues(base.error)}` };
  const own = expect.detailSchema.safeParse(detail);
  if (!own.success) return { ok: false, reason: `detail: ${describeIssues(own.error)}` };
  return {
    ok: true,
    event: {
      detailType,
      source,
      eventId: base.data.eventId,
      operationId: base.data.operationId,
      sequence: base.data.sequence ?? null,
      detail: own.data,
    },
  };
}
