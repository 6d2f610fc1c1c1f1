// Writes schemas/*.json, the event contracts consumers validate against, from the zod schemas in
// lambdas/events/contract.ts (EVENT_DETAIL_JSON_SCHEMAS). `npm run schemas` after changing a detail;
// test/contract-schemas.test.ts fails while a committed file differs from the code.
import { writeFileSync } from 'node:fs';
import { EVENT_DETAIL_JSON_SCHEMAS } from '../lambdas/events/contract.ts';

for (const [file, generate] of Object.entries(EVENT_DETAIL_JSON_SCHEMAS)) {
  writeFileSync(`schemas/${file}`, `${JSON.stringify(generate(), null, 2)}\n`);
  console.log(`schemas/${file}`);
}
