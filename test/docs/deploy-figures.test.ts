// Figures in docs/deploy.md that are facts about the code, checked against the code rather than kept
// by hand: the restricted Stripe key's table lists exactly the Stripe API calls the functions make
// (read from the sources under lambdas/), and the cost table's alarm, alarm-metric, secret and KMS
// key counts are those of the synthesized default app (dev and prod), its custom metrics the names
// the functions publish, and its totals add up.
import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { METRICS } from '../../lambdas/runtime/settings.ts';
import { ofType, removeSynthOutput, synthDefaultApp } from '../infra/support.ts';
import { DOCS_DIR, PROJECT_ROOT, proseLines } from './markdown.ts';

afterAll(removeSynthOutput);

const deploy = readFileSync(path.join(DOCS_DIR, 'deploy.md'), 'utf8');
const section = (heading: string) => {
  const start = deploy.indexOf(`\n${heading}\n`);
  if (start < 0) throw new Error(`no section ${heading}`);
  const level = heading.split(' ')[0]!;
  const next = deploy.slice(start + heading.length + 2).search(new RegExp(`^#{1,${level.length}} `, 'm'));
  return deploy.slice(start, next < 0 ? undefined : start + heading.length + 2 + next);
};
/** The cells of the table rows of a piece of Markdown (header and separator rows left out). */
const rows = (markdown: string) =>
  proseLines(markdown)
    .map(({ text }) => text)
    .filter((t) => t.startsWith('|') && !/^\|[-| ]+\|$/.test(t))
    .map((t) => t.split('|').slice(1, -1).map((c) => c.trim()))
    .slice(1);

/** `stripe.<resource>.<method>(` (and `this.#stripe.…`) in every source file under lambdas/. */
export function stripeCallsIn(source: string): Set<string> {
  const calls = new Set<string>();
  for (const m of source.matchAll(/\bstripe\.([a-z][A-Za-z]*)\.([a-z][A-Za-z]*)\s*\(/g)) calls.add(`${m[1]}.${m[2]}`);
  return calls;
}
const sources = readdirSync(path.join(PROJECT_ROOT, 'lambdas'), { recursive: true, withFileTypes: true })
  .filter((e) => e.isFile() && e.name.endsWith('.ts'))
  .map((e) => readFileSync(path.join(e.parentPath, e.name), 'utf8'));
const calledByCode = [...new Set(sources.flatMap((s) => [...stripeCallsIn(s)]))].sort();

describe('docs/deploy.md, the restricted Stripe key', () => {
  const key = section('### The restricted Stripe key');
  const table = rows(key);
  const documented = table.map((cells) => /^`([^`]+)`$/.exec(cells[0]!)?.[1]).filter((c): c is string => c !== undefined);

  it('reads the calls from the code (and would see a new one)', () => {
    expect(stripeCallsIn('await this.#stripe.refunds.create({}, { idempotencyKey })')).toEqual(new Set(['refunds.create']));
    expect(stripeCallsIn('const pi = await stripe.paymentIntents.retrieve(id);')).toEqual(new Set(['paymentIntents.retrieve']));
    expect(calledByCode.length).toBeGreaterThan(3);
  });

  it('lists exactly the Stripe API calls the functions make', () => {
    expect([...documented].sort()).toEqual(calledByCode);
  });

  it('asks for Write on each resource the calls write and Read at least on each they read, and names every one in the key\'s permissions', () => {
    const RESOURCE: Record<string, string> = { paymentIntents: 'PaymentIntents', refunds: 'Refunds' };
    for (const cells of table) {
      const [resource, method] = /^`([^`]+)`$/.exec(cells[0]!)![1]!.split('.') as [string, string];
      const name = RESOURCE[resource];
      expect(name, `no permission name for ${resource}`).toBeDefined();
      const writes = ['create', 'update', 'cancel', 'confirm', 'capture'].includes(method);
      expect(cells[2], cells[0]).toBe(`${name}: ${writes ? 'Write' : 'Read'}`);
    }
    const needed = new Map<string, string>();
    for (const cells of table) {
      const [name, level] = cells[2]!.split(': ') as [string, string];
      if (level === 'Write' || !needed.has(name)) needed.set(name, level === 'Write' ? 'Write' : (needed.get(name) ?? 'Read'));
    }
    for (const [name, level] of needed) expect(key).toContain(`**${name}: ${level}**`);
  });
});

