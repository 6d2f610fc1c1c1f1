// Contestant: DBOS Transact (@dbos-inc/dbos-sdk 5.3), written as its documentation shows for a
// payment that must happen once:
//   - one workflow per order, its workflow ID the order's idempotency key ("Idempotency",
//     https://docs.dbos.dev/typescript/tutorials/idempotency-tutorial: "set an idempotency key for a
//     workflow to guarantee it executes only once … useful if your operations have side effects like
//     making a payment"; the key passed directly to DBOS.startWorkflow). A redelivered message starts
//     nothing new: DBOS.startWorkflow with an existing ID returns a handle on that workflow, and its
//     result once recorded;
//   - the Stripe call as a step ("Steps", https://docs.dbos.dev/typescript/tutorials/step-tutorial:
//     "calling an external API like Stripe" is the example of what must be a step; a completed step
//     is not run again, its recorded output is returned), with step retries on, left at the defaults
//     the docs give (StepConfig in node_modules/@dbos-inc/dbos-sdk/dist/src/step.d.ts: 3 attempts,
//     1 s, backoff 2), and Stripe's Idempotency-Key derived from the workflow ID (DBOS.workflowID),
//     so that a step re-run after a crash replays Stripe's answer instead of charging again;
//   - the workflow function deterministic: no clock, no randomness, no I/O outside the step (the step
//     tutorial: nondeterministic operations — an external API, the time, random numbers — are steps);
//   - DBOS's own recovery instead of a reconciler: DBOS.launch() recovers the PENDING workflows of its
//     executor and resumes each from its last completed step (DBOS.launch → DBOSExecutor.init →
//     recoverPendingWorkflows, node_modules/@dbos-inc/dbos-sdk/dist/src/dbos.js and dbos-executor.js).
// Its system database is a database of its own on the bench's PostgreSQL server.
//
// What the bench gives it, and what it models:
//   - the SQS handler (the product's event source, FIFO, batches of 10) starts or re-attaches to the
//     order's workflow and waits for its result; a decline is a result (stored like a success), any
//     other error left after the step's retries ends the workflow in ERROR, which DBOS records and
//     returns to every later start with that ID: the store says the order failed, and the message is
//     done (failing it would only fail the rest of its FIFO batch, again at every redelivery);
//   - the crash: the bench freezes a worker after Stripe executed (stall_after_commit), as for every
//     contestant. DBOS recovers only when a runtime launches, so the scheduled recovery restarts this
//     process's runtime (DBOS.shutdown, DBOS.launch) when a workflow has been PENDING, its status
//     unchanged, for longer than a function timeout — the invocation that ran it is dead, and on Lambda its execution environment
//     would be replaced by a fresh one whose launch recovers it. At most one restart per function
//     timeout. DBOS allows one runtime per process; bench:peers runs each fault run in a process of its
//     own (worker.ts) and the clean runs one after another, each launch after the previous shutdown.
import pg from 'pg';
import { DBOS } from '@dbos-inc/dbos-sdk';
import type { ChargeRequest } from '../../../lambdas/payments/message.ts';
import { paymentIntentParams, fifoBatch, type Contestant } from '../contestant.ts';
import type { Belief } from '../truth.ts';

interface ChargeOutcome {
  readonly status: string;
  readonly paymentIntentId: string | null;
}

/** The workflow ID of an order: the order's idempotency key. */
export const dbosWorkflowId = (orderId: string) => `charge-${orderId}`;

let stripeOfRun: ReturnType<Parameters<Contestant['start']>[0]['stripe']> | null = null;

async function createPaymentIntent(order: ChargeRequest, idempotencyKey: string): Promise<ChargeOutcome> {
  try {
    const pi = await stripeOfRun!.paymentIntents.create(
      paymentIntentParams(order),
      { idempotencyKey },
    );
    return { status: pi.status, paymentIntentId: pi.id };
  } catch (error) {
    if ((error as { type?: string }).type === 'StripeCardError') return { status: 'failed', paymentIntentId: null };
    throw error;
  }
}

async function chargeOrder(order: ChargeRequest): Promise<ChargeOutcome> {
  const key = `${DBOS.workflowID}:payment-intent`;
  return DBOS.runStep(() => createPaymentIntent(order, key), { name: 'createPaymentIntent', retriesAllowed: true });
}

// Registered once per process, before the first launch (DBOS: "Register each workflow … before launch").
let chargeWorkflow: ((order: ChargeRequest) => Promise<ChargeOutcome>) | null = null;

function withDatabase(url: string, database: string): string {
  const u = new URL(url);
  u.pathname = `/${database}`;
  return u.toString();
}

