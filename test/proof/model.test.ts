// The property-based model: random interleavings of deliveries, duplicates, crashes at each step of
// an attempt, stalled (zombie) workers, lease expiry, Stripe faults, search lag, key pruning and
// reconciler pages, against the REAL engine, real PostgreSQL 18 and the real stripe SDK over HTTP to
// the fake Stripe; refund requests (partial, full, repeated, conflicting, over-refunds, before the
// charge is final, of failed orders, crashed), faults on the Refunds API, and the duplicate-charge
// remedy (a second succeeded PaymentIntent, its evidence delivered once or several times), refunds
// Stripe fails after they succeeded (their event told now, later, twice or — without events — never). After each
// run the world heals; `checkInvariants` (net amount included) and the refund oracle
// (model/refund-oracle.ts) judge it against the fake's ledger. fast-check shrinks a failure to a
// minimal command list.
//
//   PROOF_RUNS=2000 npx vitest run test/proof/model.test.ts      more runs (default 300)
//   PROOF_SEED=… PROOF_PATH=… npx vitest run test/proof/model.test.ts   replay a failure (printed on failure)
//   PROOF_TRACE=1 …                                              print every command as it is played
import { randomUUID } from 'node:crypto';
import fc from 'fast-check';
import { FailureKind, type PaymentGateway } from '../../lambdas/payments/gateway.ts';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { stripeGatewayFor } from '../../lambdas/payments/stripe-gateway.ts';
import { startFakeStripe } from '../../local/fake-stripe/server.ts';
import { FAULT_KINDS, type FakeStripe, type FaultKind } from '../../local/fake-stripe/types.ts';
import { checkInvariants, formatReport } from '../../local/invariants.ts';
import { createTestDatabase, type TestDatabase } from '../support/db.ts';
import type { RefundReason } from '../../lambdas/payments/types.ts';
import { playRun, type Command, type FaultEndpoint, type ModelRun, type ModelWorld, type OrderSpec } from './model/harness.ts';

const RUNS = Number(process.env.PROOF_RUNS ?? 300);
/** The manual-capture property's runs (default a third of RUNS): PROOF_AUTH_RUNS=1000 … -t "manual capture". */
const AUTH_RUNS = Number(process.env.PROOF_AUTH_RUNS ?? Math.ceil(RUNS / 3));
const SEED = process.env.PROOF_SEED === undefined ? undefined : Number(process.env.PROOF_SEED);
const PATH = process.env.PROOF_PATH;
const TRACE = process.env.PROOF_TRACE === '1';

/**
 * A property whose runs must also reach a rare case (its coverage): one batch on the run's seed
 * (PROOF_SEED, or fast-check's: the gate's fixed one under CI), then, while the case is not reached,
 * up to `max` batches in all on the next seeds (a developer's run without a seed: fresh ones), every
 * run of each judged. A replay (PROOF_PATH) is one batch. The caller then asserts the coverage.
 */
async function propertyBatches(max: number, reached: () => boolean, batch: (seed: number | undefined) => Promise<void>): Promise<void> {
  const seed = SEED ?? fc.readConfigureGlobal().seed;
  for (let n = 0; n < max && (n === 0 || (PATH === undefined && !reached())); n++) await batch(seed === undefined ? undefined : seed + n);
}

let db: TestDatabase;
let fake: FakeStripe;
let world: ModelWorld;

beforeAll(async () => {
  db = await createTestDatabase('model');
  fake = await startFakeStripe();
  const client = (timeoutMs: number) => stripeGatewayFor({ apiKey: 'sk_test_model', apiBase: fake.url, timeoutMs, maxNetworkRetries: 0 });
  // 250 ms: a `hang` costs little; the fake answers in a few ms. The patient client serves workers
  // parked at Stripe, whose answer must be the real one once released.
  world = { db: db.pool, fake, gateway: client(250), patientGateway: client(20_000) };
});
afterAll(async () => {
  await fake?.close();
  await db?.drop();
});

// ── Arbitraries ──────────────────────────────────────────────────────────────────────────────────

/**
 * The Stripe faults the model scripts. Not stall_after_commit (see the charge commands), nor the
 * lock-timeout 429 (the SDK's retry after it is a plain re-send). The late-commit faults (a create
 * committed after its 500, or after its key was left in flight) are in: the `commit_late` command, or
 * heal once every operation is decided, makes Stripe commit them.
 */
const MODEL_FAULT_KINDS = FAULT_KINDS.filter((kind) => kind !== 'stall_after_commit' && kind !== 'lock_timeout_429');

const MAX_ORDERS = 3;
const orderIndex = fc.nat({ max: MAX_ORDERS - 1 });
/** A fault of one of `kinds` on one of `endpoints`, 1–3 times (an endpoint named twice is drawn twice as often). */
const faultOf = (kinds: readonly FaultKind[], endpoints: readonly FaultEndpoint[]) =>
  fc.record({
    t: fc.constant('fault' as const),
    order: orderIndex,
    kind: fc.constantFrom(...kinds),
    times: fc.integer({ min: 1, max: 3 }),
    endpoint: fc.constantFrom<FaultEndpoint>(...endpoints),
  });
/**
 * A fault of the model's kinds on one of these endpoints. Not stall_after_commit: it freezes the
 * caller for good (bench:peers' crash); the model's crashes are its own commands.
 */
const faultOn = (...endpoints: FaultEndpoint[]) => faultOf(MODEL_FAULT_KINDS, endpoints);

const orderSpec: fc.Arbitrary<OrderSpec> = fc.record({
  paymentMethod: fc.oneof(
    { weight: 6, arbitrary: fc.constant('pm_card_visa') },
    { weight: 1, arbitrary: fc.constant('pm_card_chargeDeclined') },
    { weight: 1, arbitrary: fc.constant('pm_fake_processing') },
    { weight: 1, arbitrary: fc.constant('pm_card_authenticationRequired') },
  ),
  amount: fc.oneof(fc.constant(1), fc.integer({ min: 2, max: 99_999_999 })),
});

