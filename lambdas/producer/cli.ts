// `npm run produce -- …`: put charge requests on the queue from a shell, through the same producer
// client services use. Validation is the consumer's, so what this refuses the charge handler would
// have rejected too.
import { readFile } from 'node:fs/promises';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { GetQueueUrlCommand, SQSClient, type SQSClientConfig } from '@aws-sdk/client-sqs';
import { PIPELINE } from '../runtime/settings.ts';
import { authorizationRequestSchema, refundRequestSchema, type AuthorizationRequest, type RefundRequest } from '../payments/message.ts';
import {
  checkChargeRequests,
  sendAuthorizationRequest,
  sendChargeRequest,
  sendChargeRequests,
  sendRefundRequest,
  type ChargeRequest,
  type ChargeRequestResult,
} from './client.ts';
import { ChargeRequestSendError, InvalidChargeRequestError } from './errors.ts';

export const EXIT = { ok: 0, sendFailed: 1, usage: 2 } as const;

export const USAGE = `Usage: npm run produce -- [options]

Send charge requests to the charge queue (SQS FIFO): MessageGroupId = orderId,
MessageDeduplicationId = sha256("charge:" + orderId + ":" + digest of the parameters),
body = the request as JSON. An identical repeat within 5 minutes is dropped by SQS; one
with other parameters reaches the handler and is recorded as a conflict.

One request:
  --order <id>              order id (1-128 printable ASCII, no spaces)
  --amount <n>              integer amount in minor units (1299 = 12.99)
  --currency <xxx>          three lowercase letters (eur, usd, ...)
  --customer <cus_...>      Stripe customer id
  --payment-method <pm_...> Stripe PaymentMethod id
  --account <acct_...>      optional: a direct charge on that connected account (Stripe Connect)
  --transfer-destination <acct_...>
                            optional: a destination charge on the platform, transferred there
  --application-fee <n>     optional, with --account or --transfer-destination: the platform's
                            fee in minor units, at most the amount
  --capture-method manual   optional: authorize only; a --capture or --cancel-authorization
                            request settles it later (Stripe releases it after 7 days)

One capture or release of an authorization (same queue and group as its charge):
  --capture --order <id> [--amount <n>]
                            capture the authorization, all of it or <n> (the rest is released)
  --cancel-authorization --order <id>
                            release the authorization whole

One refund (same queue, MessageGroupId = orderId, MessageDeduplicationId =
sha256("refund:" + orderId + ":" + refundId + ":" + digest of amount and reason),
body {"type":"refund",...}):
  --refund <refundId>       your id of this refund (one refund per order and refund id)
  --order <id> --amount <n> the order refunded and the amount in minor units
  --reason <reason>         optional: duplicate | fraudulent | requested_by_customer

Many requests:
  --file <orders.jsonl>     one JSON request per line, sent in file order:
                            {"orderId","amount","currency","customerId","paymentMethod"}
                            or {"type":"refund","orderId","refundId","amount"}
                            or {"type":"capture","orderId","amount"?} / {"type":"cancel_authorization","orderId"}
                            blank lines are skipped; if any line is invalid, bad lines are
                            listed with their numbers and NOTHING is sent

Where to send:
  --queue-url <url>         default $QUEUE_URL: the stack output QueueUrl of your pipeline
                            (aws cloudformation describe-stacks --stack-name <stack>
                            --query "Stacks[0].Outputs[?OutputKey=='QueueUrl'].OutputValue")
  --environment <name>      without a queue URL: look up (GetQueueUrl) the queue the default
                            app creates for this environment, <name>-${PIPELINE.queueName}
                            (default $CHARGE_PIPELINE_ENVIRONMENT, else dev; with --endpoint and
                            no --environment: the local runtime's ${PIPELINE.queueName}). A
                            pipeline embedded in another app has a generated queue name: pass
                            its QueueUrl output instead
  --endpoint <url>          a local SQS API such as fauxqs (default $SQS_ENDPOINT); without
                            AWS credentials in the environment, fake local ones are used
  --region <region>         default $AWS_REGION, else the region in the queue URL,
                            else us-east-1 with --endpoint

Other:
  --max-amount <n>          highest accepted amount (use the consumer's setting)
  -h, --help                this text

Prints one line per request: "sent <orderId> <messageId>" or
"failed <orderId> <code>: <message>".
Exit status: 0 all sent, 1 some request failed to send, 2 bad arguments or invalid
input (nothing sent).`;

