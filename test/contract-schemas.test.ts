// The event contracts consumers validate against: every committed schemas/*.json is exactly what the
// code generates (EVENT_DETAIL_JSON_SCHEMAS; `npm run schemas` rewrites them), no schema file is left
// without its generator, and none forbids fields a later additive change would bring.
import { readdirSync, readFileSync } from 'node:fs';
import { describe, expect, it } from 'vitest';
import { EVENT_DETAIL_JSON_SCHEMAS } from '../lambdas/events/contract.ts';

describe('the consumer contracts in schemas/', () => {
  it('name exactly the schemas the code generates', () => {
    expect(readdirSync('schemas').filter((f) => f.endsWith('.json')).sort()).toEqual(Object.keys(EVENT_DETAIL_JSON_SCHEMAS).sort());
  });

  it.each(Object.entries(EVENT_DETAIL_JSON_SCHEMAS))('schemas/%s is the one generated from the code, and open to added fields', (file, generate) => {
    const committed = readFileSync(`schemas/${file}`, 'utf8');
    expect(JSON.parse(committed)).toEqual(generate());
    expect(committed).not.toContain('"additionalProperties": false');
  });
});
