// The runbook covers every alarm the stack defines, and the command reference every command.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { ALARM_CATALOG } from '../../lib/alarm-catalog.ts';
import { COMMAND_NAMES } from '../../lambdas/ops/parse.ts';

const doc = readFileSync(path.resolve(import.meta.dirname, '../../README.md'), 'utf8');
const headings = [...doc.matchAll(/^#### (\w+) — /gm)].map((m) => m[1]);

describe('README.md, the runbook and the ops command reference', () => {
  it('has one runbook entry per alarm, in the catalog’s order, each saying what it means, what to check and how to resolve', () => {
    expect(headings).toEqual(ALARM_CATALOG.map((alarm) => alarm.name));
    const sections = doc.split(/^#### /m).slice(1);
    for (const section of sections) {
      const name = section.split(' ')[0];
      expect(section, name).toMatch(/\*\*Means/);
      expect(section, name).toMatch(/\*\*(Check|Means \/ check \/ resolve)/);
      expect(section, name).toMatch(/\*\*(Resolve|Means \/ check \/ resolve)/);
    }
  });

  it('documents every command', () => {
    for (const name of COMMAND_NAMES) expect(doc, name).toContain(`\`${name}`);
  });
});