export interface CliIo {
  readonly out: (line: string) => void;
  readonly err: (line: string) => void;
}

class UsageError extends Error {
  override name = 'UsageError';
}

const OPTIONS = {
  order: { type: 'string' },
  amount: { type: 'string' },
  currency: { type: 'string' },
  customer: { type: 'string' },
  'payment-method': { type: 'string' },
  account: { type: 'string' },
  'transfer-destination': { type: 'string' },
  'application-fee': { type: 'string' },
  refund: { type: 'string' },
  reason: { type: 'string' },
  'capture-method': { type: 'string' },
  capture: { type: 'boolean' },
  'cancel-authorization': { type: 'boolean' },
  file: { type: 'string' },
  'queue-url': { type: 'string' },
  environment: { type: 'string' },
  endpoint: { type: 'string' },
  region: { type: 'string' },
  'max-amount': { type: 'string' },
  help: { type: 'boolean', short: 'h' },
} as const;

const SINGLE_FLAGS = ['order', 'amount', 'currency', 'customer', 'payment-method'] as const;
/** Optional flags of one charge request (Connect). */
const CONNECT_FLAGS = ['account', 'transfer-destination', 'application-fee', 'capture-method'] as const;

/** Runs the CLI and returns its exit status. Exported for tests; the script entry is at the bottom. */
export async function main(
  argv: readonly string[],
  env: NodeJS.ProcessEnv = process.env,
  io: CliIo = { out: (l) => process.stdout.write(`${l}\n`), err: (l) => process.stderr.write(`${l}\n`) },
): Promise<number> {
  let values;
  try {
    ({ values } = parseArgs({ args: [...argv], options: OPTIONS, strict: true, allowPositionals: false }));
  } catch (error) {
    // node:util's messages are already precise ("Unknown option '--ammount'").
    io.err(`error: ${error instanceof Error ? error.message : String(error)}`);
    io.err('Run with --help for usage.');
    return EXIT.usage;
  }
  if (values.help) {
    io.out(USAGE);
    return EXIT.ok;
  }

  let sqs: SQSClient | undefined;
  try {
    const maxAmount = values['max-amount'] === undefined ? undefined : integerFlag('--max-amount', values['max-amount']);
    const validation = maxAmount === undefined ? {} : { maxAmount };
    const single = SINGLE_FLAGS.filter((flag) => values[flag] !== undefined);
    const connect = CONNECT_FLAGS.filter((flag) => values[flag] !== undefined);
    if (connect.length > 0 && (values.refund !== undefined || values.file !== undefined)) {
      throw new UsageError(`${connect.map((f) => `--${f}`).join(', ')} go with one charge request (a refund runs on its charge's account; a file's lines carry their own fields)`);
    }
    let authorization: AuthorizationRequest | undefined;
    if (values.capture || values['cancel-authorization']) {
      const flag = values.capture ? '--capture' : '--cancel-authorization';
      if (values.capture && values['cancel-authorization']) throw new UsageError('--capture and --cancel-authorization exclude each other');
      const extra = [...(values.file !== undefined ? ['file'] : []), ...(values.refund !== undefined ? ['refund'] : []), ...single.filter((f) => f !== 'order' && (f !== 'amount' || !values.capture))];
      if (extra.length > 0) throw new UsageError(`${flag} cannot be combined with ${extra.map((f) => `--${f}`).join(', ')}`);
      if (values.order === undefined) throw new UsageError(`${flag} needs --order`);
      const parsed = authorizationRequestSchema(maxAmount).safeParse(
        values.capture
          ? { type: 'capture', orderId: values.order, ...(values.amount !== undefined ? { amount: integerFlag('--amount', values.amount) } : {}) }
          : { type: 'cancel_authorization', orderId: values.order },
      );
      if (!parsed.success) {
        for (const issue of parsed.error.issues) io.err(`error: ${issue.path.length > 0 ? `--${flagFor(String(issue.path[0]))}: ` : ''}${issue.message}`);
        io.err('nothing sent');
        return EXIT.usage;
      }
      authorization = parsed.data;
    }
    let refund: RefundRequest | undefined;
    if (values.reason !== undefined && values.refund === undefined) throw new UsageError('--reason goes with --refund');
    if (values.refund !== undefined) {
      const extra = [...(values.file !== undefined ? ['file'] : []), ...single.filter((f) => f !== 'order' && f !== 'amount')];
      if (extra.length > 0) throw new UsageError(`--refund cannot be combined with ${extra.map((f) => `--${f}`).join(', ')}`);
      if (values.order === undefined || values.amount === undefined) throw new UsageError('--refund needs --order and --amount');
      const parsed = refundRequestSchema(maxAmount).safeParse({
        type: 'refund',
        orderId: values.order,
        refundId: values.refund,
        amount: integerFlag('--amount', values.amount),
        ...(values.reason !== undefined ? { reason: values.reason } : {}),
      });
      if (!parsed.success) {
        for (const issue of parsed.error.issues) io.err(`error: --${issue.path[0] === 'refundId' ? 'refund' : issue.path[0] === 'orderId' ? 'order' : String(issue.path[0] ?? 'refund')}: ${issue.message}`);
        io.err('nothing sent');
        return EXIT.usage;
      }
      refund = parsed.data;
    }
    if (values.file !== undefined && single.length > 0) {
      throw new UsageError(`--file cannot be combined with ${single.map((f) => `--${f}`).join(', ')}`);
    }
    if (values.file === undefined && single.length === 0) {
      throw new UsageError('nothing to send: give --order … (one request) or --file orders.jsonl');
    }

    // Validate everything before touching the network: invalid input never costs a call.
    let requests: FileRequest[] = [];
    if (refund !== undefined || authorization !== undefined) {
      // validated above
    } else if (values.file !== undefined) {
      requests = await readJsonl(values.file, validation, io);
    } else {
      const missing = SINGLE_FLAGS.filter((flag) => values[flag] === undefined);
      if (missing.length > 0) throw new UsageError(`missing ${missing.map((f) => `--${f}`).join(', ')}`);
      const request = {
        orderId: values.order,
        amount: integerFlag('--amount', values.amount ?? ''),
        currency: values.currency,
        customerId: values.customer,
        paymentMethod: values['payment-method'],
        ...(values.account !== undefined ? { account: values.account } : {}),
        ...(values['transfer-destination'] !== undefined ? { transferDestination: values['transfer-destination'] } : {}),
        ...(values['application-fee'] !== undefined ? { applicationFeeAmount: integerFlag('--application-fee', values['application-fee']) } : {}),
        ...(values['capture-method'] !== undefined ? { capture: values['capture-method'] } : {}),
      };
      const checked = checkChargeRequests([request], validation);
      const valid = checked.requests[0];
      if (checked.issues.length > 0 || valid === undefined) {
        for (const issue of checked.issues) io.err(`error: --${flagFor(issue.path)}: ${issue.message}`);
        io.err('nothing sent');
        return EXIT.usage;
      }
      requests = [{ kind: 'charge', request: valid, label: 'arguments' }];
    }

    const endpoint = values.endpoint ?? nonEmpty(env.SQS_ENDPOINT);
    const explicitQueueUrl = values['queue-url'] ?? nonEmpty(env.QUEUE_URL);
    const region = values.region ?? nonEmpty(env.AWS_REGION) ?? regionOf(explicitQueueUrl) ?? (endpoint ? 'us-east-1' : undefined);
    const config: SQSClientConfig = {
      ...(region ? { region } : {}),
      ...(endpoint ? { endpoint } : {}),
      // A local emulator checks no signature, but the SDK must sign with something.
      ...(endpoint && !env.AWS_ACCESS_KEY_ID && !env.AWS_PROFILE
        ? { credentials: { accessKeyId: 'local', secretAccessKey: 'local' } }
        : {}),
    };
    sqs = new SQSClient(config);
    const environment = values.environment ?? nonEmpty(env.CHARGE_PIPELINE_ENVIRONMENT);
    const queueUrl = explicitQueueUrl ?? (await lookUpQueueUrl(sqs, queueNameFor(environment, endpoint !== undefined), region));

    const client = sqs;
    if (refund !== undefined) return await sendOne(io, () => sendRefundRequest(client, queueUrl, refund, validation));
    if (authorization !== undefined) return await sendOne(io, () => sendAuthorizationRequest(client, queueUrl, authorization, validation));

    if (values.file === undefined) {
      const only = requests[0];
      if (only?.kind !== 'charge') return EXIT.usage;
      return await sendOne(io, () => sendChargeRequest(client, queueUrl, only.request, validation));
    }

    // In file order, so that a refund line goes after its order's charge line (FIFO orders a group by
    // send order): runs of charge lines in batches, each refund line on its own.
    let failed = 0;
    let total = 0;
    for (const run of runsOf(requests)) {
      if (run.kind !== 'charge') {
        for (const item of run.items) {
          total++;
          try {
            const sent = item.kind === 'refund' ? await sendRefundRequest(client, queueUrl, item.request, validation) : await sendAuthorizationRequest(client, queueUrl, item.request, validation);
            io.out(`sent ${sent.orderId} ${sent.messageId}`);
          } catch (error) {
            if (!(error instanceof ChargeRequestSendError)) throw error;
            io.out(`failed ${error.orderId} ${error.code}: ${firstLine(error.reason)}`);
            failed++;
          }
        }
        continue;
      }
      const results = await sendChargeRequests(client, queueUrl, run.items.map((r) => r.request), validation);
      results.forEach((result) => {
        total++;
        const repeat = result.repeatOf === undefined ? '' : ` (repeat of ${run.items[result.repeatOf]?.label ?? '?'})`;
        io.out(resultLine(result) + repeat);
        if (!result.ok) failed++;
      });
    }
    if (failed > 0) io.err(`${failed} of ${total} request(s) not sent`);
    return failed > 0 ? EXIT.sendFailed : EXIT.ok;
  } catch (error) {
    if (error instanceof UsageError) {
      io.err(`error: ${error.message}`);
      io.err('Run with --help for usage.');
      return EXIT.usage;
    }
    if (error instanceof InvalidChargeRequestError) {
      io.err(`error: ${error.message}`);
      return EXIT.usage;
    }
    // Anything else (no region, no credentials, queue not found) is a failure to send everything.
    io.err(`error: ${firstLine(error)}`);
    return EXIT.sendFailed;
  } finally {
    sqs?.destroy();
  }
}