/** The charge world's commands, weighted as before refunds came. */
const chargeCommand: fc.Arbitrary<Command> = fc.oneof(
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
    arbitrary: faultOn('any', 'create', 'retrieve', 'search', 'list'),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('search_lag' as const), lagging: fc.boolean() }) },
  { weight: 1, arbitrary: fc.constant({ t: 'early_search_time' as const }) },
  { weight: 2, arbitrary: fc.constant({ t: 'evidence_time' as const }) },
  { weight: 1, arbitrary: fc.constant({ t: 'window_passes' as const }) },
  // Stripe commits a create it answered 500 (or left unanswered) now: before the proofs, or after the re-issue.
  { weight: 1, arbitrary: fc.record({ t: fc.constant('commit_late' as const), order: orderIndex }) },
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

/** Stripe fails one of our refunds after it succeeded (migrations/009); its event told now (copies ≥ 1), later, or at heal. */
const refundFailsAfterSuccess: fc.Arbitrary<Command> = fc.record({
  t: fc.constant('refund_fails_after_success' as const),
  order: orderIndex,
  pick: fc.nat({ max: 3 }),
  type: fc.constantFrom('refund.failed' as const, 'refund.updated' as const),
  copies: fc.integer({ min: 0, max: 2 }),
  inline: fc.boolean(),
  reask: fc.boolean(),
});

/** Refunds and the duplicate remedy: requests, faults on the Refunds API, pending refunds, extra PaymentIntents and their evidence. */
const refundCommand: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 5,
    arbitrary: fc.record({
      t: fc.constant('refund' as const),
      order: orderIndex,
      pick: fc.constantFrom('new' as const, 'new' as const, 'new' as const, 'repeat' as const, 'other_amount' as const),
      size: fc.constantFrom('partial' as const, 'rest' as const, 'full' as const, 'over' as const),
      reason: fc.constantFrom<RefundReason | null>(null, 'requested_by_customer', 'fraudulent', 'duplicate'),
      crash: fc.oneof(
        { weight: 4, arbitrary: fc.constant(null) },
        { weight: 1, arbitrary: fc.constantFrom('before_claim' as const, 'after_claim' as const, 'in_flight' as const, 'after_answer' as const) },
      ),
      afterCharge: fc.oneof({ weight: 3, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({ t: fc.constant('settle_refund' as const), order: orderIndex, status: fc.constantFrom('succeeded' as const, 'failed' as const, 'canceled' as const) }),
  },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('duplicate' as const), order: orderIndex, ours: fc.boolean() }) },
  {
    weight: 2,
    arbitrary: fc.record({ t: fc.constant('duplicate_evidence' as const), order: orderIndex, via: fc.constantFrom('operator' as const, 'event' as const), copies: fc.integer({ min: 1, max: 3 }) }),
  },
  {
    weight: 2,
    arbitrary: faultOn('refund_create', 'refund_create', 'refund_retrieve', 'refund_list'),
  },
  // Stripe fails a refund after it said succeeded (migrations/009), its event told now, later or at heal.
  { weight: 2, arbitrary: refundFailsAfterSuccess },
  { weight: 1, arbitrary: fc.record({ t: fc.constant('refund_event' as const), copies: fc.integer({ min: 1, max: 2 }), inline: fc.boolean() }) },
  // A refund created `pending` (Stripe's `processing` on a refund create), for settle_refund to finish — or fail, or cancel.
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant('fault' as const),
      order: orderIndex,
      kind: fc.constant('processing' as const),
      times: fc.integer({ min: 1, max: 2 }),
      endpoint: fc.constant<FaultEndpoint>('refund_create'),
    }),
  },
);

/**
 * Every run mixes both; refunds take about a fifth of the commands — weight taken from the charge
 * commands, not added runs (the suite's time budget) — so a run is as long and about as costly as before.
 */
const command: fc.Arbitrary<Command> = fc.oneof({ weight: 4, arbitrary: chargeCommand }, { weight: 1, arbitrary: refundCommand });

const runOf = (commands: fc.Arbitrary<Command>): fc.Arbitrary<ModelRun> =>
  fc.record({
    orders: fc.array(orderSpec, { minLength: 1, maxLength: MAX_ORDERS }),
    commands: fc.array(commands, { minLength: 1, maxLength: 24 }),
    healSettle: fc.constantFrom('succeeded' as const, 'canceled' as const, 'leave' as const),
    // Stripe events in on about half the runs, polling only on the others: the promise holds both ways.
    events: fc.boolean(),
  });
const modelRun = runOf(command);
/** Refund-heavy, with Stripe failing refunds after success (and telling it) a good share of the commands. */
const refundFailRun = runOf(
  fc.oneof(
    { weight: 3, arbitrary: chargeCommand },
    { weight: 3, arbitrary: refundCommand },
    { weight: 2, arbitrary: fc.record({ t: fc.constant('refund' as const), order: orderIndex, pick: fc.constant('new' as const), size: fc.constantFrom('partial' as const, 'rest' as const, 'full' as const, 'over' as const), reason: fc.constant(null), crash: fc.constant(null), afterCharge: fc.constant(true) }) },
    { weight: 1, arbitrary: refundFailsAfterSuccess },
  ),
);
/**
 * Late commits after automatic re-issues: creates answered 500 (or left unanswered) that Stripe commits
 * later, the time that proves absence and re-issues, declines of the re-issued create, refunds, and
 * Stripe committing at any moment — before the proofs, between them, after the re-issue.
 */