describe('docs/deploy.md, the cost table', () => {
  const cost = rows(section('## What it costs to leave running'));
  const row = (starts: RegExp) => {
    const found = cost.find((cells) => starts.test(cells[0]!));
    if (!found) throw new Error(`no cost row matching ${starts}`);
    return found;
  };
  const dollars = (cell: string) => {
    if (/^< \$1$/.test(cell)) return 1;
    const m = /\$(\d+(?:\.\d+)?)/.exec(cell);
    if (!m) throw new Error(`no amount in ${cell}`);
    return Number(m[1]);
  };
  const templates = { dev: synthDefaultApp({ environment: 'dev' }).resources, prod: synthDefaultApp({ environment: 'prod' }).resources };

  it.each(['dev', 'prod'] as const)('the CloudWatch row has the alarms and alarm metrics of the %s template, and the functions\' metric names', (environment) => {
    const resources = templates[environment];
    const [what, devCell, prodCell] = row(/^CloudWatch:/);
    const m = /^CloudWatch: (\d+) alarms \((\d+) alarm metrics, \$0\.10 each\), up to (\d+) custom metrics \(\$0\.30 each\), the dashboard \(\$3 beyond the 3 free\), logs and flow logs at idle \(≈ \$(\d+)\)$/.exec(what!);
    expect(m, what).not.toBeNull();
    const [, alarms, alarmMetrics, customMetrics, logs] = m!.map(Number);
    const built = ofType(resources, 'AWS::CloudWatch::Alarm');
    // A metric-math alarm is billed per metric it reads.
    const metricsRead = built.reduce((n, [, a]) => n + (a.Properties!.MetricName ? 1 : (a.Properties!.Metrics as { MetricStat?: unknown }[]).filter((x) => x.MetricStat).length), 0);
    expect({ alarms, alarmMetrics, customMetrics }).toEqual({ alarms: built.length, alarmMetrics: metricsRead, customMetrics: Object.keys(METRICS).length });
    expect(ofType(resources, 'AWS::CloudWatch::Dashboard')).toHaveLength(1);
    const cell = environment === 'dev' ? devCell! : prodCell!;
    expect(dollars(cell)).toBe(Math.round(metricsRead * 0.1 + Object.keys(METRICS).length * 0.3 + 3 + logs!));
  });

  it.each(['dev', 'prod'] as const)('the KMS and secrets row has the keys and secrets of the %s template', (environment) => {
    const resources = templates[environment];
    const [what, devCell, prodCell] = row(/KMS keys/);
    const m = /^(\d+) KMS keys, .*\(\$1 each\), (\d+) secrets: .*\(\$0\.40 each\)$/.exec(what!);
    expect(m, what).not.toBeNull();
    const keys = Number(m![1]);
    const secrets = Number(m![2]);
    expect({ keys, secrets }).toEqual({ keys: ofType(resources, 'AWS::KMS::Key').length, secrets: ofType(resources, 'AWS::SecretsManager::Secret').length });
    expect(environment === 'dev' ? devCell : prodCell).toBe(`$${(keys * 1 + secrets * 0.4).toFixed(2)}`);
  });

  it('the totals add up (a "< $1" counted as $1)', () => {
    const items = cost.filter((cells) => !cells[0]!.startsWith('**total'));
    const [, devTotal, prodTotal] = row(/^\*\*total/);
    expect(dollars(devTotal!)).toBe(Math.round(items.reduce((n, cells) => n + dollars(cells[1]!), 0)));
    expect(dollars(prodTotal!)).toBe(Math.round(items.reduce((n, cells) => n + dollars(cells[2]!), 0)));
  });
});