/** One request from the command line: `sent <order> <message id>`, or `failed <order> <code>: <reason>`. */
async function sendOne(io: CliIo, send: () => Promise<{ readonly orderId: string; readonly messageId: string }>): Promise<number> {
  try {
    const sent = await send();
    io.out(`sent ${sent.orderId} ${sent.messageId}`);
    return EXIT.ok;
  } catch (error) {
    if (error instanceof ChargeRequestSendError) {
      io.out(`failed ${error.orderId} ${error.code}: ${firstLine(error.reason)}`);
      return EXIT.sendFailed;
    }
    throw error;
  }
}

function resultLine(result: ChargeRequestResult): string {
  return result.ok
    ? `sent ${result.orderId} ${result.messageId}`
    : `failed ${result.orderId} ${result.error.code}: ${firstLine(result.error.reason)}`;
}

type FileRequest =
  | { readonly kind: 'charge'; readonly request: ChargeRequest; readonly label: string }
  | { readonly kind: 'refund'; readonly request: RefundRequest; readonly label: string }
  | { readonly kind: 'authorization'; readonly request: AuthorizationRequest; readonly label: string };

/** Charge lines go in batches; refund, capture and cancel lines one by one, each after what precedes it. */
type Run = { readonly kind: 'charge'; readonly items: Extract<FileRequest, { kind: 'charge' }>[] } | { readonly kind: 'one_by_one'; readonly items: Exclude<FileRequest, { kind: 'charge' }>[] };