const lateCommitRun = runOf(
  fc.oneof(
    { weight: 3, arbitrary: chargeCommand },
    { weight: 1, arbitrary: refundCommand },
    { weight: 3, arbitrary: faultOf(['error_500_late_commit', 'in_flight_then_commit'], ['create', 'create', 'refund_create']) },
    { weight: 1, arbitrary: fc.record({ t: fc.constant('fault' as const), order: orderIndex, kind: fc.constant('decline' as const), times: fc.constant(1), endpoint: fc.constant<FaultEndpoint>('create') }) },
    { weight: 3, arbitrary: fc.constant({ t: 'evidence_time' as const }) },
    { weight: 2, arbitrary: fc.record({ t: fc.constant('reconcile' as const), limit: fc.constant(10) }) },
    { weight: 2, arbitrary: fc.record({ t: fc.constant('commit_late' as const), order: orderIndex }) },
  ),
);
/**
 * Manual capture: most orders only authorize (`capture: 'manual'`: the authorize command is their
 * charge, delivered, crashed, faulted and reconciled like any other); captures of all, of the whole
 * amount named, of a part, of one more than authorized; cancels; the hold lapsing on the model's
 * clock, the expiry check now or at heal; refunds of what was (or was not) captured; faults on the
 * capture and cancel endpoints — among every charge command (lost answers, 500s, crashes, redeliveries).
 */
const authorizationOrderSpec: fc.Arbitrary<OrderSpec> = fc
  .tuple(orderSpec, fc.oneof({ weight: 3, arbitrary: fc.constant(true) }, { weight: 1, arbitrary: fc.constant(false) }))
  .map(([spec, manual]) => (manual ? { ...spec, capture: 'manual' as const } : spec));
const crashOrNot = fc.oneof(
  { weight: 3, arbitrary: fc.constant(null) },
  { weight: 1, arbitrary: fc.constantFrom('before_claim' as const, 'after_claim' as const, 'in_flight' as const, 'after_answer' as const) },
);
const authorizationCommand: fc.Arbitrary<Command> = fc.oneof(
  { weight: 5, arbitrary: fc.record({ t: fc.constant('capture' as const), order: orderIndex, size: fc.constantFrom('all' as const, 'full' as const, 'partial' as const, 'partial' as const, 'over' as const), crash: crashOrNot }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('cancel_authorization' as const), order: orderIndex, crash: crashOrNot }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('authorization_expires' as const), order: orderIndex, check: fc.boolean() }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant('refund_authorized' as const), order: orderIndex, size: fc.constantFrom('partial' as const, 'full' as const, 'over' as const) }) },
  {
    weight: 2,
    arbitrary: faultOn('capture', 'capture', 'cancel', 'retrieve'),
  },
);
const authorizationRun: fc.Arbitrary<ModelRun> = fc.record({
  orders: fc.array(authorizationOrderSpec, { minLength: 1, maxLength: MAX_ORDERS }),
  commands: fc.array(fc.oneof({ weight: 3, arbitrary: chargeCommand }, { weight: 2, arbitrary: authorizationCommand }), { minLength: 1, maxLength: 24 }),
  healSettle: fc.constantFrom('succeeded' as const, 'canceled' as const, 'leave' as const),
  events: fc.boolean(),
});
/** For the broken charge engines below: the charge world alone, as it was (their counterexamples come as soon). */
const chargeRun = runOf(chargeCommand);
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
  refundVerdicts: Record<string, number>;
  refundEnds: Record<string, number>;
  refundsByCharge: Record<string, number>;
  duplicates: number;
  failedAfterSuccess: number;
  requestsAfterFailedRefund: Record<string, number>;
  lateCommits: number;
  lateChargesAfterReissue: number;
  watchLooks: number;
  watchRemedies: number;
  watchFindings: number;
}

