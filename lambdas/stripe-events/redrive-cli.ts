// `npm run redrive:partner-events -- …`: replay the partner events kept on the failure queue into
// the stripe-events function (redrive.ts), once the cause (a database outage, a bad deploy) is fixed.
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { GetQueueAttributesCommand, SQSClient } from '@aws-sdk/client-sqs';
import { redrivePartnerEvents } from './redrive.ts';

export const EXIT = { ok: 0, someKept: 1, usage: 2 } as const;

export const USAGE = `Usage: npm run redrive:partner-events -- --queue-url <url> --function <name> [--yes]

Replays Stripe partner events the stripe-events function could not take (stripeEvents
'eventbridge': on-failure destination records and events EventBridge could not deliver) from
the partner-event failure queue into the function, synchronously, and deletes each one the
function recorded. Events the inbox already holds are acknowledged as duplicates.

  --queue-url <url>    the stack output PartnerEventFailureQueueUrl (or $PARTNER_EVENT_FAILURE_QUEUE_URL)
  --function <name>    the stack output StripeEventsFunctionName (or $STRIPE_EVENTS_FUNCTION)
  --max <n>            at most n messages in this run (default 100)
  --region <region>    default $AWS_REGION
  --sqs-endpoint <url>, --lambda-endpoint <url>
                       local SQS and Lambda APIs (tests); fake credentials without AWS ones
  --yes                replay; without it, only the target and the queue's depth are printed

Needs sqs:ReceiveMessage, sqs:DeleteMessage on the queue and lambda:InvokeFunction on the
function (the operator role has them). Prints "replayed <messageId> <evt_…>" or
"kept <messageId>: <why>" per message. Exit status: 0 all replayed, 1 some kept, 2 bad arguments.`;

export interface CliIo {
  readonly out: (line: string) => void;
  readonly err: (line: string) => void;
}

const OPTIONS = {
  'queue-url': { type: 'string' },
  function: { type: 'string' },
  max: { type: 'string' },
  region: { type: 'string' },
  'sqs-endpoint': { type: 'string' },
  'lambda-endpoint': { type: 'string' },
  yes: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
} as const;

export async function runRedriveCli(argv: readonly string[], io: CliIo, env: NodeJS.ProcessEnv = process.env): Promise<number> {
  let values: ReturnType<typeof parseArgs<{ args: string[]; options: typeof OPTIONS }>>['values'];
  try {
    values = parseArgs({ args: [...argv], options: OPTIONS, strict: true }).values;
  } catch (error) {
    io.err(`error: ${(error as Error).message}`);
    return EXIT.usage;
  }
  if (values.help) {
    io.out(USAGE);
    return EXIT.ok;
  }
  const queueUrl = values['queue-url'] ?? env.PARTNER_EVENT_FAILURE_QUEUE_URL;
  const functionName = values.function ?? env.STRIPE_EVENTS_FUNCTION;
  const max = values.max === undefined ? 100 : Number(values.max);
  const problems = [
    ...(queueUrl ? [] : ['--queue-url is required (stack output PartnerEventFailureQueueUrl)']),
    ...(functionName ? [] : ['--function is required (stack output StripeEventsFunctionName)']),
    ...(Number.isInteger(max) && max >= 1 ? [] : [`--max must be a positive integer, got '${values.max}'`]),
  ];
  if (problems.length > 0) {
    for (const p of problems) io.err(`error: ${p}`);
    return EXIT.usage;
  }
  const sqsEndpoint = values['sqs-endpoint'];
  const lambdaEndpoint = values['lambda-endpoint'];
  const local = sqsEndpoint !== undefined || lambdaEndpoint !== undefined;
  const region = values.region ?? env.AWS_REGION ?? (local ? 'us-east-1' : undefined);
  const common = {
    ...(region ? { region } : {}),
    ...(local && !env.AWS_ACCESS_KEY_ID && !env.AWS_PROFILE ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } } : {}),
  };
  const sqs = new SQSClient({ ...common, ...(sqsEndpoint ? { endpoint: sqsEndpoint } : {}) });
  // One attempt per replay: a lost answer leaves the message on the queue, and a second run is harmless.
  const lambda = new LambdaClient({ ...common, ...(lambdaEndpoint ? { endpoint: lambdaEndpoint } : {}), maxAttempts: 1 });
  try {
    io.err(`target: queue ${queueUrl} -> function ${functionName}${region ? ` in ${region}` : ''}`);
    if (!values.yes) {
      const attributes = await sqs.send(new GetQueueAttributesCommand({ QueueUrl: queueUrl, AttributeNames: ['ApproximateNumberOfMessages'] }));
      io.out(`${attributes.Attributes?.ApproximateNumberOfMessages ?? '?'} message(s) waiting; run again with --yes to replay them`);
      return EXIT.ok;
    }
    const result = await redrivePartnerEvents({ sqs, lambda, queueUrl: queueUrl!, functionName: functionName!, max });
    for (const r of result.replayed) io.out(`replayed ${r.messageId} ${r.stripeEventId ?? '(no event id)'}`);
    for (const k of result.kept) io.out(`kept ${k.messageId}: ${k.reason}`);
    io.err(`${result.replayed.length} replayed, ${result.kept.length} kept`);
    return result.kept.length > 0 ? EXIT.someKept : EXIT.ok;
  } catch (error) {
    io.err(`error: ${(error as Error).message.split('\n')[0]}`);
    return EXIT.someKept;
  } finally {
    sqs.destroy();
    lambda.destroy();
  }
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const code = await runRedriveCli(process.argv.slice(2), { out: (l) => console.log(l), err: (l) => console.error(l) });
  process.exitCode = code;
}
