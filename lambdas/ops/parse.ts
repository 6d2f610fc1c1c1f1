// argv → Command. One parser for both entry points: the CLI parses before it touches the network
// (bad arguments never cost a connection), and the ops Lambda parses the same argv again (it never
// trusts its caller). node:util parseArgs, strict: an unknown or misspelled flag is an error.
import { parseArgs, type ParseArgsOptionsConfig } from 'node:util';
import { CUSTOMER_ID } from '../payments/erasure-store.ts';
import { RejectReason } from '../payments/rejected-store.ts';
import type { ReviewQueueFilter } from '../payments/review.ts';
import { REFUND_REASONS, REMEDY_REFUND_ID_PREFIX } from '../payments/types.ts';
import { UsageError } from './errors.ts';

export const COMMAND_NAMES = [
  'review list',
  'review show',
  'review resolve',
  'review reissue',
  'review note',
  'operations show',
  'rejected list',
  'findings list',
  'findings resolve',
  'refunds list',
  'refunds show',
  'refunds create',
  'refunds remedy',
  'erase customer',
  'stats',
] as const;
export type CommandName = (typeof COMMAND_NAMES)[number];

/** Who acts and why: required on every command that writes. */
export interface OperatorAction {
  /**
   * As written to the audit trail: `operator:<name>` where the name is only said (a laptop, a bastion:
   * `--actor` or the OS user); the ops function replaces it with `operator:<IAM ARN>` STS verified.
   */
  readonly actor: string;
  readonly reason: string;
  /** The name said (`--actor`, else the OS user): the actor where nothing is verified, a free-text note beside a verified one. */
  readonly claimed: string | null;
  readonly claimedFrom: '--actor' | 'os-user' | null;
}

/** The codes rejected_messages can hold: the store's own list (rejected-store.ts RejectReason). */
export const REJECTED_REASON_CODES: readonly RejectReason[] = Object.values(RejectReason);

export type Command =
  | { readonly name: 'help'; readonly topic: CommandName | null }
  | { readonly name: 'review list'; readonly filter: ReviewQueueFilter }
  | { readonly name: 'review show'; readonly operationId: string }
  | {
      readonly name: 'review resolve';
      readonly operationId: string;
      readonly as: 'succeeded' | 'failed';
      readonly paymentIntentId: string | null;
      /** A refund's proof: the Stripe Refund (re_…) that shows it succeeded. */
      readonly stripeRefundId: string | null;
      readonly action: OperatorAction;
    }
  | { readonly name: 'review reissue'; readonly operationId: string; readonly action: OperatorAction }
  | { readonly name: 'review note'; readonly operationId: string; readonly action: OperatorAction }
  | { readonly name: 'operations show'; readonly orderOrOperation: string; readonly stripe: boolean }
  | {
      readonly name: 'rejected list';
      readonly sinceMs: number | null;
      /** Any of these codes (`--reason-code a,b`); null: every code. */
      readonly reasonCodes: readonly RejectReason[] | null;
      readonly orderId: string | null;
      readonly limit: number;
      readonly withBody: boolean;
    }
  /** What Stripe's events showed that the ledger cannot explain (stripe_event_findings). */
  | { readonly name: 'findings list'; readonly includeResolved: boolean; readonly kind: (typeof FINDING_KINDS)[number] | null; readonly limit: number }
  | { readonly name: 'findings resolve'; readonly findingId: number; readonly action: OperatorAction }
  /** An order's refund operations beside its charge (docs/model.md, refunds). */
  /** A customer's personal data out of the pipeline's tables (docs/operations.md "Erasure"). */
  | { readonly name: 'erase customer'; readonly customerId: string; readonly action: OperatorAction }
  | { readonly name: 'refunds list'; readonly orderId: string }
  | { readonly name: 'refunds show'; readonly operationId: string; readonly stripe: boolean }
  /** An operator's refund, through the same engine as a producer's (the operator as actor). */
  | {
      readonly name: 'refunds create';
      readonly orderId: string;
      readonly refundId: string;
      readonly amount: number;
      readonly refundReason: (typeof REFUND_REASONS)[number] | null;
      readonly action: OperatorAction;
    }
  /** A duplicate charge found by hand: the engine's duplicate-charge remedy, the operator as actor. */
  | { readonly name: 'refunds remedy'; readonly orderId: string; readonly paymentIntentId: string; readonly action: OperatorAction }
  | { readonly name: 'stats' };

