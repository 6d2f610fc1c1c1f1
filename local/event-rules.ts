// EventBridge rules with SQS targets, for the local runtime: what the fake EventBridge accepted is
// matched against each rule's pattern and sent to the rule's queue (fauxqs) as EventBridge sends it
// — the whole event as the message body, `detail` inside. The fake bus has no rules of its own
// (local/fake-eventbridge/server.ts); this is the missing half, kept outside it.
//
// EventBridge delivers to a target at least once; `duplicateRate` sends some events twice and
// `holdRate` holds some back until after the next one (a reordering), seeded, so that consumers are
// exercised on what the real service may do.
import { CreateQueueCommand, GetQueueAttributesCommand, SendMessageCommand, type SQSClient } from '@aws-sdk/client-sqs';
import type { FakeEventBridge, RecordedEvent } from './fake-eventbridge/server.ts';
import { mulberry32 } from './random.ts';

/** The subset of EventBridge's pattern language the consumers use: exact-match lists. */
export interface LocalEventPattern {
  readonly source?: readonly string[];
  readonly detailType?: readonly string[];
}

export interface LocalRule {
  readonly name: string;
  readonly pattern: LocalEventPattern;
  readonly queueUrl: string;
}

export interface EventRulesOptions {
  readonly bus: FakeEventBridge;
  readonly sqs: SQSClient;
  readonly region: string;
  readonly rules: readonly LocalRule[];
  readonly duplicateRate?: number;
  readonly holdRate?: number;
  readonly seed?: number;
}

export interface RuleCounters {
  readonly matched: number;
  readonly sent: number;
  readonly duplicated: number;
  readonly held: number;
}

export function matches(pattern: LocalEventPattern, event: Pick<RecordedEvent, 'source' | 'detailType'>): boolean {
  return (!pattern.source || pattern.source.includes(event.source)) && (!pattern.detailType || pattern.detailType.includes(event.detailType));
}

/** The body EventBridge puts on an SQS target: the event itself. */
export function eventBridgeMessageBody(event: RecordedEvent, region: string): string {
  return JSON.stringify({
    version: '0',
    id: event.eventId,
    'detail-type': event.detailType,
    source: event.source,
    account: '000000000000',
    time: (event.time ?? event.receivedAt).toISOString().replace(/\.\d{3}Z$/, 'Z'),
    region,
    resources: event.resources,
    detail: event.detail,
  });
}

export async function createStandardQueue(sqs: SQSClient, name: string, visibilityTimeoutSeconds = 30): Promise<{ url: string; arn: string }> {
  const out = await sqs.send(new CreateQueueCommand({ QueueName: name, Attributes: { VisibilityTimeout: String(visibilityTimeoutSeconds) } }));
  const url = out.QueueUrl!;
  const attrs = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: url, AttributeNames: ['QueueArn'] }));
  return { url, arn: attrs.Attributes!.QueueArn! };
}

export class LocalEventRules {
  readonly #o: EventRulesOptions;
  readonly #random: () => number;
  readonly #counters = new Map<string, { matched: number; sent: number; duplicated: number; held: number }>();
  readonly #held = new Map<string, string[]>();
  #cursor = 0;
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<void> = Promise.resolve();

  constructor(options: EventRulesOptions) {
    this.#o = options;
    this.#random = mulberry32(options.seed ?? 7);
    for (const rule of options.rules) {
      this.#counters.set(rule.name, { matched: 0, sent: 0, duplicated: 0, held: 0 });
      this.#held.set(rule.name, []);
    }
  }

  counters(): Record<string, RuleCounters> {
    return Object.fromEntries([...this.#counters].map(([k, v]) => [k, { ...v }]));
  }

  start(everyMs = 200): void {
    this.#timer = setInterval(() => void this.flush().catch(() => {}), everyMs);
    this.#timer.unref();
  }

  /** Forward everything accepted so far (and what was held back). Serialised: one flush at a time. */
  flush(): Promise<void> {
    // A failed flush (SQS unreachable) must not stop the next one: its events are re-read from the cursor.
    this.#running = this.#running.catch(() => {}).then(() => this.#forward());
    return this.#running;
  }

  async stop(): Promise<void> {
    clearInterval(this.#timer);
    await this.flush();
    // Nothing stays held back: every event reaches its queue.
    for (const rule of this.#o.rules) {
      for (const body of this.#held.get(rule.name)!.splice(0)) await this.#send(rule, body);
    }
  }

  async #send(rule: LocalRule, body: string): Promise<void> {
    await this.#o.sqs.send(new SendMessageCommand({ QueueUrl: rule.queueUrl, MessageBody: body }));
    this.#counters.get(rule.name)!.sent += 1;
  }

  async #forward(): Promise<void> {
    const fresh = this.#o.bus.events().slice(this.#cursor);
    for (const event of fresh) {
      for (const rule of this.#o.rules) {
        if (!matches(rule.pattern, event)) continue;
        const c = this.#counters.get(rule.name)!;
        c.matched += 1;
        const body = eventBridgeMessageBody(event, this.#o.region);
        const held = this.#held.get(rule.name)!;
        if (this.#o.holdRate && this.#random() < this.#o.holdRate) {
          held.push(body);
          c.held += 1;
          continue;
        }
        await this.#send(rule, body);
        if (this.#o.duplicateRate && this.#random() < this.#o.duplicateRate) {
          await this.#send(rule, body);
          c.duplicated += 1;
        }
        // Whatever was held goes out after a later event: delivered out of order.
        for (const late of held.splice(0)) await this.#send(rule, late);
      }
      // Past this event only once every rule has it (a send that threw leaves it for the next flush;
      // a rule that already got it then gets it twice — EventBridge's at-least-once, too).
      this.#cursor += 1;
    }
  }
}