export const dbos: Contestant = {
  id: 'dbos',
  title: 'DBOS Transact, workflow ID per order',
  store: 'postgresql',
  async start(ctx) {
    const runDb = new URL(ctx.databaseUrl).pathname.slice(1);
    const systemDb = `${runDb}_dbos`;
    const systemDatabaseUrl = withDatabase(ctx.databaseUrl, systemDb);
    stripeOfRun = ctx.stripe();
    DBOS.setConfig({ name: 'bench-peers-dbos', systemDatabaseUrl, logLevel: 'error' });
    // (DBOS logs each step that exhausts its retries at level error, with the Stripe error: on stderr.)
    chargeWorkflow ??= DBOS.registerWorkflow(chargeOrder, { name: 'chargeOrder' });
    await DBOS.launch();

    const systemPool = new pg.Pool({ connectionString: systemDatabaseUrl, max: 1, application_name: 'peer-dbos-recovery' });
    systemPool.on('error', () => {});
    let restarting: Promise<void> | null = null;
    let lastRestartAt = 0;
    const restart = async () => {
      await DBOS.shutdown();
      await DBOS.launch(); // recovers this executor's PENDING workflows
    };
    let checking = false;
    const launched = async () => {
      while (restarting) await restarting;
    };

    return {
      charge: async (event) =>
        fifoBatch(event.Records, async (body) => {
          await launched();
          const order = JSON.parse(body) as ChargeRequest;
          const handle = await DBOS.startWorkflow(chargeWorkflow!, { workflowID: dbosWorkflowId(order.orderId) })(order);
          try {
            await handle.getResult();
          } catch (error) {
            // The workflow's own recorded error is its outcome: every later start with this ID returns
            // it, so a redelivery cannot change it (and would only fail the rest of its FIFO batch).
            if ((await handle.getStatus())?.status === 'ERROR') return;
            throw error;
          }
        }),
      reconcile: async (_event, context) => {
        // This scheduled function's timeout is the charge function's (run.ts): an invocation older than it is dead.
        const functionTimeoutMs = context.getRemainingTimeInMillis();
        if (checking || restarting || Date.now() - lastRestartAt < functionTimeoutMs) return { restarted: false };
        checking = true; // one restart at a time: the process has one runtime
        try {
          // Its status last written (started, or recovered) longer than a function timeout ago. Not
          // listWorkflows' time filter: that is on created_at, which a recovered workflow keeps.
          const stale = await systemPool.query('SELECT 1 FROM dbos.workflow_status WHERE status = $1 AND name = $2 AND updated_at < $3 LIMIT 1', [
            'PENDING',
            'chargeOrder',
            Date.now() - functionTimeoutMs,
          ]);
          if (stale.rowCount === 0) return { restarted: false };
          lastRestartAt = Date.now();
          restarting = restart().finally(() => (restarting = null));
          await restarting;
          return { restarted: true };
        } finally {
          checking = false;
        }
      },
      async beliefs() {
        await launched();
        const rows = await DBOS.listWorkflows({ workflowName: 'chargeOrder', loadInput: false, loadOutput: true });
        const out = new Map<string, Belief>();
        for (const w of rows) {
          const orderId = w.workflowID.slice('charge-'.length);
          const finishedAtMs = w.completedAt ?? w.updatedAt ?? w.createdAt;
          if (w.status === 'SUCCESS') {
            const s = (w.output as ChargeOutcome).status;
            const state = s === 'succeeded' ? 'succeeded' : s === 'failed' || s === 'requires_payment_method' || s === 'canceled' ? 'failed' : 'open';
            out.set(orderId, { state, finishedAtMs: state === 'open' ? null : finishedAtMs });
          } else if (w.status === 'ERROR' || w.status === 'MAX_RECOVERY_ATTEMPTS_EXCEEDED' || w.status === 'CANCELLED') {
            out.set(orderId, { state: 'failed', finishedAtMs });
          } else {
            out.set(orderId, { state: 'open', finishedAtMs: null });
          }
        }
        return out;
      },
      async describeOpen() {
        await launched();
        const pending = await DBOS.listWorkflows({ workflowName: 'chargeOrder', status: ['PENDING', 'ENQUEUED'], loadInput: false, loadOutput: false });
        return `${pending.length} workflow(s) pending`;
      },
      async stop() {
        await launched();
        await DBOS.shutdown();
        await systemPool.end();
        stripeOfRun = null;
        // The system database goes with the run's database.
        const admin = new pg.Client({ connectionString: withDatabase(ctx.databaseUrl, 'postgres') });
        await admin.connect();
        try {
          await admin.query(`DROP DATABASE IF EXISTS ${pg.escapeIdentifier(systemDb)} WITH (FORCE)`);
        } finally {
          await admin.end();
        }
      },
    };
  },
};
