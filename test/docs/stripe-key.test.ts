// docs/deploy.md says what happens to requests sent before the Stripe key is put — as the code does
// it (test/handlers/charge.test.ts, "no Stripe key yet"): recorded and acknowledged, never returned
// to the queue or parked in the DLQ for a missing key.
import { readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { DOCS_DIR } from './markdown.ts';

const deploy = readFileSync(path.join(DOCS_DIR, 'deploy.md'), 'utf8');
const section = deploy.slice(deploy.indexOf('## Put the Stripe key'), deploy.indexOf('\n## ', deploy.indexOf('## Put the Stripe key') + 3));

describe('docs/deploy.md, Put the Stripe key', () => {
  it('says requests without a key are recorded, not sent back to the queue or the DLQ', () => {
    expect(section.length).toBeGreaterThan(100);
    expect(section).toMatch(/still records every request/);
    expect(section).not.toMatch(/goes\s+back\s+to\s+the\s+queue|after \d+ receives, to the DLQ|redrive/i);
  });
});
