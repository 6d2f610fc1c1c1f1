// The property-based model: random interleavings of deliveries, duplicates, crashes at each step of
// an attempt, stalled (zombie) workers, lease expiry, Stripe faults, search lag, key pruning and
// reconciler pages, against the REAL engine, real PostgreSQL 18 and the real stripe SDK over HTTP to
// the fake Stripe; after each run the world heals and `checkInvariants` judges it against the fake's
// ledger. fast-check shrinks a failure to a minimal command list.
//
//   PROOF_RUNS=2000 npx vitest run test/proof/model.test.ts      more runs (default 300)
//   PROOF_SEED=… PROOF_PATH=… npx vitest run test/proof/model.test.ts   replay a failure (printed on failure)
//   PROOF_TRACE=1 …                                              print every command as it is played
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { FailureKind, type PaymentGateway } from '../../lambdas/payments/gateway.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createStripeClient, StripeGateway } from '../../lambdas/payments/stripe-gateway.ts';
import { startFakeStripe } from '../../local/fake-stripe/server.ts';
import { FAULT_KINDS, type FakeStripe } from '../../local/fake-stripe/types.ts';
import { formatReport } from '../../local/invariants.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import { playRun, type Command, type ModelRun, type ModelWorld, type OrderSpec } from './model/harness.ts';

const RUNS = Number(process.env.PROOF_RUNS ?? 300);
const SEED = process.env.PROOF_SEED === undefined ? undefined : Number(process.env.PROOF_SEED);
const PATH = process.env.PROOF_PATH;
const TRACE = process.env.PROOF_TRACE === '1';

let db: TestDatabase;
let fake: FakeStripe;
let world: ModelWorld;

beforeAll(async () => {
  db = await createTestDatabase('model');
  fake = await startFakeStripe();
  const client = (timeoutMs: number) => new StripeGateway(createStripeClient({ apiKey: 'sk_test_model', apiBase: fake.url, timeoutMs, maxNetworkRetries: 0 }));
  // 250 ms: a `hang` costs little; the fake answers in a few ms. The patient client serves workers
  // parked at Stripe, whose answer must be the real one once released.
  world = { db: db.pool, fake, gateway: client(250), patientGateway: client(20_000) };
});
afterAll(async () => {
  await fake?.close();
  await db?.drop();
});

// ── Arbitraries ──────────────────────────────────────────────────────────────────────────────────

const MAX_ORDERS = 3;
const orderIndex = fc.nat({ max: MAX_ORDERS - 1 });

const orderSpec: fc.Arbitrary<OrderSpec> = fc.record({
  paymentMethod: fc.oneof(
    { weight: 6, arbitrary: fc.constant('pm_card_visa') },
    { weight: 1, arbitrary: fc.constant('pm_card_chargeDeclined') },
    { weight: 1, arbitrary: fc.constant('pm_fake_processing') },
    { weight: 1, arbitrary: fc.constant('pm_card_authenticationRequired') },
  ),
  amount: fc.oneof(fc.constant(1), fc.integer({ min: 2, max: 99_999_999 })),
});

const command: fc.Arbitrary<Command> = fc.oneof(
  { weight: 6, arbitrary: fc.record({ t: fc.constant('deliver' as const), orders: fc.array(orderIndex, { minLength: 1, maxLength: 4 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('concurrent' as const), order: orderIndex, n: fc.integer({ min: 2, max: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('race' as const), order: orderIndex }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('conflict' as const), order: orderIndex }) },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant('crash' as const),
      via: fc.constantFrom('deliver' as const, 'reconcile' as const),
      order: orderIndex,
      point: fc.constantFrom('before_claim' as const, 'after_claim' as const, 'in_flight' as const, 'after_answer' as const),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant('stall' as const),
      via: fc.constantFrom('deliver' as const, 'reconcile' as const),
      order: orderIndex,
      point: fc.constantFrom('in_flight' as const, 'after_answer' as const),
    }),
  },
  { weight: 2, arbitrary: fc.constant({ t: 'release' as const }) },
  { weight: 3, arbitrary: fc.constant({ t: 'expire_leases' as const }) },
  { weight: 4, arbitrary: fc.constant({ t: 'backoff_elapses' as const }) },
  { weight: 4, arbitrary: fc.record({ t: fc.constant('reconcile' as const), limit: fc.integer({ min: 1, max: 10 }) }) },
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant('fault' as const),
      order: orderIndex,
      // Not stall_after_commit: it freezes the caller for good (bench:peers' crash); the model's crashes are its own commands.
      kind: fc.constantFrom(...FAULT_KINDS.filter((kind) => kind !== 'stall_after_commit')),
      times: fc.integer({ min: 1, max: 3 }),
      endpoint: fc.constantFrom('any' as const, 'create' as const, 'retrieve' as const, 'search' as const, 'list' as const),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('search_lag' as const), lagging: fc.boolean() }) },
  { weight: 1, arbitrary: fc.constant({ t: 'early_search_time' as const }) },
  { weight: 2, arbitrary: fc.constant({ t: 'evidence_time' as const }) },
  { weight: 1, arbitrary: fc.constant({ t: 'window_passes' as const }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('settle' as const),
      order: orderIndex,
      status: fc.constantFrom('succeeded' as const, 'canceled' as const, 'requires_payment_method' as const),
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({
      t: fc.constant('stripe_event' as const),
      order: orderIndex,
      snapshot: fc.constantFrom('current' as const, 'old_processing' as const),
      copies: fc.integer({ min: 1, max: 3 }),
      inline: fc.boolean(),
    }),
  },
  { weight: 1, arbitrary: fc.constant({ t: 'apply_inbox' as const }) },
);

