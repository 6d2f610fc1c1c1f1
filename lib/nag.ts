// cdk-nag findings the construct's design leaves, each with the reason it stands: recorded on the
// construct that raises it, never acknowledged by the library. An app that agrees with them says so
// itself — acknowledgeChargePipelineFindings(scope), or its own cdk.Validations acknowledgements —
// and docs/deploy.md ("cdk-nag") lists each one. Choices an environment makes (a single-AZ database,
// no deletion protection) are not here: the app that makes the choice acknowledges what it costs.
import * as cdk from 'aws-cdk-lib';
import type { IConstruct } from 'constructs';

export interface DesignFinding {
  /** The cdk-nag rule id, with its finding's suffix where the rule names one (`AwsSolutions-IAM5[Resource::*]`). */
  readonly id: string;
  readonly reason: string;
}

const FINDINGS = new WeakMap<IConstruct, DesignFinding[]>();

/** Record that `construct` raises these findings by design (the library acknowledges nothing itself). */
export function designFinding(construct: IConstruct, ...findings: DesignFinding[]): void {
  FINDINGS.set(construct, [...(FINDINGS.get(construct) ?? []), ...findings]);
}

/** The design findings recorded under `scope` (a pipeline, a stack, the app), by construct path. */
export function chargePipelineFindings(scope: IConstruct): { path: string; finding: DesignFinding }[] {
  return scope.node.findAll().flatMap((construct) => (FINDINGS.get(construct) ?? []).map((finding) => ({ path: construct.node.path, finding })));
}

/**
 * Opt in: acknowledge, on the construct that raises it, every design finding recorded under `scope`
 * (or only those whose rule id is in `only`, e.g. ['AwsSolutions-SMG4']). Each is listed with its
 * reason in docs/deploy.md; an app that disagrees with one leaves it out and fixes or suppresses it
 * its own way. Returns what it acknowledged.
 */
export function acknowledgeChargePipelineFindings(scope: IConstruct, only?: readonly string[]): { path: string; finding: DesignFinding }[] {
  const rule = (id: string) => id.replace(/\[.*$/, '');
  const chosen = chargePipelineFindings(scope).filter(({ finding }) => !only || only.includes(finding.id) || only.includes(rule(finding.id)));
  for (const construct of scope.node.findAll()) {
    const findings = (FINDINGS.get(construct) ?? []).filter((finding) => !only || only.includes(finding.id) || only.includes(rule(finding.id)));
    if (findings.length > 0) cdk.Validations.of(construct).acknowledge(...findings);
  }
  return chosen;
}
