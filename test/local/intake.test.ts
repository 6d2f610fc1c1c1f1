// The pipeline's intake reading (bench:peers waits on it every 100 ms): the main queue's messages and
// the event source's invocations, the same numbers a full snapshot gives, without its database counts.
import { describe, expect, it } from 'vitest';
import { sendChargeRequest } from '../../lambdas/producer/client.ts';
import { chargeOrder } from '../support/orders.ts';
import { startTestPipeline } from './support.ts';

describe('pipeline.intake()', () => {
  it('counts what waits in the main queue and what the event source runs, as the snapshot does', async () => {
    const pipeline = await startTestPipeline();
    try {
      // No poller takes them: what is sent stays in the queue.
      await pipeline.stopIntake();
      for (let i = 0; i < 3; i++) await sendChargeRequest(pipeline.sqs.client, pipeline.sqs.queueUrl, chargeOrder());
      const intake = pipeline.intake();
      const snapshot = await pipeline.snapshot();
      expect(intake.queue).toEqual({ waiting: 3, inFlight: 0 });
      expect(intake.queue).toEqual({ waiting: snapshot.queue.waiting, inFlight: snapshot.queue.inFlight });
      expect(intake.eventSource).toEqual(snapshot.eventSource);
      expect(snapshot.database.operations).toBe(0);
    } finally {
      await pipeline.stop();
    }
  });
});
