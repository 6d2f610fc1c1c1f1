// The receipt notifier's configuration from the environment, checked at start (a bad value is
// refused with the variable's name and what is allowed). The database settings are the pipeline's
// own (DATABASE_URL / DB_SECRET_ARN, DB_* — lambdas/runtime/config.ts); everything else is here.
import { ConsumerConfigError } from '../kit/errors.ts';
import { isPolicy, POLICIES, type ConsumerPolicy } from '../kit/types.ts';
import { DEFAULT_RECEIPTS_POLICY } from './contract.ts';

export interface ReceiptsConfig {
  readonly policy: ConsumerPolicy;
  readonly name: string;
  readonly email: {
    readonly apiBase: string;
    readonly apiKey: string | undefined;
    readonly apiKeySecretArn: string | undefined;
    readonly idempotencyKeys: boolean;
    readonly timeoutMs: number;
  };
  readonly from: string;
  readonly recipientTemplate: string;
  readonly leaseMs: number;
  readonly migrateOnStart: boolean;
}

type Env = Readonly<Record<string, string | undefined>>;
const blank = (v: string | undefined) => (v === undefined || v === '' ? undefined : v);

export function loadReceiptsConfig(env: Env = process.env): ReceiptsConfig {
  const problems: string[] = [];
  const int = (name: string, fallback: number, min: number, max: number) => {
    const raw = blank(env[name]);
    if (raw === undefined) return fallback;
    const v = Number(raw);
    if (!Number.isInteger(v) || v < min || v > max) problems.push(`${name} must be an integer in [${min}, ${max}], got "${raw}"`);
    return v;
  };
  const bool = (name: string, fallback: boolean) => {
    const raw = blank(env[name]);
    if (raw === undefined) return fallback;
    if (raw !== 'true' && raw !== 'false') problems.push(`${name} must be true or false, got "${raw}"`);
    return raw === 'true';
  };
  const rawPolicy = blank(env.RECEIPTS_POLICY) ?? DEFAULT_RECEIPTS_POLICY;
  if (!isPolicy(rawPolicy)) problems.push(`RECEIPTS_POLICY must be one of ${POLICIES.join(', ')}, got "${rawPolicy}"`);
  const apiBase = blank(env.EMAIL_API_BASE);
  if (!apiBase) problems.push('EMAIL_API_BASE is not set (the e-mail API, e.g. https://api.resend.com, or the local fake)');
  else if (!/^https?:\/\/\S+$/.test(apiBase)) problems.push(`EMAIL_API_BASE must be an http(s) URL, got "${apiBase}"`);
  const apiKey = blank(env.EMAIL_API_KEY);
  const apiKeySecretArn = blank(env.EMAIL_API_KEY_SECRET_ARN);
  if (!apiKey && !apiKeySecretArn) problems.push('set EMAIL_API_KEY (local) or EMAIL_API_KEY_SECRET_ARN (AWS)');
  const name = blank(env.RECEIPTS_CONSUMER_NAME) ?? 'receipts';
  if (!/^[a-z][a-z0-9-]{0,62}$/.test(name)) problems.push(`RECEIPTS_CONSUMER_NAME must be lowercase letters, digits and '-', got "${name}"`);
  const config: ReceiptsConfig = {
    policy: rawPolicy as ConsumerPolicy,
    name,
    email: {
      apiBase: apiBase ?? '',
      apiKey,
      apiKeySecretArn,
      idempotencyKeys: bool('EMAIL_PROVIDER_IDEMPOTENCY', false),
      timeoutMs: int('EMAIL_TIMEOUT_MS', 5_000, 100, 60_000),
    },
    from: blank(env.RECEIPTS_FROM) ?? 'receipts@example.com',
    recipientTemplate: blank(env.RECEIPTS_RECIPIENT_TEMPLATE) ?? 'customer+{orderId}@example.com',
    leaseMs: int('CONSUMER_LEASE_MS', 90_000, 1_000, 3_600_000),
    migrateOnStart: bool('CONSUMER_MIGRATE_ON_START', true),
  };
  if (config.policy === 'idempotent' && !config.email.idempotencyKeys) {
    problems.push('RECEIPTS_POLICY=idempotent needs EMAIL_PROVIDER_IDEMPOTENCY=true (a provider that deduplicates on keys); use at-least-once otherwise');
  }
  if (problems.length > 0) throw new ConsumerConfigError(`receipt notifier configuration:\n  - ${problems.join('\n  - ')}`);
  return config;
}