describe('the engine under every interleaving the model can generate', () => {
  const tally: Tally = { runs: 0, commands: {}, finalStatus: {}, inReview: 0, healRounds: 0, timeSteps: 0, lists: 0, autoReissues: 0, refundVerdicts: {}, refundEnds: {}, refundsByCharge: {}, duplicates: 0, failedAfterSuccess: 0, requestsAfterFailedRefund: {}, lateCommits: 0, lateChargesAfterReissue: 0, watchLooks: 0, watchRemedies: 0, watchFindings: 0 };
  const counts = (r: Record<string, number>) => Object.entries(r).sort().map(([k, v]) => `${k} ${v}`).join(', ');

  afterAll(() => {
    const c = tally.commands;
    console.log(
      `model: ${tally.runs} runs (${RUNS} + ${Math.ceil(RUNS / 3)} refund-heavy asked), ${Object.values(c).reduce((a, b) => a + b, 0)} commands ` +
        `[${Object.entries(c).sort().map(([k, v]) => `${k} ${v}`).join(', ')}]; final operations ` +
        `[${Object.entries(tally.finalStatus).sort().map(([k, v]) => `${k} ${v}`).join(', ')}], in review ${tally.inReview}; ` +
        `heal rounds ${tally.healRounds}, time steps ${tally.timeSteps}; List requests ${tally.lists}, automatic re-issues ${tally.autoReissues}; ` +
        `refund requests [${counts(tally.refundVerdicts)}] (the charge then: [${counts(tally.refundsByCharge)}]), accepted refunds ended [${counts(tally.refundEnds)}], extra PaymentIntents made ${tally.duplicates}; ` +
        `refunds Stripe failed after success ${tally.failedAfterSuccess}, refund requests after one [${counts(tally.requestsAfterFailedRefund)}]; ` +
        `late commits ${tally.lateCommits} (charges after a re-issue ${tally.lateChargesAfterReissue}), watch looks ${tally.watchLooks}, remedies ${tally.watchRemedies}, findings ${tally.watchFindings}`,
    );
  });

  /** One run played and judged; the tally counts it. */
  const judged = async (run: ModelRun) => {
    const result = await playRun(world, run, TRACE ? (line) => console.log(line) : undefined);
    tally.runs += 1;
    for (const cmd of run.commands) {
      const key =
        cmd.t === 'crash' || cmd.t === 'stall'
          ? `${cmd.t}:${cmd.via}:${cmd.point}`
          : cmd.t === 'fault'
            ? `fault:${cmd.kind}${cmd.endpoint.startsWith('refund_') ? ':refund' : ''}`
            : cmd.t === 'stripe_event' || cmd.t === 'apply_inbox' || cmd.t === 'refund_fails_after_success' || cmd.t === 'refund_event'
              ? `${cmd.t}:${run.events ? 'on' : 'off'}`
              : cmd.t === 'refund'
                ? `refund:${cmd.pick}${cmd.crash ? ':crash' : ''}`
                : cmd.t;
      tally.commands[key] = (tally.commands[key] ?? 0) + 1;
    }
    for (const [status, n] of Object.entries(result.report.byStatus)) tally.finalStatus[status] = (tally.finalStatus[status] ?? 0) + n;
    tally.inReview += result.report.inReview;
    tally.healRounds += result.healRounds;
    tally.timeSteps += result.timeSteps;
    tally.lists += result.lists;
    tally.autoReissues += result.autoReissues;
    for (const [k, v] of Object.entries(result.refundVerdicts)) tally.refundVerdicts[k] = (tally.refundVerdicts[k] ?? 0) + v;
    for (const [k, v] of Object.entries(result.refundEnds)) tally.refundEnds[k] = (tally.refundEnds[k] ?? 0) + v;
    for (const [k, v] of Object.entries(result.refundsByCharge)) tally.refundsByCharge[k] = (tally.refundsByCharge[k] ?? 0) + v;
    tally.duplicates += result.duplicates;
    tally.failedAfterSuccess += result.failedAfterSuccess;
    tally.lateCommits += result.lateCommits;
    tally.lateChargesAfterReissue += result.lateChargesAfterReissue;
    tally.watchLooks += result.watchLooks;
    tally.watchRemedies += result.watchRemedies;
    tally.watchFindings += result.watchFindings;
    for (const [k, v] of Object.entries(result.requestsAfterFailedRefund)) tally.requestsAfterFailedRefund[k] = (tally.requestsAfterFailedRefund[k] ?? 0) + v;
    if (!result.report.ok || result.problems.length > 0) {
      throw new Error(`${formatReport(result.report)}\n${result.problems.map((p) => `  ✗ ${p}`).join('\n')}\norders: ${result.orderIds.join(', ')}`);
    }
  };
  const options = (numRuns: number) => ({
    numRuns,
    ...(SEED === undefined ? {} : { seed: SEED }),
    ...(PATH === undefined ? {} : { path: PATH }),
    // fast-check's message carries `seed` and `path`: PROOF_SEED=<seed> PROOF_PATH=<path> replays it (with -t naming the test).
    verbose: 1 as const,
  });

  it('never charges twice, loses nothing, fails nothing wrongly; every outcome has its audit and outbox trail', { timeout: 1_800_000 }, async () => {
    await fc.assert(fc.asyncProperty(modelRun, judged), options(RUNS));
    expect(tally.runs).toBeGreaterThan(0);
  });

  // In the runs above a refund that Stripe holds succeeded is rare when the command comes (a fifth of the
  // commands are refunds'): these runs, a third as many, weight refunds and Stripe failing one after
  // success up, so that migrations/009's rule meets the other commands' interleavings often.
  it('refunds Stripe fails after they succeeded: counted until the ledger learns it, refundable again after, the money as Stripe holds it', { timeout: 1_800_000 }, async () => {
    const before = tally.failedAfterSuccess;
    await fc.assert(fc.asyncProperty(refundFailRun, judged), options(Math.ceil(RUNS / 3)));
    // A hundred refund-heavy runs without one refund failed after success would be the command never applying.
    if (PATH === undefined) expect(tally.failedAfterSuccess).toBeGreaterThan(before);
  });
});

