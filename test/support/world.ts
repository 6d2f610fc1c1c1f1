// A test file's world: a database of its own (cloned from the migrated template, support/db.ts) and
// a fake Stripe of its own behind the real SDK (support/stripe.ts), started once for the file and
// closed after it; the fake's ledger is reset before each test unless the file keeps it on purpose.
import { afterAll, beforeAll, beforeEach } from 'vitest';
import { createTestDatabase, type TestDatabase } from './db.ts';
import type { FakeStripeOptions } from '../../local/fake-stripe/types.ts';
import { startStripe, type StripeHarness } from './stripe.ts';

export interface World {
  readonly db: TestDatabase;
  readonly stripe: StripeHarness;
}

/**
 * Registers the file's hooks. `started` gets the world once it runs (in beforeAll): the file keeps
 * its own `db` / `stripe` (or `h`) variables, so its tests read as before.
 */
export function useWorld(
  label: string,
  started: (world: World) => void,
  options: { readonly resetFakeBeforeEach?: boolean; /** The fake's options (e.g. its `now`, on which authorizations expire). */ readonly fake?: FakeStripeOptions } = {},
): void {
  let db: TestDatabase | undefined;
  let stripe: StripeHarness | undefined;
  beforeAll(async () => {
    db = await createTestDatabase(label);
    stripe = await startStripe(options.fake ?? {});
    started({ db, stripe });
  });
  afterAll(async () => {
    await stripe?.close();
    await db?.drop();
  });
  if (options.resetFakeBeforeEach ?? true) beforeEach(() => stripe!.fake.reset());
}