// The kinds of stripe_event_findings (migrations/006, 011, 012; inbox-store.ts Finding): events refused
// for their account or mode, or that our key did not confirm; and the watch after a re-issue's.
export const FINDING_KINDS = ['contradiction', 'unrecorded_charge', 'foreign_account', 'livemode_mismatch', 'unconfirmed', 'refunded_twice', 'watch_blind'] as const;

/** Where the CLI sends the command; never part of what the ops Lambda accepts. */
export interface TransportOptions {
  readonly lambda?: string;
  readonly region?: string;
  readonly endpoint?: string;
}

export interface Invocation {
  readonly command: Command;
  /** Machine output. The Lambda always answers JSON; for the CLI this chooses JSON over tables. */
  readonly json: boolean;
  readonly transport: TransportOptions;
  /** argv without the transport options: what the CLI forwards to the ops Lambda. */
  readonly forwardArgv: readonly string[];
  /** `--yes`: a write against a deployed pipeline was confirmed (the CLI refuses one without it). */
  readonly confirmed: boolean;
}

// ── The command table ────────────────────────────────────────────────────────────────────────────

interface CommandSpec {
  readonly args: string;
  readonly summary: string;
  readonly options: ParseArgsOptionsConfig;
  readonly help: readonly (readonly [string, string])[];
  readonly positionals: readonly string[];
}

const ACTION_OPTIONS = {
  reason: { type: 'string' },
  actor: { type: 'string' },
} as const satisfies ParseArgsOptionsConfig;

const ACTION_HELP = [
  ['--reason <text>', 'required: why (ticket, what was checked); written to the audit trail'],
  ['--actor <name>', 'who acts (default: the OS user), as said: the actor locally; against the ops function'],
  ['', 'a note beside the IAM identity STS verified, which is the actor'],
] as const;

