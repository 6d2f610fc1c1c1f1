// The runbook (docs/runbook.md) covers every alarm the stack defines, and the ops tool's command
// reference (docs/operations.md) every command.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ALARM_CATALOG, CONSUMER_ALARM_CATALOG } from '../../lib/alarm-catalog.ts';
import { COMMAND_NAMES } from '../../lambdas/ops/parse.ts';

const docs = path.resolve(import.meta.dirname, '../../docs');
const doc = readFileSync(path.join(docs, 'runbook.md'), 'utf8');
const operations = readFileSync(path.join(docs, 'operations.md'), 'utf8');
const headings = [...doc.matchAll(/^## (\w+) — /gm)].map((m) => m[1]);

describe('docs/runbook.md and the ops command reference in docs/operations.md', () => {
  it('has one runbook entry per alarm, in the catalog’s order, each saying what it means, what to check and how to resolve', () => {
    expect(headings).toEqual([...ALARM_CATALOG, ...CONSUMER_ALARM_CATALOG].map((alarm) => alarm.name));
    const sections = doc.split(/^## (?=\w+ — )/m).slice(1);
    for (const section of sections) {
      const name = section.split(' ')[0];
      expect(section, name).toMatch(/\*\*Means/);
      expect(section, name).toMatch(/\*\*(Check|Means \/ check \/ resolve)/);
      expect(section, name).toMatch(/\*\*(Resolve|Means \/ check \/ resolve)/);
    }
  });

  it('documents every command', () => {
    for (const name of COMMAND_NAMES) expect(operations, name).toContain(`\`${name}`);
  });
});
