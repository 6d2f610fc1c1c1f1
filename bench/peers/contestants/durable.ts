// Contestant: AWS Lambda durable functions (@aws/durable-execution-sdk-js 2.4), run locally by its
// testing SDK's LocalDurableTestRunner (@aws/durable-execution-sdk-js-testing 1.1.4), written as
// their documentation shows:
//   - a durable handler (withDurableExecution) whose one `context.step` creates the PaymentIntent,
//     with Stripe's Idempotency-Key derived from the durable execution's ARN
//     (context.executionContext.durableExecutionArn): "Steps have at-least-once execution semantics
//     by default … your business logic must be idempotent to handle potential retries before
//     completion" (https://docs.aws.amazon.com/lambda/latest/dg/durable-execution-idempotency.html);
//   - the step's defaults kept: AtLeastOncePerRetry ("safe for idempotent operations", StepSemantics
//     in node_modules/@aws/durable-execution-sdk-js/dist-types/types/step.d.ts) and the default retry
//     strategy (retryPresets.default: 6 attempts, 5 s … 60 s, full jitter; dist/index.mjs). The docs'
//     AtMostOncePerRetry + no retry is for a step that is NOT idempotent; with the key this one is;
//   - the handler deterministic outside the step: no clock, no randomness, no I/O (replay returns
//     checkpointed step results and re-runs the code between them).
//
// What the bench gives it instead of SQS FIFO: an event source mapping cannot start a durable
// execution idempotently ("Lambda event source mappings (ESM) don't support idempotency at launch.
// Therefore, each invocation (including retries) starts a new durable execution … use a regular
// Lambda function as proxy (dispatcher) to invoke a durable function with an idempotency key
// (execution name parameter)", same page). So the SQS handler here is that dispatcher: it starts one
// execution per order, named after the order id, asynchronously, and the message is done once the
// execution exists. The local runner has no execution names: the dispatcher keeps the name → execution
// table the Lambda service keeps ("running, same payload: returns the existing execution"; "closed:
// returns the existing result"), in memory, and that table and the runner's checkpoints are the
// store the judge reads.
//
// What the local runner cannot show: checkpoints surviving a crash, and the service re-invoking an
// execution whose invocation timed out. When the bench freezes a worker after Stripe executed
// (stall_after_commit), the step here simply never returns, the execution stays RUNNING and the order
// is judged "left open"; on AWS the invocation would time out and the replay would re-run the step
// with the same key (Stripe replays the answer within its 24 h). Retry delays are real time (no
// skipTime), so a retried step takes seconds, as it would on AWS.
import { withDurableExecution, type DurableContext } from '@aws/durable-execution-sdk-js';
import { LocalDurableTestRunner } from '@aws/durable-execution-sdk-js-testing';
import type { ChargeRequest } from '../../../lambdas/payments/message.ts';
import { paymentIntentParams, fifoBatch, type Contestant } from '../contestant.ts';
import type { Belief } from '../truth.ts';

interface ChargeOutcome {
  readonly status: string;
  readonly paymentIntentId: string | null;
}

interface Execution {
  readonly name: string;
  state: 'RUNNING' | 'SUCCEEDED' | 'FAILED';
  outcome: ChargeOutcome | null;
  closedAtMs: number | null;
  readonly done: Promise<void>;
}

export const durable: Contestant = {
  id: 'durable',
  title: 'Lambda durable functions, execution name per order (local runner)',
  store: 'memory', // the local runner's checkpoints and the execution-name table
  async start(ctx) {
    const stripe = ctx.stripe();
    const handler = withDurableExecution(async (order: ChargeRequest, context: DurableContext): Promise<ChargeOutcome> => {
      const key = `${context.executionContext.durableExecutionArn}:payment-intent`;
      return context.step('create-payment-intent', async () => {
        try {
          const pi = await stripe.paymentIntents.create(
            paymentIntentParams(order),
            { idempotencyKey: key },
          );
          return { status: pi.status, paymentIntentId: pi.id };
        } catch (error) {
          // A decline is an answer; anything else is retried by the step's retry strategy.
          if ((error as { type?: string }).type === 'StripeCardError') return { status: 'failed', paymentIntentId: null };
          throw error;
        }
      });
    });
    await LocalDurableTestRunner.setupTestEnvironment({ skipTime: false });
    const executions = new Map<string, Execution>();

    const startExecution = (order: ChargeRequest): Execution => {
      const runner = new LocalDurableTestRunner<ChargeOutcome>({ handlerFunction: handler });
      const execution: Execution = {
        name: order.orderId,
        state: 'RUNNING',
        outcome: null,
        closedAtMs: null,
        done: runner.run({ payload: order }).then(
          (result) => {
            // getResult() throws for an execution that did not succeed.
            execution.state = result.getStatus() === 'SUCCEEDED' ? 'SUCCEEDED' : 'FAILED';
            execution.outcome = execution.state === 'SUCCEEDED' ? (result.getResult() ?? null) : null;
            execution.closedAtMs = Date.now();
          },
          () => {
            execution.state = 'FAILED';
            execution.closedAtMs = Date.now();
          },
        ),
      };
      return execution;
    };

    return {
      // The dispatcher: one execution per execution name (the order id); a redelivered message finds it.
      charge: async (event) =>
        fifoBatch(event.Records, async (body) => {
          const order = JSON.parse(body) as ChargeRequest;
          if (!executions.has(order.orderId)) executions.set(order.orderId, startExecution(order));
        }),
      reconcile: null,
      // Every execution closed (those the crash froze never do: the bench's wait is bounded).
      async settle() {
        for (;;) {
          const running = [...executions.values()].filter((e) => e.state === 'RUNNING');
          if (running.length === 0) return;
          await Promise.all(running.map((e) => e.done));
        }
      },
      async beliefs() {
        const out = new Map<string, Belief>();
        for (const [orderId, e] of executions) {
          if (e.state === 'RUNNING') out.set(orderId, { state: 'open', finishedAtMs: null });
          else if (e.state === 'FAILED') out.set(orderId, { state: 'failed', finishedAtMs: e.closedAtMs });
          else {
            const s = e.outcome?.status;
            const state = s === 'succeeded' ? 'succeeded' : s === 'failed' || s === 'requires_payment_method' || s === 'canceled' ? 'failed' : 'open';
            out.set(orderId, { state, finishedAtMs: state === 'open' ? null : e.closedAtMs });
          }
        }
        return out;
      },
      async describeOpen() {
        return `${[...executions.values()].filter((e) => e.state === 'RUNNING').length} execution(s) running`;
      },
      async stop() {
        // Executions frozen by the crash end when the fake closes (before stop); wait briefly for them.
        await Promise.race([Promise.all([...executions.values()].map((e) => e.done)), new Promise((resolve) => setTimeout(resolve, 2_000).unref())]);
        await LocalDurableTestRunner.teardownTestEnvironment();
      },
    };
  },
};