describe('manual capture under every interleaving the model can generate', () => {
  const auth = { runs: 0, commands: {} as Record<string, number>, verdicts: {} as Record<string, number>, refunds: {} as Record<string, number>, ends: {} as Record<string, number> };
  const add = (into: Record<string, number>, from: Readonly<Record<string, number>>) => {
    for (const [k, v] of Object.entries(from)) into[k] = (into[k] ?? 0) + v;
  };
  const counts = (r: Record<string, number>) => Object.entries(r).sort().map(([k, v]) => `${k} ${v}`).join(', ');
  afterAll(() =>
    console.log(
      `model (manual capture): ${auth.runs} runs; commands [${counts(auth.commands)}]; capture / cancel verdicts [${counts(auth.verdicts)}]; ` +
        `refunds of manual orders [${counts(auth.refunds)}]; authorizations ended [${counts(auth.ends)}]`,
    ),
  );
  // The coverage the runs must reach: captures in full and in part, refusals above the authorization, cancels, expiries, refunds refused uncaptured.
  const authNotReached = () =>
    Object.entries({
      'capture succeeded': auth.ends['capture succeeded'],
      'cancel_authorization succeeded': auth.ends['cancel_authorization succeeded'],
      'cancel_authorization (expired) succeeded': auth.ends['cancel_authorization (expired) succeeded'],
      'capture:exceeds_authorization': auth.verdicts['capture:exceeds_authorization'],
      'capture:already_settled': auth.verdicts['capture:already_settled'],
      'refund not_captured': auth.refunds.not_captured,
    }).flatMap(([what, n]) => ((n ?? 0) > 0 ? [] : [what]));
  it('manual capture: captured ≤ authorized, one settlement per authorization, nothing captured after a cancel or an expiry, refunds only of what was captured, the operations as Stripe holds them', { timeout: 1_800_000 }, async () => {
    // With a developer's random seed one batch of runs once drew no authorization that ended expired
    // (29 expiry commands among its 100 runs): up to three batches (propertyBatches).
    await propertyBatches(3, () => authNotReached().length === 0, authorizationBatch);
    if (PATH === undefined) expect(authNotReached()).toEqual([]);
  });
  const authorizationBatch = (seed: number | undefined) =>
    fc.assert(
      fc.asyncProperty(authorizationRun, async (run) => {
        const result = await playRun(world, run, TRACE ? (line) => console.log(line) : undefined);
        auth.runs += 1;
        for (const cmd of run.commands) {
          const key = cmd.t === 'capture' ? `capture:${cmd.size}${cmd.crash ? ':crash' : ''}` : cmd.t === 'cancel_authorization' ? `cancel${cmd.crash ? ':crash' : ''}` : cmd.t === 'fault' ? `fault:${cmd.endpoint}` : cmd.t;
          auth.commands[key] = (auth.commands[key] ?? 0) + 1;
        }
        add(auth.verdicts, result.authorizationVerdicts);
        add(auth.refunds, result.manualRefundVerdicts);
        add(auth.ends, result.authorizationEnds);
        if (!result.report.ok || result.problems.length > 0) {
          throw new Error(`${formatReport(result.report)}\n${result.problems.map((p) => `  ✗ ${p}`).join('\n')}\norders: ${result.orderIds.join(', ')}`);
        }
      }),
      { numRuns: AUTH_RUNS, ...(seed === undefined ? {} : { seed }), ...(PATH === undefined ? {} : { path: PATH }), verbose: 1 as const },
    );
});

