// Configuration of the Stripe-events functions, from the environment (the rest — database, Stripe
// key, bus — is lambdas/runtime/config.ts, shared with every function). Validated with messages that
// say what to change; no secret is ever logged.
import { ConfigError } from '../runtime/config.ts';
import { EmptySecretError, getSecretString, parseSecretJson, secretReadEmpty } from '../runtime/secrets.ts';

export interface StripeEventsConfig {
  /** Which door the function serves: a Function URL (webhook) or a partner-bus rule (eventbridge). */
  readonly input: 'webhook' | 'eventbridge';
  /** Local: the endpoint's signing secret itself (whsec_…). */
  readonly webhookSecret: string | undefined;
  /** AWS: a Secrets Manager secret holding it (created empty by the stack; an operator fills it in). */
  readonly webhookSecretArn: string | undefined;
  /** Larger bodies are refused with 413 before any parsing. Stripe events are a few KB. */
  readonly maxBodyBytes: number;
  /** Apply a new event inside the delivery (fast path) or only record it (the reconciler applies). */
  readonly applyInline: boolean;
  /** EventBridge door: the exact partner event source to accept; unset = any aws.partner/stripe.com/… */
  readonly partnerEventSource: string | undefined;
}

type Env = Readonly<Record<string, string | undefined>>;
const blank = (value: string | undefined) => (value === undefined || value === '' ? undefined : value);

export const DEFAULT_MAX_BODY_BYTES = 256 * 1024;

export function loadStripeEventsConfig(env: Env = process.env): StripeEventsConfig {
  const rawMax = blank(env.STRIPE_WEBHOOK_MAX_BODY_BYTES);
  const maxBodyBytes = rawMax === undefined ? DEFAULT_MAX_BODY_BYTES : Number(rawMax);
  if (!Number.isInteger(maxBodyBytes) || maxBodyBytes < 1024 || maxBodyBytes > 6 * 1024 * 1024) {
    throw new ConfigError(`STRIPE_WEBHOOK_MAX_BODY_BYTES must be an integer in [1024, 6291456] (a Function URL's payload limit), got "${rawMax}"`);
  }
  const rawInline = blank(env.STRIPE_EVENTS_APPLY_INLINE) ?? 'true';
  if (rawInline !== 'true' && rawInline !== 'false') throw new ConfigError(`STRIPE_EVENTS_APPLY_INLINE must be true or false, got "${rawInline}"`);
  const secret = blank(env.STRIPE_WEBHOOK_SECRET);
  if (secret !== undefined && !secret.startsWith('whsec_')) {
    throw new ConfigError('STRIPE_WEBHOOK_SECRET must be the endpoint signing secret (it starts with whsec_), not an API key');
  }
  const source = blank(env.STRIPE_PARTNER_EVENT_SOURCE);
  if (source !== undefined && !source.startsWith('aws.partner/stripe.com/')) {
    throw new ConfigError(`STRIPE_PARTNER_EVENT_SOURCE must be a Stripe partner event source (aws.partner/stripe.com/…), got "${source}"`);
  }
  const input = blank(env.STRIPE_EVENTS_INPUT) ?? 'webhook';
  if (input !== 'webhook' && input !== 'eventbridge') throw new ConfigError(`STRIPE_EVENTS_INPUT must be webhook or eventbridge, got "${input}"`);
  return {
    input,
    webhookSecret: secret,
    webhookSecretArn: blank(env.STRIPE_WEBHOOK_SECRET_ARN),
    maxBodyBytes,
    applyInline: rawInline === 'true',
    partnerEventSource: source,
  };
}

/**
 * The signing secrets, or null while none is configured (the stack creates the secret EMPTY: until an
 * operator pastes the whsec_… from the Dashboard, deliveries get 503 and Stripe keeps retrying them;
 * an empty read is kept briefly, secrets.ts). The secret holds the secret itself, or JSON
 * `{"secret": "whsec_…"}`, or during a roll `{"secret": "whsec_new", "previous": "whsec_old"}`: a
 * delivery that verifies with either is accepted (docs/runbook.md, rolling the signing secret).
 */
export async function webhookSecrets(config: StripeEventsConfig, region?: string): Promise<WebhookSecrets | null> {
  if (config.webhookSecret) return { secret: config.webhookSecret, previousSecret: null };
  if (!config.webhookSecretArn) return null;
  let raw: string;
  try {
    raw = (await getSecretString(config.webhookSecretArn, region)).trim();
  } catch (error) {
    // A secret created with no value at all reads as "no string value": not configured yet.
    if (error instanceof EmptySecretError) return null;
    throw error;
  }
  const shape = '{"secret": "whsec_…"} or the secret';
  const json = raw.startsWith('{') ? parseSecretJson(config.webhookSecretArn, raw, shape) : { secret: raw };
  const values = [json.secret, json.previous].map((v) => (typeof v === 'string' ? v.trim() : '')).filter((v) => v !== '');
  if (values.some((v) => !v.startsWith('whsec_'))) {
    throw new ConfigError(`secret ${config.webhookSecretArn} must hold endpoint signing secrets (whsec_…): ${shape}, or {"secret": …, "previous": …} during a roll`);
  }
  if (typeof json.secret !== 'string' || json.secret.trim() === '') {
    secretReadEmpty(config.webhookSecretArn);
    return null;
  }
  const previous = values[1] !== undefined && values[1] !== values[0] ? values[1] : null;
  return { secret: values[0]!, previousSecret: previous };
}

/** The current signing secret, and the one it replaces during a roll. */
export interface WebhookSecrets {
  readonly secret: string;
  readonly previousSecret: string | null;
}