export const COMMANDS: Readonly<Record<CommandName, CommandSpec>> = {
  'review list': {
    args: '',
    summary: 'operations waiting for a human, oldest first',
    options: {
      'older-than': { type: 'string' },
      'reason-contains': { type: 'string' },
      status: { type: 'string' },
      limit: { type: 'string' },
    },
    help: [
      ['--older-than <duration>', 'in review at least this long (90s, 30m, 12h, 7d)'],
      ['--reason-contains <text>', 'review reason contains this text (case-insensitive)'],
      ['--status <pending|unknown>', 'only this status'],
      ['--limit <n>', 'at most n rows (default 50, max 1000)'],
    ],
    positionals: [],
  },
  'review show': {
    args: '<operation-id>',
    summary: 'the operation, its whole audit trail, what Stripe holds for it, and what you may do',
    options: {},
    help: [],
    positionals: ['operation-id'],
  },
  'review resolve': {
    args: '<operation-id> --as succeeded|failed',
    summary: 'settle an operation in review, on evidence from Stripe',
    options: { as: { type: 'string' }, 'payment-intent': { type: 'string' }, refund: { type: 'string' }, ...ACTION_OPTIONS },
    help: [
      ['--as succeeded', 'a charge, with --payment-intent pi_…: that PaymentIntent must exist, carry this operation in'],
      ['', 'metadata.operation_id, match amount and currency, and be succeeded'],
      ['', 'a refund, with --refund re_…: that Refund must exist, carry this operation in metadata.operation_id,'],
      ['', 'match amount, currency and the refunded PaymentIntent, and be succeeded'],
      ['--as failed', 'only if Stripe shows no PaymentIntent of the operation (any key generation)'],
      ['', 'that is succeeded or may still charge (processing, requires_action, requires_capture…);'],
      ['', "a refund: the complete List of the PaymentIntent's refunds shows none of the operation that is"],
      ['', 'pending, requires_action or succeeded, and no request of it may still be running'],
      ['--payment-intent <pi_…>', 'the PaymentIntent that proves a charge succeeded (--as succeeded only)'],
      ['--refund <re_…>', 'the Refund that proves a refund succeeded (--as succeeded only)'],
      ...ACTION_HELP,
    ],
    positionals: ['operation-id'],
  },
  'review reissue': {
    args: '<operation-id> --confirm-no-charge',
    summary: 'authorise a fresh attempt under a new idempotency key (key generation + 1)',
    options: { 'confirm-no-charge': { type: 'boolean' }, ...ACTION_OPTIONS },
    help: [
      ['--confirm-no-charge', 'required: you established that nothing was charged; the tool checks Stripe'],
      ['', 'again and refuses while any PaymentIntent of the operation is succeeded or may still charge'],
      ...ACTION_HELP,
    ],
    positionals: ['operation-id'],
  },
  'review note': {
    args: '<operation-id>',
    summary: 'add a note to the audit trail (changes nothing else)',
    options: { ...ACTION_OPTIONS },
    help: [...ACTION_HELP],
    positionals: ['operation-id'],
  },
  'operations show': {
    args: '<order-id | operation-id>',
    summary: "an order's operation, audit trail, outcome events and rejected messages",
    options: { stripe: { type: 'boolean' } },
    help: [['--stripe', 'also look the operation up at Stripe (as review show does)']],
    positionals: ['order-id'],
  },
  'rejected list': {
    args: '',
    summary: 'messages acknowledged without an operation (bad JSON, bad schema, conflicting order), newest first',
    options: {
      since: { type: 'string' },
      'reason-code': { type: 'string' },
      order: { type: 'string' },
      limit: { type: 'string' },
      'with-body': { type: 'boolean' },
    },
    help: [
      ['--since <duration>', 'received within this long (e.g. 24h)'],
      ['--reason-code <code>[,<code>…]', `one or more of ${REJECTED_REASON_CODES.join(', ')} (comma-separated)`],
      ['--order <order-id>', 'only this order'],
      ['--limit <n>', 'at most n rows (default 50, max 1000)'],
      ['--with-body', 'include the raw message body (may hold anything a producer sent)'],
    ],
    positionals: [],
  },
  'findings list': {
    args: '',
    summary: "what Stripe's events showed that the ledger cannot explain (contradictions, unrecorded charges), open ones first",
    options: { all: { type: 'boolean' }, kind: { type: 'string' }, limit: { type: 'string' } },
    help: [
      ['--all', 'resolved ones too'],
      ['--kind <kind>', FINDING_KINDS.join(' | ')],
      ['--limit <n>', 'at most n rows (default 50, max 1000)'],
    ],
    positionals: [],
  },
  'findings resolve': {
    args: '<finding-id>',
    summary: 'close a finding once explained (the alarm goes down with the next sweep); changes no operation',
    options: { ...ACTION_OPTIONS },
    help: [['--reason <text>', 'required: what you found and did (refunded, recorded in the order system, …)'], ACTION_HELP[1], ACTION_HELP[2]],
    positionals: ['finding-id'],
  },
  'refunds list': {
    args: '<order-id>',
    summary: "the order's charge and its refund operations: amounts, statuses, what is left to refund",
    options: {},
    help: [],
    positionals: ['order-id'],
  },
  'refunds show': {
    args: '<operation-id>',
    summary: 'one refund operation and its whole audit trail',
    options: { stripe: { type: 'boolean' } },
    help: [['--stripe', "also look the refund up at Stripe: List of the PaymentIntent's refunds, and every Refund id we hold"]],
    positionals: ['operation-id'],
  },
  'refunds create': {
    args: '<order-id>',
    summary: "refund (part of) an order through the engine, as a producer's refund would be, with you as the actor",
    options: { 'refund-id': { type: 'string' }, amount: { type: 'string' }, 'refund-reason': { type: 'string' }, ...ACTION_OPTIONS },
    help: [
      ['--refund-id <id>', 'required: the refund\'s id (one refund per order and id; the same id again is the same refund)'],
      ['--amount <n>', 'required: minor units; at most what is left to refund (refunds list)'],
      ['--refund-reason <r>', `Stripe's reason: ${REFUND_REASONS.join(' | ')}`],
      ...ACTION_HELP,
    ],
    positionals: ['order-id'],
  },
  'refunds remedy': {
    args: '<order-id>',
    summary: 'refund a PaymentIntent that charged the order a second time (checked at Stripe first), as the duplicate-charge remedy',
    options: { 'payment-intent': { type: 'string' }, ...ACTION_OPTIONS },
    help: [
      ['--payment-intent <pi>', "required: the extra PaymentIntent (succeeded, ours, the order's amount; not the charge's own)"],
      ...ACTION_HELP,
    ],
    positionals: ['order-id'],
  },
  'erase customer': {
    args: '<cus_…>',
    summary: "remove a customer's personal data from the pipeline's tables (final operations only); amounts, states and ids stay",
    options: { ...ACTION_OPTIONS },
    help: [
      ['', 'operations: customer_id and payment_method become "erased"; description, statement descriptor'],
      ['', 'suffix, charge metadata and last error are removed; their Stripe events lose their payloads;'],
      ['', 'rejected messages of their orders, or naming the customer, lose their raw bodies'],
      ['', 'refused (nothing changed) while an operation of the customer is open or an event not applied'],
      ...ACTION_HELP,
    ],
    positionals: ['customer-id'],
  },
  stats: {
    args: '',
    summary: 'counts by status, oldest open operation, review queue, rejected (24 h), unpublished events',
    options: {},
    help: [],
    positionals: [],
  },
};