describe('late commits after automatic re-issues', () => {
  const late = { runs: 0, lateCharges: 0, remedies: 0, findings: 0 };
  afterAll(() => console.log(`model (late commits): ${late.runs} runs, late charges after a re-issue ${late.lateCharges}, watch remedies ${late.remedies}, watch findings ${late.findings}`));
  it('a create Stripe commits after the re-issue it allowed ends refunded (or told a person), with events or without', { timeout: 1_800_000 }, async () => {
    // The case this property is for is rare in any one run: with a developer's random seed, one batch
    // of runs drew no late charge at all (100 runs). A batch that did not reach it is followed by
    // another (a new seed each, every run still judged), up to five; only then is "not reached" a
    // failure. The gate's fixed seed (CI=true) reaches it in the first batch; a replay (PROOF_PATH)
    // is one batch.
    await propertyBatches(5, () => late.lateCharges > 0, lateCommitBatch);
    // The runs must reach the case they are for: late charges after a re-issue. How each ends is the
    // property's (refunded, or told a person); that the watch's remedy refunds one is the examples'
    // below, which random runs reach too rarely to require (seeds 42 and 7: 16 and 8 late charges,
    // none a duplicate of a succeeded re-issue).
    if (PATH === undefined) expect(late.lateCharges).toBeGreaterThan(0);
  });

  /** One batch of the property's runs, on `seed` (propertyBatches). */
  const lateCommitBatch = (seed: number | undefined) =>
    fc.assert(
      fc.asyncProperty(lateCommitRun, async (run) => {
        const result = await playRun(world, run);
        late.runs += 1;
        late.lateCharges += result.lateChargesAfterReissue;
        late.remedies += result.watchRemedies;
        late.findings += result.watchFindings;
        if (!result.report.ok || result.problems.length > 0) {
          throw new Error(`${formatReport(result.report)}\n${result.problems.map((p) => `  ✗ ${p}`).join('\n')}\norders: ${result.orderIds.join(', ')}`);
        }
      }),
      {
        numRuns: Math.ceil(RUNS / 3),
        ...(seed === undefined ? {} : { seed }),
        ...(PATH === undefined ? {} : { path: PATH }),
        verbose: 1 as const,
      },
    );

  const lateAfterReissue = (events: boolean, declineReissued: boolean): ModelRun => ({
    orders: [{ paymentMethod: 'pm_card_visa', amount: 4200 }],
    commands: [
      { t: 'fault', order: 0, kind: 'error_500_late_commit', times: 1, endpoint: 'create' },
      { t: 'deliver', orders: [0] },
      // Two proofs of absence, 16 minutes apart: the re-issue under generation 1.
      { t: 'evidence_time' },
      { t: 'backoff_elapses' },
      { t: 'reconcile', limit: 10 },
      { t: 'evidence_time' },
      { t: 'backoff_elapses' },
      ...(declineReissued ? [{ t: 'fault' as const, order: 0, kind: 'decline' as const, times: 1, endpoint: 'create' as const }] : []),
      { t: 'reconcile', limit: 10 },
      { t: 'backoff_elapses' },
      { t: 'reconcile', limit: 10 },
      // Only now does Stripe commit generation 0's create.
      { t: 'commit_late', order: 0 },
    ],
    healSettle: 'succeeded',
    events,
  });

  it('without Stripe events, the watch after the re-issue finds the late charge and the remedy refunds it', { timeout: 120_000 }, async () => {
    const result = await playRun(world, lateAfterReissue(false, false), TRACE ? (line) => console.log(line) : undefined);
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.autoReissues).toBe(1);
    expect(result.lateChargesAfterReissue).toBe(1);
    expect(result.watchRemedies).toBe(1);
    expect(result.refundEnds).toEqual({ remedy_succeeded: 1 });
    expect(result.report.lateCommits).toBe(1);
  });

  it('with Stripe events, the event hands it to the remedy; the watch has nothing left to do', { timeout: 120_000 }, async () => {
    const result = await playRun(world, lateAfterReissue(true, false));
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.lateChargesAfterReissue).toBe(1);
    expect(result.refundEnds).toEqual({ remedy_succeeded: 1 });
  });

  it('the re-issued create declined: the order was announced failed and is charged — no machine refund, a finding for a person', { timeout: 120_000 }, async () => {
    const result = await playRun(world, lateAfterReissue(false, true));
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.report.byStatus.failed).toBe(1);
    expect(result.watchFindings).toBe(1);
    expect(result.report.warnings).toEqual([expect.objectContaining({ kind: 'late_charge_found' })]);
  });

  it('every create committed late, re-issues spent: the operation waits for a human, each charge named for them, none a problem', { timeout: 120_000 }, async () => {
    // Found by a random seed: the last generation's create, committed after absence was proven with no
    // re-issue left, is found while the operation is in review — a finding for the person, not a contradiction of the ledger.
    const result = await playRun(world, {
      orders: [{ paymentMethod: 'pm_card_visa', amount: 1 }],
      commands: [
        { t: 'fault', order: 0, kind: 'error_500_late_commit', times: 3, endpoint: 'create' },
        { t: 'deliver', orders: [0] },
      ],
      healSettle: 'succeeded',
      events: true,
    });
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.report.warnings.map((w) => w.kind)).toContain('charge_awaiting_review');
  });

  it('two creates committed late after two re-issues, the last declined: failed and charged twice — each charge found and told, none refunded by a machine', { timeout: 120_000 }, async () => {
    // Found by a random seed: the checker told a person of ONE late charge of a failed operation
    // (late_charge_found) but called TWO a double charge, whatever the watch had found.
    const result = await playRun(world, {
      orders: [{ paymentMethod: 'pm_card_visa', amount: 2 }],
      commands: [
        { t: 'fault', order: 0, kind: 'error_500_late_commit', times: 2, endpoint: 'create' },
        { t: 'refund', order: 0, pick: 'new', size: 'partial', reason: null, crash: null, afterCharge: true },
        { t: 'fault', order: 0, kind: 'decline', times: 1, endpoint: 'create' },
      ],
      healSettle: 'succeeded',
      events: false,
    });
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.lateChargesAfterReissue).toBe(2);
    expect(result.report.warnings.map((w) => w.kind)).toEqual(['late_charge_found', 'late_charge_found']);
    // Unfound, the same two are a double charge: the watch's findings are what tells the person.
    await world.db.query(
      `UPDATE stripe_event_findings SET resolved_at = now() WHERE resolved_at IS NULL AND operation_id IN (SELECT id FROM payment_operations WHERE order_id = ANY($1))`,
      [result.orderIds],
    );
    const unfound = await checkInvariants({ db: world.db, paymentIntents: world.fake.paymentIntents(), refunds: world.fake.refunds(), orderIds: result.orderIds });
    expect(unfound.violations.map((v) => v.kind)).toContain('double_charge');
  });

  it('a manual capture\'s late authorization after the re-issue: the customer held twice, and the watch tells a person at its first look (events off and on)', { timeout: 120_000 }, async () => {
    for (const events of [false, true]) {
      const run = lateAfterReissue(events, false);
      const result = await playRun(world, { ...run, orders: [{ ...run.orders[0]!, capture: 'manual' }] }, TRACE ? (line) => console.log(line) : undefined);
      expect(result.problems).toEqual([]);
      expect(result.report.violations).toEqual([]);
      // Both holds ended canceled by Stripe's expiry (the heal moves the clock past it): the late one held the customer for it.
      expect(result.report.warnings.map((w) => w.kind)).toEqual(['late_hold_found']);
      // Unfound, the same hold is held_twice: the finding is what tells the person.
      await world.db.query(
        `UPDATE stripe_event_findings SET resolved_at = now() WHERE resolved_at IS NULL AND operation_id IN (SELECT id FROM payment_operations WHERE order_id = ANY($1))`,
        [result.orderIds],
      );
      const unfound = await checkInvariants({ db: world.db, paymentIntents: world.fake.paymentIntents(), refunds: world.fake.refunds(), orderIds: result.orderIds, requireQuiescent: true });
      expect(unfound.violations.map((v) => v.kind)).toEqual(['held_twice']);
    }
  });

  it('the same with Stripe events: the late charge\'s event finds it first (a contradiction for a person), and the watch adds no second finding', { timeout: 120_000 }, async () => {
    // Found by a random seed: the checker took only the watch's finding for "a person is told".
    const result = await playRun(world, lateAfterReissue(true, true));
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.report.byStatus.failed).toBe(1);
    expect(result.report.warnings).toEqual([expect.objectContaining({ kind: 'late_charge_found' })]);
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

describe('refunds and the duplicate remedy are paths the model takes', () => {
  it('a duplicate found twice is refunded once; the order\'s own refunds are still judged against its charge alone', { timeout: 120_000 }, async () => {
    const run: ModelRun = {
      orders: [{ paymentMethod: 'pm_card_visa', amount: 1200 }],
      commands: [
        { t: 'deliver', orders: [0] },
        { t: 'duplicate', order: 0, ours: true },
        { t: 'duplicate_evidence', order: 0, via: 'operator', copies: 2 },
        { t: 'refund', order: 0, pick: 'new', size: 'partial', reason: 'requested_by_customer', crash: null, afterCharge: true },
        { t: 'refund', order: 0, pick: 'new', size: 'rest', reason: null, crash: 'in_flight', afterCharge: true },
        { t: 'refund', order: 0, pick: 'new', size: 'over', reason: null, crash: null, afterCharge: true },
      ],
      healSettle: 'succeeded',
    };
    const result = await playRun(world, run);
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.duplicates).toBe(1);
    // The crashed one is accepted, then redelivered at heal (a repeat); the over-refund counts the crashed one.
    expect(result.refundVerdicts).toEqual({ accepted: 2, repeat: 1, exceeds_charge: 1 });
    expect(result.refundEnds).toEqual({ succeeded: 2, remedy_succeeded: 1 });
  });
});