const modelRun: fc.Arbitrary<ModelRun> = fc.record({
  orders: fc.array(orderSpec, { minLength: 1, maxLength: MAX_ORDERS }),
  commands: fc.array(command, { minLength: 1, maxLength: 24 }),
  healSettle: fc.constantFrom('succeeded' as const, 'canceled' as const, 'leave' as const),
  // Stripe events in on about half the runs, polling only on the others: the promise holds both ways.
  events: fc.boolean(),
});

// ── The property ─────────────────────────────────────────────────────────────────────────────────

interface Tally {
  runs: number;
  commands: Record<string, number>;
  finalStatus: Record<string, number>;
  inReview: number;
  healRounds: number;
  timeSteps: number;
  lists: number;
  autoReissues: number;
}

describe('the engine under every interleaving the model can generate', () => {
  const tally: Tally = { runs: 0, commands: {}, finalStatus: {}, inReview: 0, healRounds: 0, timeSteps: 0, lists: 0, autoReissues: 0 };

  afterAll(() => {
    const c = tally.commands;
    console.log(
      `model: ${tally.runs} runs (${RUNS} asked), ${Object.values(c).reduce((a, b) => a + b, 0)} commands ` +
        `[${Object.entries(c).sort().map(([k, v]) => `${k} ${v}`).join(', ')}]; final operations ` +
        `[${Object.entries(tally.finalStatus).sort().map(([k, v]) => `${k} ${v}`).join(', ')}], in review ${tally.inReview}; ` +
        `heal rounds ${tally.healRounds}, time steps ${tally.timeSteps}; List requests ${tally.lists}, automatic re-issues ${tally.autoReissues}`,
    );
  });

  it('never charges twice, loses nothing, fails nothing wrongly; every outcome has its audit and outbox trail', { timeout: 1_800_000 }, async () => {
    await fc.assert(
      fc.asyncProperty(modelRun, async (run) => {
        const result = await playRun(world, run, TRACE ? (line) => console.log(line) : undefined);
        tally.runs += 1;
        for (const cmd of run.commands) {
          const key =
            cmd.t === 'crash' || cmd.t === 'stall' ? `${cmd.t}:${cmd.via}:${cmd.point}` : cmd.t === 'fault' ? `fault:${cmd.kind}` : cmd.t === 'stripe_event' || cmd.t === 'apply_inbox' ? `${cmd.t}:${run.events ? 'on' : 'off'}` : cmd.t;
          tally.commands[key] = (tally.commands[key] ?? 0) + 1;
        }
        for (const [status, n] of Object.entries(result.report.byStatus)) tally.finalStatus[status] = (tally.finalStatus[status] ?? 0) + n;
        tally.inReview += result.report.inReview;
        tally.healRounds += result.healRounds;
        tally.timeSteps += result.timeSteps;
        tally.lists += result.lists;
        tally.autoReissues += result.autoReissues;
        if (!result.report.ok || result.problems.length > 0) {
          throw new Error(`${formatReport(result.report)}\n${result.problems.map((p) => `  ✗ ${p}`).join('\n')}\norders: ${result.orderIds.join(', ')}`);
        }
      }),
      {
        numRuns: RUNS,
        ...(SEED === undefined ? {} : { seed: SEED }),
        ...(PATH === undefined ? {} : { path: PATH }),
        // fast-check's message carries `seed` and `path`: PROOF_SEED=<seed> PROOF_PATH=<path> replays it.
        verbose: 1,
      },
    );
    expect(tally.runs).toBeGreaterThan(0);
  });
});