const GLOBAL_OPTIONS = {
  json: { type: 'boolean' },
  help: { type: 'boolean', short: 'h' },
  lambda: { type: 'string' },
  region: { type: 'string' },
  endpoint: { type: 'string' },
  yes: { type: 'boolean', short: 'y' },
} as const satisfies ParseArgsOptionsConfig;

/** The CLI's own options: never forwarded to the ops function (nor part of what its identity proof signs). */
const TRANSPORT_OPTIONS = new Set(['lambda', 'region', 'endpoint', 'yes']);

export const GLOBAL_HELP = [
  ['--json', 'print JSON (the same document the ops Lambda returns)'],
  ['--lambda <function>', 'run the command in the ops Lambda (IAM auth) instead of connecting to'],
  ['', 'the database; uses the usual AWS credential chain'],
  ['--region <region>', 'AWS region for --lambda (default $AWS_REGION)'],
  ['--endpoint <url>', 'a local Lambda API endpoint for --lambda (tests, emulators)'],
  ['-y, --yes', 'confirm a command that writes against a deployed pipeline (--lambda, or DB_SECRET_ARN)'],
  ['-h, --help', 'help; `<command> --help` for one command'],
] as const;

function helpLines(rows: readonly (readonly [string, string])[]): string[] {
  const width = Math.max(0, ...rows.map(([flag]) => flag.length));
  return rows.map(([flag, text]) => `  ${flag.padEnd(width)}  ${text}`);
}

export function usage(topic: CommandName | null = null): string {
  if (topic !== null) {
    const spec = COMMANDS[topic];
    return [
      `Usage: npm run ops -- ${topic}${spec.args ? ` ${spec.args}` : ''} [options]`,
      '',
      spec.summary,
      ...(spec.help.length > 0 ? ['', 'Options:', ...helpLines(spec.help)] : []),
      '',
      'Global options:',
      ...helpLines(GLOBAL_HELP),
    ].join('\n');
  }
  const width = Math.max(...COMMAND_NAMES.map((name) => `${name} ${COMMANDS[name].args}`.trim().length));
  return [
    'Usage: npm run ops -- <command> [options]',
    '',
    'The operator tool: the human review queue, the audit trail, stats. Connects to $DATABASE_URL',
    '(Stripe look-ups: $STRIPE_SECRET_KEY, $STRIPE_API_BASE), or runs in the ops Lambda with --lambda.',
    '',
    'Commands:',
    ...COMMAND_NAMES.map((name) => `  ${`${name} ${COMMANDS[name].args}`.trim().padEnd(width)}  ${COMMANDS[name].summary}`),
    `  ${'ui'.padEnd(width)}  the live page on localhost: these figures in a browser, refreshed live (ui --help)`,
    '',
    'Global options:',
    ...helpLines(GLOBAL_HELP),
    '',
    'Exit status: 0 done, 1 refused or failed (the reason is printed; nothing was changed),',
    '2 bad arguments or missing configuration.',
  ].join('\n');
}

// ── Values ───────────────────────────────────────────────────────────────────────────────────────

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const PAYMENT_INTENT_ID = /^pi_[A-Za-z0-9_]{1,250}$/;
const REFUND_ID = /^re_[A-Za-z0-9_]{1,250}$/;
const DURATION = /^(\d+)(s|m|h|d)$/;
const UNIT_MS = { s: 1_000, m: 60_000, h: 3_600_000, d: 86_400_000 } as const;

export function parseDuration(flag: string, text: string): number {
  const m = DURATION.exec(text.trim());
  if (!m) throw new UsageError(`${flag} must be a duration like 90s, 30m, 12h or 7d (got "${text}")`);
  return Number(m[1]) * UNIT_MS[m[2] as keyof typeof UNIT_MS];
}