describe('a duplicate whose remedy Stripe fails', () => {
  it('goes to a human (review, a warning), not to a final failed that leaves the second charge unasked about', { timeout: 120_000 }, async () => {
    // The model's counterexample (before the fix): the remedy's Refund was created pending, then failed
    // at Stripe; the remedy ended `failed` and the order kept both charges (double_charge, net_amount).
    const run: ModelRun = {
      orders: [{ paymentMethod: 'pm_card_visa', amount: 2 }],
      commands: [
        { t: 'deliver', orders: [0] },
        { t: 'fault', order: 0, kind: 'processing', times: 1, endpoint: 'refund_create' },
        { t: 'duplicate', order: 0, ours: false },
      ],
      healSettle: 'canceled', // heal fails pending refunds
    };
    const result = await playRun(world, run);
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    expect(result.refundEnds).toEqual({ remedy_in_review: 1 });
    expect(result.report.warnings).toEqual([expect.objectContaining({ kind: 'duplicate_awaiting_review', detail: expect.stringMatching(/remedy's Refund re_\w+ of pi_\w+ is failed at Stripe/) })]);
  });
});

// Charge 900, refund it all; Stripe fails that refund after it succeeded; a new refund of 900 comes
// before the event is applied, then after (recorded only, then the inbox sweep), then one more cent.
const failedAfterSuccessRun = (events: boolean): ModelRun => ({
  orders: [{ paymentMethod: 'pm_card_visa', amount: 900 }],
  commands: [
    { t: 'deliver', orders: [0] },
    { t: 'refund', order: 0, pick: 'new', size: 'full', reason: null, crash: null, afterCharge: true },
    { t: 'refund_fails_after_success', order: 0, pick: 0, type: 'refund.failed', copies: 1, inline: false, reask: false },
    { t: 'refund', order: 0, pick: 'new', size: 'full', reason: null, crash: null, afterCharge: true },
    { t: 'apply_inbox' },
    { t: 'refund_event', copies: 2, inline: true },
    { t: 'refund', order: 0, pick: 'new', size: 'full', reason: null, crash: null, afterCharge: true },
    { t: 'refund', order: 0, pick: 'new', size: 'over', reason: null, crash: null, afterCharge: true },
  ],
  healSettle: 'succeeded',
  events,
});

describe('a refund Stripe fails after it succeeded (migrations/009) is a path the model takes', () => {
  const run = failedAfterSuccessRun;

  it('with events: exceeds_charge until the fact is applied, then its amount is refundable again (once); the net amount is 0', { timeout: 120_000 }, async () => {
    const result = await playRun(world, run(true));
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]);
    // rf0 accepted; rf1 (the event only recorded) exceeds; rf2 (applied) accepted; rf3 (one more than is left) exceeds
    expect(result.refundVerdicts).toEqual({ accepted: 2, exceeds_charge: 2 });
    expect(result.refundEnds).toEqual({ failed_after_success_learnt: 1, succeeded: 1 });
    expect([result.failedAfterSuccess, result.requestsAfterFailedRefund]).toEqual([1, { not_learnt: 1, learnt: 2 }]);
  });

  it('without events the product cannot know: the refund stays counted (exceeds_charge); the checker reports exactly that refund and its order', { timeout: 120_000 }, async () => {
    const result = await playRun(world, run(false));
    expect(result.problems).toEqual([]);
    expect(result.report.violations).toEqual([]); // the expected ones set aside (and required) by the harness
    expect(result.refundVerdicts).toEqual({ accepted: 1, exceeds_charge: 3 });
    expect(result.refundEnds).toEqual({ failed_after_success_unknown: 1 });
    expect([result.failedAfterSuccess, result.requestsAfterFailedRefund]).toEqual([1, { not_learnt: 3 }]);
  });
});

// ── The model can fail ───────────────────────────────────────────────────────────────────────────
// The same property against engines broken on purpose (through their gateway): if the model could not
// find these, a green run above would prove little.

/** Charge mutants pass the refund calls through unchanged. */
function refundsOf(real: PaymentGateway): Pick<PaymentGateway, 'createRefund' | 'retrieveRefund' | 'listRefunds'> {
  return { createRefund: (r) => real.createRefund(r), retrieveRefund: (id) => real.retrieveRefund(id), listRefunds: (r) => real.listRefunds(r) };
}

function authorizationsOf(real: PaymentGateway): Pick<PaymentGateway, 'capturePaymentIntent' | 'cancelPaymentIntent'> {
  return { capturePaymentIntent: (r) => real.capturePaymentIntent(r), cancelPaymentIntent: (r) => real.cancelPaymentIntent(r) };
}

/** A mutant changes what it names; captures and cancels pass through unchanged. */
function mutant(base: ModelWorld, wrap: (real: PaymentGateway) => Omit<PaymentGateway, 'capturePaymentIntent' | 'cancelPaymentIntent'>): ModelWorld {
  const wrapped = (real: PaymentGateway): PaymentGateway => ({ ...authorizationsOf(real), ...wrap(real) });
  return { ...base, gateway: wrapped(base.gateway), patientGateway: wrapped(base.patientGateway) };
}

async function findsCounterexample(broken: ModelWorld, runs: number): Promise<string | null> {
  const result = await fc.check(
    fc.asyncProperty(chargeRun, async (run) => {
      const r = await playRun(broken, run);
      return r.report.ok && r.problems.length === 0;
    }),
    { numRuns: runs, endOnFailure: true, seed: 42 },
  );
  return result.failed ? `found after ${result.numRuns} run(s)` : null;
}

describe('the model catches broken engines', () => {
  // Manual capture: a gateway that captures what was not asked — all of the authorization for a
  // partial capture, or a capture where a cancel was asked (money taken after the cancel) — is caught
  // by the authorization oracle's judgement of the PaymentIntent (fixed runs: one order, one request).
  const manualRun = (commands: Command[]): ModelRun => ({ orders: [{ paymentMethod: 'pm_card_visa', amount: 3000, capture: 'manual' }], commands, healSettle: 'succeeded', events: false });
  const withAuthorizations = (wrap: (real: PaymentGateway) => Pick<PaymentGateway, 'capturePaymentIntent' | 'cancelPaymentIntent'>): ModelWorld => {
    const wrapped = (real: PaymentGateway): PaymentGateway => ({
      createPaymentIntent: (r) => real.createPaymentIntent(r),
      retrievePaymentIntent: (id, scope) => real.retrievePaymentIntent(id, scope),
      searchPaymentIntents: (r) => real.searchPaymentIntents(r),
      listPaymentIntents: (r) => real.listPaymentIntents(r),
      ...refundsOf(real),
      ...wrap(real),
    });
    return { ...world, gateway: wrapped(world.gateway), patientGateway: wrapped(world.patientGateway) };
  };
  it('a capture of the whole authorization when a part was asked → captured more than the capture (oracle)', { timeout: 60_000 }, async () => {
    const broken = withAuthorizations((real) => ({ capturePaymentIntent: ({ amount: _asked, ...r }) => real.capturePaymentIntent(r), cancelPaymentIntent: (r) => real.cancelPaymentIntent(r) }));
    const result = await playRun(broken, manualRun([{ t: 'deliver', orders: [0] }, { t: 'capture', order: 0, size: 'partial', crash: null }]));
    // (The engine's own reading puts the capture in review: Stripe holds more than it asked.)
    expect(result.problems).toEqual([expect.stringMatching(/captured 3000, more than capture \S+ asked \(1000, unknown\)/)]);
  });
  it('a cancel sent as a capture → money captured after a cancel (oracle)', { timeout: 60_000 }, async () => {
    const broken = withAuthorizations((real) => ({ capturePaymentIntent: (r) => real.capturePaymentIntent(r), cancelPaymentIntent: (r) => real.capturePaymentIntent(r) }));
    const result = await playRun(broken, manualRun([{ t: 'deliver', orders: [0] }, { t: 'cancel_authorization', order: 0, crash: null }]));
    expect(result.problems).toEqual([expect.stringMatching(/captured 3000 after cancel \S+ \(/)]);
  });

  it('a ledger that never marks the refund Stripe failed after success (its fact written, the refund still counted) → the oracle and the checker disagree with it', { timeout: 120_000 }, async () => {
    // The broken product: the fact's insert trigger (migrations/009) off, as a writer around it would be.
    // The test database's owner may; the trigger is on again before anything else runs.
    await db.pool.query('ALTER TABLE outcome_events DISABLE TRIGGER outcome_events_mark_refund_failed_after_success');
    let result: Awaited<ReturnType<typeof playRun>>;
    try {
      result = await playRun(world, failedAfterSuccessRun(true));
    } finally {
      await db.pool.query('ALTER TABLE outcome_events ENABLE TRIGGER outcome_events_mark_refund_failed_after_success');
    }
    expect(result.problems).toEqual(
      expect.arrayContaining([
        expect.stringMatching(/refund rf2 \(900, null\).*the oracle says accepted, the engine exceeds_charge/),
        expect.stringMatching(/refund rf0: Stripe failed re_\w+ after it succeeded; its event was delivered, yet the operation is not marked/),
      ]),
    );
    expect(result.report.violationsByKind).toMatchObject({ refund_mismatch: 1, net_amount: 1 });
  });

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

  it('a fresh idempotency key per refund create (a refund key not derived from its operation) → a refund made twice', { timeout: 300_000 }, async () => {
    const broken = mutant(world, (real) => ({
      createPaymentIntent: (request) => real.createPaymentIntent(request),
      retrievePaymentIntent: (id) => real.retrievePaymentIntent(id),
      searchPaymentIntents: (request) => real.searchPaymentIntents(request),
      listPaymentIntents: (request) => real.listPaymentIntents(request),
      createRefund: (request) => real.createRefund({ ...request, idempotencyKey: `fresh-${randomUUID()}` }),
      retrieveRefund: (id) => real.retrieveRefund(id),
      listRefunds: (request) => real.listRefunds(request),
    }));
    // The run fast-check shrank this mutant's first counterexample to (seed 42, 76 runs of a
    // refund-heavy arbitrary: too slow for the suite, so it is kept as the directed run it shrank to):
    // the refund's answer is cut after Stripe made it, and the reconciler's retry makes a second one.
    const run: ModelRun = {
      orders: [{ paymentMethod: 'pm_card_visa', amount: 2 }],
      commands: [
        { t: 'fault', order: 0, kind: 'truncated_response_after_commit', times: 1, endpoint: 'refund_create' },
        { t: 'refund', order: 0, pick: 'new', size: 'partial', reason: null, crash: null, afterCharge: true },
        { t: 'reconcile', limit: 1 },
      ],
      healSettle: 'succeeded',
    };
    expect((await playRun(world, run)).problems).toEqual([]);
    const result = await playRun(broken, run);
    expect(result.report.violationsByKind).toMatchObject({ net_amount: 1 });
    expect(result.problems).toEqual(expect.arrayContaining([expect.stringMatching(/refund rf0 was made 2 times at Stripe/), expect.stringMatching(/net amount at Stripe 0, expected 1/)]));
  });
});
