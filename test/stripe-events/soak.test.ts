// The chaos soak, short, with Stripe events OFF (polling only): the default soak (test/proof/
// soak.test.ts) runs with them on; the promise must hold both ways.
import { describe, expect, it } from 'vitest';
import { formatSoakReport, runSoak } from '../../local/soak/soak.ts';
import { SHORT_CHAOS_SOAK } from '../support/soak.ts';

describe('chaos soak (short), polling only', () => {
  it('60 orders under kills, database restarts and crashes, Stripe faults, no webhooks: no violation', { timeout: 300_000 }, async () => {
    const lines: string[] = [];
    const report = await runSoak({
      ...SHORT_CHAOS_SOAK,
      orders: 60,
      seed: 20261201,
      webhooks: false,
      log: (line) => lines.push(line),
    });
    const text = formatSoakReport(report);
    console.log(text);
    expect(report.check.violations, `${text}\n${lines.join('\n')}`).toEqual([]);
    expect(report.settled, text).toBe(true);
    expect(report.stripe.doubleCharges).toBe(0);
    expect(report.stripeEvents).toBeNull();
  });
});
