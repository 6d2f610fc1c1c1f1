// The per-effect choice as one pure decision, exhaustively: every policy × every kind of failure.
import { describe, expect, it } from 'vitest';
import { settlementForFailure } from '../../lambdas/consumers/kit/consumer.ts';
import { EffectError, EffectFailure } from '../../lambdas/consumers/kit/errors.ts';
import { orderKey, UNNUMBERED } from '../../lambdas/consumers/kit/ordering.ts';
import { POLICIES } from '../../lambdas/consumers/kit/types.ts';

const errors = {
  rejected: new EffectError(EffectFailure.rejected, '400 validation_error'),
  notExecuted: new EffectError(EffectFailure.notExecuted, '429 rate_limit_exceeded'),
  ambiguous: new EffectError(EffectFailure.ambiguous, 'no answer (ECONNRESET)'),
  foreign: new TypeError('something we did not expect'),
};

const EXPECTED = {
  idempotent: { rejected: 'failed', notExecuted: 'pending', ambiguous: 'retry', foreign: 'retry' },
  'at-least-once': { rejected: 'failed', notExecuted: 'pending', ambiguous: 'retry', foreign: 'retry' },
  'at-most-once': { rejected: 'failed', notExecuted: 'pending', ambiguous: 'abandoned', foreign: 'abandoned' },
} as const;

describe('settlementForFailure', () => {
  for (const policy of POLICIES) {
    for (const [kind, error] of Object.entries(errors) as [keyof typeof errors, Error][]) {
      it(`${policy}, ${kind} → ${EXPECTED[policy][kind]}`, () => {
        const { settlement } = settlementForFailure(policy, error);
        expect(settlement.to).toBe(EXPECTED[policy][kind]);
        if (settlement.to !== 'done') expect(settlement.error).toContain(error.message);
      });
    }
  }
});

describe('orderKey', () => {
  it('is the sequence, and below every sequence for an unnumbered event', () => {
    expect(orderKey(3)).toBe(3);
    expect(orderKey(null)).toBe(UNNUMBERED);
    expect(orderKey(null)).toBeLessThan(orderKey(0));
  });
});

describe('the kit core', () => {
  it('is plain TypeScript: no runtime import of Lambda, middy, Powertools or the CDK (type-only imports are erased)', async () => {
    const { readFileSync } = await import('node:fs');
    const path = await import('node:path');
    const dir = path.resolve(import.meta.dirname, '../../lambdas/consumers/kit');
    for (const file of ['consumer.ts', 'envelope.ts', 'errors.ts', 'inbox-store.ts', 'metrics.ts', 'migrations.ts', 'ordering.ts', 'types.ts', 'index.ts']) {
      const source = readFileSync(path.join(dir, file), 'utf8');
      const runtimeImports = [...source.matchAll(/^(?:import|export) (?!type )[^;]*? from '([^']+)'/gms)].map((m) => m[1]!);
      for (const spec of runtimeImports) {
        expect(spec, `${file} imports ${spec}`).not.toMatch(/aws-lambda|@middy|@aws-lambda-powertools|aws-cdk-lib|observability\.ts|\/lambda\.ts/);
      }
    }
  });
});