describe('the List step and automatic re-issues are paths the model takes', () => {
  it('a 500 before commit, a crash in flight and a zombie: the heal proves absence twice, re-issues once, charges once', { timeout: 120_000 }, async () => {
    const run: ModelRun = {
      orders: [{ paymentMethod: 'pm_card_visa', amount: 1200 }],
      commands: [
        { t: 'fault', order: 0, kind: 'error_500_before_commit', times: 1, endpoint: 'create' },
        { t: 'deliver', orders: [0] },
        { t: 'crash', via: 'reconcile', order: 0, point: 'in_flight' },
        { t: 'fault', order: 0, kind: 'error_500_after_commit', times: 1, endpoint: 'list' },
        { t: 'evidence_time' },
      ],
      healSettle: 'succeeded',
    };
    const result = await playRun(world, run);
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.autoReissues).toBe(1);
    expect(result.lists).toBeGreaterThanOrEqual(3); // the faulted one, then two proofs
    expect(result.report.byStatus.succeeded).toBe(1);
  });
});

// ── The model can fail ───────────────────────────────────────────────────────────────────────────
// The same property against engines broken on purpose (through their gateway): if the model could not
// find these, a green run above would prove little.

/** The model has no refunds: a mutant passes the refund calls through unchanged. */
function refundsOf(real: PaymentGateway): Pick<PaymentGateway, 'createRefund' | 'retrieveRefund' | 'listRefunds'> {
  return { createRefund: (r) => real.createRefund(r), retrieveRefund: (id) => real.retrieveRefund(id), listRefunds: (r) => real.listRefunds(r) };
}

function mutant(base: ModelWorld, wrap: (real: PaymentGateway) => PaymentGateway): ModelWorld {
  return { ...base, gateway: wrap(base.gateway), patientGateway: wrap(base.patientGateway) };
}

async function findsCounterexample(broken: ModelWorld, runs: number): Promise<string | null> {
  const result = await fc.check(
    fc.asyncProperty(modelRun, async (run) => {
      const r = await playRun(broken, run);
      return r.report.ok && r.problems.length === 0;
    }),
    { numRuns: runs, endOnFailure: true, seed: 42 },
  );
  return result.failed ? `found after ${result.numRuns} run(s)` : null;
}

describe('the model catches broken engines', () => {
  it('a fresh idempotency key per attempt (the seed\'s anti-pattern) → double_charge', { timeout: 300_000 }, async () => {
    const broken = mutant(world, (real) => ({
      createPaymentIntent: (request) => real.createPaymentIntent({ ...request, idempotencyKey: `fresh-${randomUUID()}` }),
      retrievePaymentIntent: (id) => real.retrievePaymentIntent(id),
      searchPaymentIntents: (request) => real.searchPaymentIntents(request),
      listPaymentIntents: (request) => real.listPaymentIntents(request),
      ...refundsOf(real),
    }));
    expect(await findsCounterexample(broken, 300)).not.toBeNull();
  });

  it('an ambiguous answer read as a decline → wrongly_failed', { timeout: 300_000 }, async () => {
    const broken = mutant(world, (real) => ({
      createPaymentIntent: async (request) => {
        const result = await real.createPaymentIntent(request);
        return !result.ok && result.failure.kind === FailureKind.ambiguous ? { ok: false, failure: { ...result.failure, kind: FailureKind.declined } } : result;
      },
      retrievePaymentIntent: (id) => real.retrievePaymentIntent(id),
      searchPaymentIntents: (request) => real.searchPaymentIntents(request),
      listPaymentIntents: (request) => real.listPaymentIntents(request),
      ...refundsOf(real),
    }));
    expect(await findsCounterexample(broken, 300)).not.toBeNull();
  });

  it('a List that misses what it should see (a failed or partial list read as complete and empty) → an automatic re-issue charges twice', { timeout: 300_000 }, async () => {
    const broken = mutant(world, (real) => ({
      createPaymentIntent: (request) => real.createPaymentIntent(request),
      retrievePaymentIntent: (id) => real.retrievePaymentIntent(id),
      searchPaymentIntents: (request) => real.searchPaymentIntents(request),
      listPaymentIntents: async (request) => {
        const result = await real.listPaymentIntents(request);
        // Blind to the newest page: what a List without created[lte]/pagination care would miss.
        return { ok: true, value: { items: [], pages: result.ok ? result.value.pages : 1, requestIds: [], complete: true } };
      },
      ...refundsOf(real),
    }));
    expect(await findsCounterexample(broken, 300)).not.toBeNull();
  });
});
