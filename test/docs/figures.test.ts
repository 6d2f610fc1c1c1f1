// Figures the docs state that can be derived are derived here, so that they cannot go stale: the
// largest valid charge request body (docs/producers.md, lambdas/producer/client.ts) and the number
// of test files (docs/proofs.md).
import { readFileSync, readdirSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { chargeRequestSchema, DEFAULT_MAX_AMOUNT, MAX_METADATA_KEYS } from '../../lambdas/payments/message.ts';
import { chargeRequestMessage } from '../../lambdas/producer/client.ts';

/** Every field at its longest, in the characters that cost the most bytes once JSON-encoded. */
function largestValidRequest() {
  const control = '\u0001'; // not NUL, well formed: allowed; JSON writes it as \u0001 (6 bytes)
  return {
    orderId: '"'.repeat(128), // printable ASCII; JSON escapes a quote (2 bytes)
    amount: DEFAULT_MAX_AMOUNT,
    currency: 'eur',
    customerId: `cus_${'a'.repeat(196)}`,
    paymentMethod: `pm_${'a'.repeat(196)}`,
    description: control.repeat(1000),
    statementDescriptorSuffix: 'A'.repeat(22),
    metadata: Object.fromEntries(Array.from({ length: MAX_METADATA_KEYS }, (_, i) => [`${String(i).padStart(2, '0')}${'k'.repeat(38)}`, control.repeat(500)])),
    // Connect: a destination charge (its key is longer than `account`'s, and the two are exclusive) with the largest fee.
    transferDestination: `acct_${'a'.repeat(64)}`,
    applicationFeeAmount: DEFAULT_MAX_AMOUNT,
  };
}

const figure = (text: string, pattern: RegExp) => Number(pattern.exec(text)?.[1]?.replaceAll(',', ''));

describe('figures in the docs', () => {
  it('the largest valid body is the size docs/producers.md and the client say', () => {
    const request = largestValidRequest();
    expect(chargeRequestSchema().safeParse(request).success).toBe(true);
    const bytes = Buffer.byteLength(chargeRequestMessage(request).MessageBody, 'utf8');
    expect(figure(readFileSync('docs/producers.md', 'utf8'), /a valid body is at most ([\d,]+) bytes/)).toBe(bytes);
    expect(figure(readFileSync('lambdas/producer/client.ts', 'utf8'), /body is at most ([\d,]+) bytes/)).toBe(bytes);
    // One longer character anywhere and the schema refuses it.
    expect(chargeRequestSchema().safeParse({ ...request, description: `${request.description}x` }).success).toBe(false);
  });

  it('the number of test files is the one docs/proofs.md says', () => {
    const count = (dir: string): number =>
      readdirSync(dir, { withFileTypes: true }).reduce((n, d) => n + (d.isDirectory() ? count(path.join(dir, d.name)) : d.name.endsWith('.test.ts') ? 1 : 0), 0);
    expect(figure(readFileSync('docs/proofs.md', 'utf8'), /every test: (\d+) files/)).toBe(count('test'));
  });
});
