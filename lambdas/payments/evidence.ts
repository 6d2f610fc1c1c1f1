// The evidence an ambiguous operation has gathered, read from its audit trail (payment_operation_events):
// when it may last have been sent, how often under its current key, which absences List proved and
// when, whether List or Search cannot answer for it. Proofs are not stored anywhere else: the trail is
// the record an auditor reads, so the engine decides from exactly what the auditor sees.
//
// Pure (the read is loadEvidenceEvents in operations-store.ts). It reads the trail with the same
// function the operator's review uses (audit-trail.ts lastPossibleSendAt).
import type { EnginePolicy, EvidenceHistory } from './decisions.ts';
import { lastPossibleSendAt, type AuditEvent } from './audit-trail.ts';
import type { ClaimedOperation } from './types.ts';

export type EvidenceEvent = Pick<AuditEvent, 'action' | 'step' | 'occurredAt' | 'keyGeneration' | 'detail'> & { readonly errorClass?: string | null };

const SENDING_STEPS = new Set(['create', 'early_search']);
const OUTCOMES = new Set(['outcome_recorded', 'outcome_discarded']);

/**
 * `events` is the operation's trail in order, read AFTER this worker's claim: the last
 * attempt_started is this claim's own, which has not sent anything yet, and is left out.
 */
export function summarizeEvidence(op: ClaimedOperation, events: readonly EvidenceEvent[], policy: Pick<EnginePolicy, 'leaseMs' | 'keyWindowMs'>): EvidenceHistory {
  let own = -1;
  events.forEach((event, index) => {
    if (event.action === 'attempt_started') own = index;
  });
  const trail = own === -1 ? events : events.filter((_, index) => index !== own);
  const lastSendAt = lastPossibleSendAt(trail, policy.leaseMs);
  const current = (event: EvidenceEvent) => event.keyGeneration === op.keyGeneration;
  let firstSendAt: Date | null = null;
  let sameKeySends = 0;
  let autoReissues = 0;
  let listUnavailable = false;
  let permanentSearchFailures = 0;
  let permanentListFailures = 0;
  let incompleteLists = 0;
  let keyReplaysError = false;
  let keyInUse = false;
  let transientListFailuresAfterWindow = 0;
  // The key window of the current generation ends here; Lists that keep failing after it are bounded.
  const windowEnds = op.firstAttemptedAt.getTime() + policy.keyWindowMs;
  let refusal: string | null = null;
  const proofs: Date[] = [];
  for (const event of trail) {
    if (event.action === 'attempt_started' && firstSendAt === null) firstSendAt = new Date(event.occurredAt);
    if (event.action === 'auto_reissued') autoReissues++;
    if (!OUTCOMES.has(event.action) || !current(event)) continue;
    const detail = event.detail as { absenceProven?: unknown; provenAt?: unknown; listUnavailable?: unknown; searchFailure?: unknown };
    if (event.step !== null && SENDING_STEPS.has(event.step)) {
      sameKeySends++;
      const answer = event.detail as { httpStatus?: unknown };
      keyReplaysError = event.action === 'outcome_recorded' && event.errorClass === 'StripeAPIError' && answer.httpStatus === 500;
      // Only the key's LAST answer counts: once Stripe answered otherwise, the first request has finished.
      keyInUse = event.action === 'outcome_recorded' && (event.detail as { keyInUse?: unknown }).keyInUse === true;
      const refused = event.detail as { settleByList?: unknown; refusal?: unknown };
      refusal = event.action === 'outcome_recorded' && refused.settleByList === true && typeof refused.refusal === 'string' ? refused.refusal : null;
    }
    if (event.action !== 'outcome_recorded') continue;
    if (event.step === 'list' && detail.listUnavailable === true) {
      listUnavailable = true;
      permanentListFailures++;
    }
    const list = (event.detail as { list?: { complete?: unknown } }).list;
    const failedKind = (event.detail as { kind?: unknown }).kind;
    if (event.step === 'list' && typeof failedKind === 'string' && detail.listUnavailable !== true && Date.parse(event.occurredAt) >= windowEnds) {
      transientListFailuresAfterWindow++;
    }
    if (event.step === 'list' && list?.complete === false) incompleteLists++;
    if ((event.step === 'search' || event.step === 'early_search') && detail.searchFailure === 'permanent') permanentSearchFailures++;
    if (event.step === 'list' && detail.absenceProven === true && typeof detail.provenAt === 'string') {
      const at = new Date(detail.provenAt);
      // A proof made before a later send proves nothing about what that send did.
      if (!Number.isNaN(at.getTime()) && (lastSendAt === null || at.getTime() > lastSendAt.getTime())) proofs.push(at);
    }
  }
  proofs.sort((a, b) => a.getTime() - b.getTime());
  return {
    firstSendAt,
    lastSendAt,
    sameKeySends,
    keyReplaysError,
    keyInUse,
    refusal,
    proofs,
    autoReissues,
    listUnavailable,
    permanentSearchFailures,
    permanentListFailures,
    incompleteLists,
    transientListFailuresAfterWindow,
  };
}
