// Partner events the stripe-events function could not take, replayed into it. With
// `stripeEvents: 'eventbridge'` the rule invokes the function asynchronously; an event that still
// fails after Lambda's retries (the database down for longer than they last) lands on ONE queue, the
// partner-event failure queue, by either of two ways:
//
//   - Lambda's on-failure destination: the body is an invocation record
//     { version, timestamp, requestContext: { requestId, functionArn, condition, approximateInvokeCount },
//       requestPayload: <the EventBridge event>, responseContext, responsePayload }
//     (AWS Lambda Developer Guide, "Capturing records of Lambda asynchronous invocations");
//   - the rule target's dead-letter queue, for an event EventBridge could not hand to Lambda at all:
//     the body is the EventBridge event itself (Amazon EventBridge User Guide, "Using dead-letter
//     queues to process undelivered events").
//
// A replay invokes the function synchronously with the EventBridge event, as the rule would, and
// deletes the message only when the function answered `recorded`. Replaying an event the inbox has
// already recorded is harmless: the inbox keeps one row per Stripe event id (a duplicate is
// acknowledged, not applied twice). Anything else stays on the queue, listed with why.
import { InvokeCommand, type LambdaClient } from '@aws-sdk/client-lambda';
import { ChangeMessageVisibilityCommand, DeleteMessageCommand, ReceiveMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';

export interface RedriveTarget {
  readonly sqs: SQSClient;
  readonly lambda: LambdaClient;
  /** The partner-event failure queue (stack output …PartnerEventFailureQueueUrl…). */
  readonly queueUrl: string;
  /** The stripe-events function (stack output …StripeEventsFunctionName…). */
  readonly functionName: string;
  /** At most this many messages in one run. @default 100 */
  readonly max?: number;
  /**
   * How long a received message stays hidden while the run lasts (so one run never takes the same
   * message twice); what did not replay is made visible again when the run ends. @default 300
   */
  readonly hideSeconds?: number;
}

export interface RedriveResult {
  /** Recorded by the function and deleted from the queue. */
  readonly replayed: readonly { readonly messageId: string; readonly stripeEventId: string | null }[];
  /** Still on the queue: the function failed or did not record it, or the message is no partner event. */
  readonly kept: readonly { readonly messageId: string; readonly reason: string }[];
}

/** The EventBridge event a failure-queue message carries, or why there is none. */
export function partnerEventOf(body: string): { readonly ok: true; readonly event: Record<string, unknown> } | { readonly ok: false; readonly reason: string } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    return { ok: false, reason: 'the body is not JSON' };
  }
  if (typeof parsed !== 'object' || parsed === null) return { ok: false, reason: 'the body is not a JSON object' };
  const record = parsed as Record<string, unknown>;
  // An on-failure destination record carries the event as requestPayload.
  const candidate = 'requestPayload' in record && 'requestContext' in record ? record.requestPayload : record;
  if (typeof candidate !== 'object' || candidate === null) return { ok: false, reason: 'the invocation record has no event as requestPayload' };
  const event = candidate as Record<string, unknown>;
  if (typeof event.source !== 'string' || typeof event['detail-type'] !== 'string' || typeof event.detail !== 'object' || event.detail === null) {
    return { ok: false, reason: 'not an EventBridge event (source, detail-type and detail expected)' };
  }
  return { ok: true, event };
}

function stripeEventIdOf(event: Record<string, unknown>): string | null {
  const id = (event.detail as { id?: unknown }).id;
  return typeof id === 'string' ? id : null;
}

/** Replays up to `max` messages of the failure queue into the function; see the file comment. */
export async function redrivePartnerEvents(target: RedriveTarget): Promise<RedriveResult> {
  const max = target.max ?? 100;
  const hideSeconds = target.hideSeconds ?? 300;
  const seen = new Set<string>();
  const release: string[] = [];
  const replayed: { messageId: string; stripeEventId: string | null }[] = [];
  const kept: { messageId: string; reason: string }[] = [];
  run: while (replayed.length + kept.length < max) {
    const out = await target.sqs.send(
      new ReceiveMessageCommand({
        QueueUrl: target.queueUrl,
        MaxNumberOfMessages: Math.min(10, max - replayed.length - kept.length),
        WaitTimeSeconds: 0,
        VisibilityTimeout: hideSeconds,
      }),
    );
    const messages = out.Messages ?? [];
    if (messages.length === 0) break;
    for (const message of messages) {
      const messageId = message.MessageId ?? '(no id)';
      if (seen.has(messageId)) break run; // the run outlasted hideSeconds: everything was tried once
      seen.add(messageId);
      const keep = (reason: string) => {
        kept.push({ messageId, reason });
        if (message.ReceiptHandle) release.push(message.ReceiptHandle);
      };
      const read = partnerEventOf(message.Body ?? '');
      if (!read.ok) {
        keep(read.reason);
        continue;
      }
      const answer = await target.lambda.send(
        new InvokeCommand({ FunctionName: target.functionName, InvocationType: 'RequestResponse', Payload: new TextEncoder().encode(JSON.stringify(read.event)) }),
      );
      const text = answer.Payload ? new TextDecoder().decode(answer.Payload) : '';
      if (answer.FunctionError) {
        keep(`the function failed (${answer.FunctionError}): ${text.slice(0, 300)}`);
        continue;
      }
      let result: unknown;
      try {
        result = (JSON.parse(text) as { result?: unknown }).result;
      } catch {
        result = undefined;
      }
      if (result !== 'recorded') {
        keep(`the function answered ${text.slice(0, 200) || '(nothing)'}, not {"result":"recorded"}`);
        continue;
      }
      await target.sqs.send(new DeleteMessageCommand({ QueueUrl: target.queueUrl, ReceiptHandle: message.ReceiptHandle }));
      replayed.push({ messageId, stripeEventId: stripeEventIdOf(read.event) });
    }
  }
  // What did not replay is on the queue again at once: its depth (and the alarm) tell the truth, and
  // the next run can take it.
  for (const handle of release) {
    await target.sqs.send(new ChangeMessageVisibilityCommand({ QueueUrl: target.queueUrl, ReceiptHandle: handle, VisibilityTimeout: 0 }));
  }
  return { replayed, kept };
}