function parseLimit(text: string | undefined): number {
  if (text === undefined) return 50;
  if (!/^\d+$/.test(text) || Number(text) < 1 || Number(text) > 1000) throw new UsageError(`--limit must be an integer from 1 to 1000 (got "${text}")`);
  return Number(text);
}

function operationIdOf(text: string): string {
  if (!UUID.test(text)) throw new UsageError(`the operation id must be a uuid (got "${text}"); find it with review list or operations show <order>`);
  return text.toLowerCase();
}

/** The actor written until a verified identity replaces it (the ops function refuses writes it cannot verify). */
export const UNVERIFIED_ACTOR = 'operator:unverified';

function action(values: { reason?: string | undefined; actor?: string | undefined }, defaultActor: string | null, actorOptional: boolean): OperatorAction {
  const reason = values.reason?.trim();
  if (!reason) throw new UsageError('--reason is required: say why (a ticket, what you checked); it goes to the audit trail');
  if (reason.length > 2000) throw new UsageError('--reason must be at most 2000 characters');
  const claimedFrom = values.actor !== undefined ? '--actor' : defaultActor !== null ? 'os-user' : null;
  const name = (values.actor ?? defaultActor ?? '').trim().replace(/^operator:/, '');
  if (!name && !actorOptional) throw new UsageError('--actor is required (no OS user is known here)');
  if (name && !/^[\x21-\x7e]{1,100}$/.test(name)) throw new UsageError(`--actor must be 1-100 printable characters without spaces (got "${name}")`);
  return { actor: name ? `operator:${name}` : UNVERIFIED_ACTOR, reason, claimed: name || null, claimedFrom: name ? claimedFrom : null };
}

function oneOf<T extends string>(flag: string, value: string, allowed: readonly T[]): T {
  if (!(allowed as readonly string[]).includes(value)) throw new UsageError(`${flag} must be one of ${allowed.join(', ')} (got "${value}")`);
  return value as T;
}

// ── Parsing ──────────────────────────────────────────────────────────────────────────────────────

function commandName(argv: readonly string[]): { name: CommandName | null; rest: string[] } {
  const [first, second] = argv;
  if (first === 'stats') return { name: 'stats', rest: argv.slice(1) };
  const two = `${first} ${second}`;
  if ((COMMAND_NAMES as readonly string[]).includes(two)) return { name: two as CommandName, rest: argv.slice(2) };
  return { name: null, rest: [...argv] };
}

/**
 * Parse one invocation. `defaultActor` is the OS user on a laptop and null inside the Lambda, whose
 * actor is the caller STS verified (`actorOptional`: `--actor` is then only a note).
 */