/** Consecutive requests of one kind, in order. */
function runsOf(requests: readonly FileRequest[]): Run[] {
  const runs: Run[] = [];
  for (const item of requests) {
    const last = runs.at(-1);
    if (item.kind === 'charge') {
      if (last?.kind === 'charge') last.items.push(item);
      else runs.push({ kind: 'charge', items: [item] });
    } else if (last?.kind === 'one_by_one') last.items.push(item);
    else runs.push({ kind: 'one_by_one', items: [item] });
  }
  return runs;
}

/**
 * Parse a JSONL file of charge and refund requests (a line with `"type":"refund"` is a refund, any
 * other a charge, as the handler routes them); every bad line is reported with its number and the
 * whole file is refused.
 */
async function readJsonl(file: string, validation: { maxAmount?: number }, io: CliIo): Promise<FileRequest[]> {
  let text: string;
  try {
    text = await readFile(file, 'utf8');
  } catch (error) {
    throw new UsageError(`cannot read ${file}: ${(error as NodeJS.ErrnoException).code ?? firstLine(error)}`);
  }
  const name = path.basename(file);
  const lines: { readonly line: number; readonly value: unknown }[] = [];
  const problems: string[] = [];
  text.split(/\r?\n/).forEach((raw, i) => {
    if (raw.trim() === '') return;
    try {
      lines.push({ line: i + 1, value: JSON.parse(raw) });
    } catch {
      problems.push(`${name}:${i + 1}: not valid JSON`);
    }
  });
  const typeOf = (value: unknown) => (typeof value === 'object' && value !== null ? (value as { type?: unknown }).type : undefined);
  const isRefund = (value: unknown) => typeOf(value) === 'refund';
  const isAuthorization = (value: unknown) => typeOf(value) === 'capture' || typeOf(value) === 'cancel_authorization';
  const chargeLines = lines.filter((l) => !isRefund(l.value) && !isAuthorization(l.value));
  const { requests: charges, issues } = checkChargeRequests(
    chargeLines.map((l) => l.value),
    validation,
  );
  for (const issue of issues) {
    const line = chargeLines[issue.index]?.line ?? 0;
    const message = issue.message.replace(/of request #(\d+)/, (_, n: string) => `of line ${chargeLines[Number(n)]?.line ?? '?'}`);
    problems.push(`${name}:${line}: ${issue.path}: ${message}`);
  }
  const refundSchema = refundRequestSchema(validation.maxAmount);
  const refunds = new Map<number, RefundRequest>();
  for (const { line, value } of lines.filter((l) => isRefund(l.value))) {
    const parsed = refundSchema.safeParse(value);
    if (parsed.success) refunds.set(line, parsed.data);
    else for (const issue of parsed.error.issues) problems.push(`${name}:${line}: ${issue.path.map(String).join('.') || '(request)'}: ${issue.message}`);
  }
  const authorizationSchema = authorizationRequestSchema(validation.maxAmount);
  const authorizations = new Map<number, AuthorizationRequest>();
  for (const { line, value } of lines.filter((l) => isAuthorization(l.value))) {
    const parsed = authorizationSchema.safeParse(value);
    if (parsed.success) authorizations.set(line, parsed.data);
    else problems.push(`${name}:${line}: ${typeOf(value) as string}: ${parsed.error.issues.map((i) => `${i.path.map(String).join('.') || '(request)'}: ${i.message}`).join('; ')}`);
  }
  if (problems.length > 0) {
    problems.sort((a, b) => lineOf(a) - lineOf(b));
    for (const problem of problems) io.err(problem);
    throw new UsageError(`nothing sent: ${new Set(problems.map(lineOf)).size} invalid line(s) in ${file}`);
  }
  const chargeAt = new Map(charges.map((request, i) => [chargeLines[i]?.line ?? -1, request]));
  const out: FileRequest[] = [];
  for (const { line } of lines) {
    const label = `line ${line}`;
    const refund = refunds.get(line);
    const charge = chargeAt.get(line);
    const authorization = authorizations.get(line);
    if (refund !== undefined) out.push({ kind: 'refund', request: refund, label });
    else if (authorization !== undefined) out.push({ kind: 'authorization', request: authorization, label });
    else if (charge !== undefined) out.push({ kind: 'charge', request: charge, label });
  }
  if (out.length === 0) throw new UsageError(`nothing to send: ${file} has no requests`);
  return out;
}

function lineOf(problem: string): number {
  return Number(/:(\d+):/.exec(problem)?.[1] ?? 0);
}

/**
 * The queue to look up without a URL: what the default app (bin/app.ts) names it for an environment
 * (`<environment>-charge-requests.fifo`, stack ChargePipeline-<environment>), or, against a local SQS
 * API with no environment named, the local runtime's `charge-requests.fifo`.
 */
export function queueNameFor(environment: string | undefined, local: boolean): string {
  if (environment === undefined && local) return PIPELINE.queueName;
  return `${environment ?? 'dev'}-${PIPELINE.queueName}`;
}

async function lookUpQueueUrl(sqs: SQSClient, queueName: string, region: string | undefined): Promise<string> {
  const howToFind = `pass --queue-url with the pipeline stack's QueueUrl output (aws cloudformation describe-stacks --stack-name <stack> --query "Stacks[0].Outputs[?OutputKey=='QueueUrl'].OutputValue" --output text); a pipeline embedded in another app has a generated queue name`;
  let out;
  try {
    out = await sqs.send(new GetQueueUrlCommand({ QueueName: queueName }));
  } catch (error) {
    const name = (error as { name?: string }).name ?? '';
    if (/QueueDoesNotExist|NonExistentQueue/.test(name)) {
      throw new Error(`no queue named ${queueName}${region ? ` in ${region}` : ''}: ${howToFind}`);
    }
    throw error;
  }
  if (!out.QueueUrl) throw new Error(`GetQueueUrl returned no URL for ${queueName}: ${howToFind}`);
  return out.QueueUrl;
}

function integerFlag(flag: string, value: string): number {
  // Numbers only: "12.99" is let through so the schema can say "must be an integer number of minor
  // units", while "12,99" or "abc" is a usage error here.
  if (!/^[+-]?\d+(\.\d+)?$/.test(value.trim())) throw new UsageError(`${flag} must be a number (got "${value}")`);
  return Number(value);
}

function flagFor(fieldPath: string): string {
  const flags: Record<string, string> = {
    orderId: 'order',
    amount: 'amount',
    currency: 'currency',
    customerId: 'customer',
    paymentMethod: 'payment-method',
    account: 'account',
    transferDestination: 'transfer-destination',
    applicationFeeAmount: 'application-fee',
    capture: 'capture-method',
  };
  return flags[fieldPath] ?? fieldPath;
}

/** `https://sqs.eu-west-1.amazonaws.com/…` (and fauxqs' `http://sqs.us-east-1.localhost:…`) → region. */
function regionOf(queueUrl: string | undefined): string | undefined {
  if (!queueUrl) return undefined;
  try {
    return /^sqs\.([a-z0-9-]+)\./.exec(new URL(queueUrl).hostname)?.[1];
  } catch {
    return undefined;
  }
}

function nonEmpty(value: string | undefined): string | undefined {
  return value === undefined || value.trim() === '' ? undefined : value;
}

function firstLine(error: unknown): string {
  const text = error instanceof Error ? error.message : String(error);
  return text.split('\n')[0] ?? text;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  process.exitCode = await main(process.argv.slice(2));
}