export function parseInvocation(argv: readonly string[], defaultActor: string | null, options: { readonly actorOptional?: boolean } = {}): Invocation {
  const actorOptional = options.actorOptional ?? false;
  const { name, rest } = commandName(argv);
  if (name === null) {
    const wantsHelp = argv.length === 0 || argv.every((a) => a === '--help' || a === '-h' || a === '--json');
    if (wantsHelp && argv.length > 0) return { command: { name: 'help', topic: null }, json: argv.includes('--json'), transport: {}, forwardArgv: [...argv], confirmed: false };
    const first = argv.find((a) => !a.startsWith('-'));
    throw new UsageError(
      argv.length === 0
        ? 'no command given'
        : first === 'review' || first === 'operations' || first === 'rejected' || first === 'findings' || first === 'erase'
          ? `unknown command "${argv.filter((a) => !a.startsWith('-')).slice(0, 2).join(' ')}"; ${first} has: ${COMMAND_NAMES.filter((n) => n.startsWith(`${first} `)).map((n) => n.split(' ')[1]).join(', ')}`
          : `unknown command "${first ?? argv[0]}"; commands: ${COMMAND_NAMES.join(', ')}`,
    );
  }
  const spec = COMMANDS[name];
  let parsed;
  try {
    parsed = parseArgs({ args: rest, options: { ...GLOBAL_OPTIONS, ...spec.options }, allowPositionals: true, strict: true, tokens: true });
  } catch (error) {
    // node:util's messages are already precise ("Unknown option '--ammount'").
    // node:util's first sentence is precise ("Unknown option '--ammount'."); the rest is about `--`.
    throw new UsageError(`${name}: ${(error as Error).message.split('. To specify')[0]}`);
  }
  const values = parsed.values as Record<string, string | boolean | undefined>;
  const str = (key: string) => values[key] as string | undefined;
  const bool = (key: string) => values[key] === true;

  // The transport options are the CLI's; the forwarded argv is everything else, verbatim.
  const offset = argv.length - rest.length;
  const drop = new Set<number>();
  for (const token of parsed.tokens ?? []) {
    if (token.kind === 'option' && TRANSPORT_OPTIONS.has(token.name)) {
      drop.add(offset + token.index);
      // `--lambda name` (two arguments) rather than `--lambda=name`.
      if (token.inlineValue === false) drop.add(offset + token.index + 1);
    }
  }
  const forwardArgv = argv.filter((_, i) => !drop.has(i));
  const transport: TransportOptions = {
    ...(str('lambda') !== undefined ? { lambda: str('lambda')! } : {}),
    ...(str('region') !== undefined ? { region: str('region')! } : {}),
    ...(str('endpoint') !== undefined ? { endpoint: str('endpoint')! } : {}),
  };
  if ((transport.region || transport.endpoint) && !transport.lambda) throw new UsageError('--region and --endpoint only go with --lambda <function>');
  const json = bool('json');
  const confirmed = bool('yes');
  if (bool('help')) return { command: { name: 'help', topic: name }, json, transport, forwardArgv, confirmed };

  const positionals = parsed.positionals;
  if (positionals.length !== spec.positionals.length) {
    throw new UsageError(
      spec.positionals.length === 0
        ? `${name} takes no positional arguments (got ${positionals.map((p) => `"${p}"`).join(' ')})`
        : positionals.length === 0
          ? `${name}: missing <${spec.positionals.join('> <')}>`
          : `${name}: expected <${spec.positionals.join('> <')}>, got ${positionals.length} arguments (${positionals.map((p) => `"${p}"`).join(' ')}); quote a --reason with spaces`,
    );
  }
  const first = positionals[0] ?? '';

  const command = ((): Command => {
    switch (name) {
      case 'review list': {
        const status = str('status');
        return {
          name,
          filter: {
            olderThanMs: str('older-than') === undefined ? undefined : parseDuration('--older-than', str('older-than')!),
            reasonContains: str('reason-contains') === '' ? undefined : str('reason-contains'),
            status: status === undefined ? undefined : oneOf('--status', status, ['pending', 'unknown'] as const),
            limit: parseLimit(str('limit')),
          },
        };
      }
      case 'review show':
        return { name, operationId: operationIdOf(first) };
      case 'review resolve': {
        const as = str('as');
        if (as === undefined) throw new UsageError('review resolve: --as succeeded|failed is required');
        const outcome = oneOf('--as', as, ['succeeded', 'failed'] as const);
        const pi = str('payment-intent');
        const refund = str('refund');
        if (pi !== undefined && refund !== undefined) throw new UsageError('--payment-intent (a charge) and --refund (a refund) exclude each other');
        if (outcome === 'succeeded' && pi === undefined && refund === undefined) {
          throw new UsageError('--as succeeded needs --payment-intent pi_… (a charge) or --refund re_… (a refund): the object that proves it');
        }
        if (outcome === 'failed' && pi !== undefined) throw new UsageError('--payment-intent goes with --as succeeded only');
        if (outcome === 'failed' && refund !== undefined) throw new UsageError('--refund goes with --as succeeded only');
        if (pi !== undefined && !PAYMENT_INTENT_ID.test(pi)) throw new UsageError(`--payment-intent must be a PaymentIntent id pi_… (got "${pi}")`);
        if (refund !== undefined && !REFUND_ID.test(refund)) throw new UsageError(`--refund must be a Stripe Refund id re_… (got "${refund}")`);
        return { name, operationId: operationIdOf(first), as: outcome, paymentIntentId: pi ?? null, stripeRefundId: refund ?? null, action: action(values, defaultActor, actorOptional) };
      }
      case 'review reissue':
        if (!bool('confirm-no-charge')) {
          throw new UsageError('review reissue needs --confirm-no-charge: a new key can charge again, so confirm you established that nothing was charged');
        }
        return { name, operationId: operationIdOf(first), action: action(values, defaultActor, actorOptional) };
      case 'review note':
        return { name, operationId: operationIdOf(first), action: action(values, defaultActor, actorOptional) };
      case 'operations show':
        if (!first.trim()) throw new UsageError('operations show: the order id is empty');
        return { name, orderOrOperation: first, stripe: bool('stripe') };
      case 'rejected list': {
        const code = str('reason-code');
        return {
          name,
          sinceMs: str('since') === undefined ? null : parseDuration('--since', str('since')!),
          reasonCodes: code === undefined ? null : [...new Set(code.split(',').map((c) => oneOf('--reason-code', c.trim(), REJECTED_REASON_CODES)))],
          orderId: str('order') ?? null,
          limit: parseLimit(str('limit')),
          withBody: bool('with-body'),
        };
      }
      case 'findings list': {
        const kind = str('kind');
        return { name, includeResolved: bool('all'), kind: kind === undefined ? null : oneOf('--kind', kind, FINDING_KINDS), limit: parseLimit(str('limit')) };
      }
      case 'findings resolve':
        if (!/^[1-9]\d{0,17}$/.test(first)) throw new UsageError(`the finding id must be a positive integer (got "${first}"); see findings list`);
        return { name, findingId: Number(first), action: action(values, defaultActor, actorOptional) };
      case 'refunds list':
        if (!first.trim()) throw new UsageError('refunds list: the order id is empty');
        return { name, orderId: first };
      case 'refunds show':
        return { name, operationId: operationIdOf(first), stripe: bool('stripe') };
      case 'refunds create': {
        if (!/^[\x21-\x7e]{1,128}$/.test(first)) throw new UsageError(`refunds create: the order id must be 1-128 printable characters without spaces (got "${first}")`);
        const refundId = str('refund-id');
        if (refundId === undefined || !/^[\x21-\x7e]{1,128}$/.test(refundId)) throw new UsageError('refunds create: --refund-id <id> is required (1-128 printable characters without spaces)');
        // The remedy's namespace, as for a producer (message.ts): one taken here would make the remedy's insert a no-op.
        if (refundId.startsWith(REMEDY_REFUND_ID_PREFIX)) {
          throw new UsageError(`refunds create: --refund-id must not start with "${REMEDY_REFUND_ID_PREFIX}" (the duplicate-charge remedy's ids); a second charge is refunded with refunds remedy <order> --payment-intent pi_…`);
        }
        const amountText = str('amount') ?? '';
        if (!/^[1-9]\d{0,14}$/.test(amountText)) throw new UsageError(`refunds create: --amount must be a positive integer in minor units (got "${amountText}")`);
        const reason = str('refund-reason');
        return {
          name,
          orderId: first,
          refundId,
          amount: Number(amountText),
          refundReason: reason === undefined ? null : oneOf('--refund-reason', reason, REFUND_REASONS),
          action: action(values, defaultActor, actorOptional),
        };
      }
      case 'refunds remedy': {
        if (!/^[\x21-\x7e]{1,128}$/.test(first)) throw new UsageError(`refunds remedy: the order id must be 1-128 printable characters without spaces (got "${first}")`);
        const pi = str('payment-intent');
        if (pi === undefined || !PAYMENT_INTENT_ID.test(pi)) throw new UsageError(`refunds remedy: --payment-intent pi_… is required (got "${pi ?? ''}")`);
        return { name, orderId: first, paymentIntentId: pi, action: action(values, defaultActor, actorOptional) };
      }
      case 'erase customer':
        if (!CUSTOMER_ID.test(first)) throw new UsageError(`erase customer: the customer id must be a Stripe customer id cus_… (got "${first}")`);
        return { name, customerId: first, action: action(values, defaultActor, actorOptional) };
      case 'stats':
        return { name };
    }
  })();
  return { command, json, transport, forwardArgv, confirmed };
}

/** Commands that write (and so need an actor and a reason). */
export const isAction = (command: Command): command is Extract<Command, { action: OperatorAction }> => 'action' in command;

/**
 * The argv the CLI sends to the ops function. Inside the function there is no OS user: the actor is
 * the identity STS verifies; the OS user travels as the --actor note beside it (who sat at the
 * keyboard, as said).
 */
export function forwardedArgv(invocation: Invocation): string[] {
  const argv = [...invocation.forwardArgv];
  const command = invocation.command;
  const named = argv.some((a) => a === '--actor' || a.startsWith('--actor='));
  if (isAction(command) && !named) argv.push('--actor', command.action.actor.replace(/^operator:/, ''));
  return argv;
}
