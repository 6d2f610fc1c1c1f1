// Stripe's wire format as stripe-node speaks it: bracketed form bodies, error envelopes, ids, and the
// subset of the Search query language the product uses. Pure functions, no state.
import { createHash, randomBytes } from 'node:crypto';
import type { PaymentIntentJson, PaymentIntentStatus } from './types.ts';

// ---------------------------------------------------------------------------------------------- ids

const ALPHABET = '0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz';

/** Random-looking ids like Stripe's (pi_3Q…, req_…); never sequential, so no test can lean on order. */
export function randomId(prefix: string, length: number): string {
  const bytes = randomBytes(length);
  let out = prefix;
  for (const byte of bytes) out += ALPHABET[byte % ALPHABET.length];
  return out;
}

// --------------------------------------------------------------------------------------- form bodies

export type FormValue = string | FormObject;
export interface FormObject {
  [key: string]: FormValue;
}

export class FormError extends Error {
  override name = 'FormError';
}

/**
 * Decodes `a=1&metadata[operation_id]=x&expand[0]=y` into nested objects. stripe-node sends brackets
 * literally (it un-escapes %5B/%5D), other clients escape them; URLSearchParams accepts both.
 * Arrays stay objects keyed "0", "1"…: nothing here needs them as arrays, and the fingerprint only
 * needs a canonical form.
 */
export function decodeForm(text: string): FormObject {
  const root: FormObject = {};
  for (const [rawKey, value] of new URLSearchParams(text)) {
    const match = /^([^[\]]+)((?:\[[^[\]]*\])*)$/.exec(rawKey);
    if (match === null) throw new FormError(`Invalid parameter name: ${rawKey}`);
    const path = [match[1] ?? '', ...[...(match[2] ?? '').matchAll(/\[([^[\]]*)\]/g)].map((m) => m[1] ?? '')];
    let node = root;
    for (let i = 0; i < path.length - 1; i += 1) {
      const part = path[i] ?? '';
      const next = node[part];
      if (next === undefined) {
        const child: FormObject = {};
        node[part] = child;
        node = child;
      } else if (typeof next === 'string') {
        throw new FormError(`Parameter ${rawKey} conflicts with a plain value`);
      } else {
        node = next;
      }
    }
    const leaf = path[path.length - 1] ?? '';
    if (typeof node[leaf] === 'object') throw new FormError(`Parameter ${rawKey} conflicts with a nested value`);
    node[leaf] = value;
  }
  return root;
}

function canonical(value: FormValue): unknown {
  if (typeof value === 'string') return value;
  return Object.keys(value)
    .sort()
    .map((k) => [k, canonical(value[k] ?? '')]);
}

/**
 * What "the same parameters" means for the idempotency layer: method, path and the decoded body in
 * canonical form (parameter order and bracket escaping do not matter, values do).
 */
export function fingerprint(method: string, path: string, body: FormObject): string {
  return createHash('sha256')
    .update(JSON.stringify([method, path, canonical(body)]))
    .digest('hex');
}

// ------------------------------------------------------------------------------------ error envelopes

export interface StripeErrorObject {
  /**
   * The four types of Stripe's published `api_errors` schema. A 401 and a 403 are
   * `invalid_request_error` on the wire: stripe-node picks StripeAuthenticationError /
   * StripePermissionError from the HTTP status, not from `type` (RequestSender, stripe@23.1.0).
   */
  readonly type: 'api_error' | 'card_error' | 'idempotency_error' | 'invalid_request_error';
  readonly message: string;
  readonly code?: string;
  readonly param?: string;
  readonly decline_code?: string;
  readonly payment_intent?: PaymentIntentJson;
}

export interface ErrorEnvelope {
  readonly error: StripeErrorObject;
}

export const errors = {
  invalidRequest: (message: string, code?: string, param?: string): ErrorEnvelope => ({
    error: { type: 'invalid_request_error', message, ...(code ? { code } : {}), ...(param ? { param } : {}) },
  }),
  resourceMissing: (kind: string, id: string, param: string): ErrorEnvelope => ({
    error: { type: 'invalid_request_error', code: 'resource_missing', param, message: `No such ${kind}: '${id}'` },
  }),
  unknownRoute: (method: string, path: string): ErrorEnvelope => ({
    error: {
      type: 'invalid_request_error',
      message: `Unrecognized request URL (${method}: ${path}). The fake Stripe server models only create, retrieve, capture, cancel, list and search of PaymentIntents, and create, retrieve and list of Refunds.`,
    },
  }),
  idempotencyMismatch: (key: string): ErrorEnvelope => ({
    error: {
      type: 'idempotency_error',
      message: `Keys for idempotent requests can only be used with the same parameters they were first used with. Try using a key other than '${key}' if you meant to execute a different request.`,
    },
  }),
  idempotencyInUse: (key: string): ErrorEnvelope => ({
    error: {
      type: 'idempotency_error',
      code: 'idempotency_key_in_use',
      message: `There is currently another in-progress request using this Idempotent Key (that probably means you submitted twice, and the other request is still going through): ${key}. Please try again later.`,
    },
  }),
  rateLimited: (): ErrorEnvelope => ({
    error: {
      type: 'invalid_request_error',
      code: 'rate_limit',
      message: 'Too many requests hit the API too quickly. We recommend an exponential backoff of your requests.',
    },
  }),
  /** docs.stripe.com/error-codes, lock_timeout (a 429: docs.stripe.com/rate-limits). */
  lockTimeout: (): ErrorEnvelope => ({
    error: {
      type: 'invalid_request_error',
      code: 'lock_timeout',
      message:
        'This object cannot be accessed right now because another API request or Stripe process is currently accessing it. If you see this error intermittently, retry the request.',
    },
  }),
  noApiKey: (): ErrorEnvelope => ({
    error: {
      type: 'invalid_request_error',
      message:
        "You did not provide an API key. You need to provide your API key in the Authorization header, using Bearer auth (e.g. 'Authorization: Bearer YOUR_SECRET_KEY').",
    },
  }),
  invalidApiKey: (key: string): ErrorEnvelope => ({
    error: { type: 'invalid_request_error', message: `Invalid API Key provided: ${redactKey(key)}` },
  }),
  permission: (): ErrorEnvelope => ({
    error: {
      type: 'invalid_request_error',
      message: 'The provided key does not have the required permissions for this endpoint.',
    },
  }),
  /**
   * A Stripe-Account header naming no account of this platform, or no account id at all:
   * docs.stripe.com/error-codes, account_invalid — "The account ID provided as a value for the
   * Stripe-Account header is invalid. Check that your requests are specifying a valid account ID."
   * The code is documented; the HTTP status and the message's wording are not (no source found):
   * the fake answers 403, a key without access to the account being a permission error, and says
   * which key and account — a caller must branch on `code`, never on the text.
   */
  accountInvalid: (key: string, account: string): ErrorEnvelope => ({
    error: {
      type: 'invalid_request_error',
      code: 'account_invalid',
      message: `The provided key '${redactKey(key)}' does not have access to account '${account}' (or that account does not exist). Application access may have been revoked.`,
    },
  }),
  /**
   * An operation the PaymentIntent's status does not allow: code payment_intent_unexpected_state
   * (docs.stripe.com/error-codes), the PaymentIntent in the error; message as Stripe words it for a
   * capture ("This PaymentIntent could not be captured because it has a status of
   * requires_confirmation. Only a PaymentIntent with one of the following statuses may be captured:
   * requires_capture.", a Stripe answer quoted in grandnode/grandnode#985).
   */
  unexpectedState: (message: string, pi: PaymentIntentJson): ErrorEnvelope => ({
    error: { type: 'invalid_request_error', code: 'payment_intent_unexpected_state', message, payment_intent: pi },
  }),
  apiError: (): ErrorEnvelope => ({
    error: { type: 'api_error', message: 'An unknown error occurred' },
  }),
} as const;

/** Keys are secrets even in a fake: logs and error messages show only the tail. */
export function redactKey(key: string): string {
  return key.length <= 8 ? '****' : `${key.slice(0, 8)}****${key.slice(-4)}`;
}

// ------------------------------------------------------------------------------ create PaymentIntent

export interface CreateParams {
  readonly amount: number;
  readonly currency: string;
  readonly customer: string | null;
  readonly paymentMethod: string | null;
  readonly confirm: boolean;
  readonly offSession: boolean;
  readonly metadata: Readonly<Record<string, string>>;
  readonly description: string | null;
  readonly statementDescriptorSuffix: string | null;
  /** `allowed_payment_method_types[]` / `excluded_payment_method_types[]`, null when not sent. */
  readonly allowedPaymentMethodTypes: readonly string[] | null;
  readonly excludedPaymentMethodTypes: readonly string[] | null;
  /** `error_on_requires_action`: only with automatic payment methods turned off (see parseCreate). */
  readonly errorOnRequiresAction: boolean;
  /** `capture_method` (default automatic). */
  readonly captureMethod: 'automatic' | 'automatic_async' | 'manual';
  /** Connect: the platform's fee, and a destination charge's connected account. */
  readonly applicationFeeAmount: number | null;
  readonly transferData: { readonly destination: string; readonly amount?: number } | null;
}

/** Who a create is made as, for the Connect checks: the Stripe-Account header, and which accounts exist. */
export interface CreateContext {
  readonly account: string | null;
  readonly isConnectedAccount: (id: string) => boolean;
}

const PLATFORM: CreateContext = { account: null, isConnectedAccount: () => false };

export type Validated =
  | { readonly ok: true; readonly params: CreateParams }
  | { readonly ok: false; readonly error: ErrorEnvelope };

/**
 * Parameters Stripe accepts on this endpoint at the pinned version (2026-10-28.endive) that the fake
 * tolerates (and ignores unless listed in CreateParams). `payment_method_types` is not among them:
 * at this version Stripe refuses it (see parseCreate).
 */
const KNOWN_CREATE_PARAMS = new Set([
  'amount',
  'currency',
  'customer',
  'payment_method',
  'confirm',
  'off_session',
  'metadata',
  'description',
  'expand',
  'automatic_payment_methods',
  'allowed_payment_method_types',
  'excluded_payment_method_types',
  'return_url',
  'error_on_requires_action',
  'receipt_email',
  'statement_descriptor',
  'statement_descriptor_suffix',
  'capture_method',
  'application_fee_amount',
  'transfer_data',
]);

/** capture_method values of the create operation (stripe-node 23.1.0 PaymentIntentCreateParams.CaptureMethod). */
const CAPTURE_METHODS = ['automatic', 'automatic_async', 'manual'] as const;

/**
 * Stripe's documented limits on what a create carries: metadata "up to 50 keys, with key names up to
 * 40 characters long and values up to 500 characters long" (docs.stripe.com/metadata, and the
 * `metadata` parameter of every create); `description` maxLength 1000 in the published OpenAPI
 * description of POST /v1/payment_intents; `statement_descriptor_suffix` at most 22 characters
 * (docs.stripe.com/get-started/account/statement-descriptors, the API reference of the parameter).
 */
export const METADATA_MAX_KEYS = 50;
export const METADATA_MAX_KEY_LENGTH = 40;
export const METADATA_MAX_VALUE_LENGTH = 500;
export const DESCRIPTION_MAX_LENGTH = 1000;
export const STATEMENT_DESCRIPTOR_SUFFIX_MAX_LENGTH = 22;

/**
 * The payment method types the fake models, by test payment method. Cards are Stripe's own test
 * payment methods (docs.stripe.com/testing#cards); Stripe has no `pm_` shortcut for a debit, so the
 * async ones are the fake's: `pm_fake_sepa_debit` (SEPA Direct Debit: "up to 14 business days",
 * docs.stripe.com/payments/sepa-debit), `pm_fake_us_bank_account` (ACH Direct Debit: "up to 4
 * business days", docs.stripe.com/payments/ach-direct-debit), and `pm_fake_processing`, an older name
 * of the SEPA one. Anything else is a card.
 */
export type PaymentMethodType = 'card' | 'sepa_debit' | 'us_bank_account';
const ASYNC_PAYMENT_METHODS: Readonly<Record<string, PaymentMethodType>> = {
  pm_fake_processing: 'sepa_debit',
  pm_fake_sepa_debit: 'sepa_debit',
  pm_fake_us_bank_account: 'us_bank_account',
};

export function paymentMethodType(paymentMethod: string | null): PaymentMethodType {
  return (paymentMethod !== null ? ASYNC_PAYMENT_METHODS[paymentMethod] : undefined) ?? 'card';
}

/** Stripe's test cards by test PaymentMethod (docs.stripe.com/testing#cards): brand and last four digits. */
const TEST_CARDS: Readonly<Record<string, { readonly brand: string; readonly last4: string }>> = {
  pm_card_visa: { brand: 'visa', last4: '4242' },
  pm_card_mastercard: { brand: 'mastercard', last4: '4444' },
  pm_card_chargeDeclined: { brand: 'visa', last4: '0002' },
  pm_card_visa_chargeDeclined: { brand: 'visa', last4: '0002' },
  pm_card_insufficientFunds: { brand: 'visa', last4: '9995' },
  pm_card_visa_chargeDeclinedInsufficientFunds: { brand: 'visa', last4: '9995' },
  pm_card_authenticationRequired: { brand: 'visa', last4: '3155' },
};

/**
 * A PaymentMethod as an expanded `payment_method` shows it (docs.stripe.com/api/payment_methods/object):
 * what the published schema requires (billing_details, created, id, livemode, object, type) plus
 * `customer` and `metadata`, and for a card the `card` hash's required fields. The debit types' own
 * hashes (IBAN, routing details) are not modelled: nothing reads them.
 */
export function paymentMethodJson(id: string, customer: string | null, createdSeconds: number): Record<string, unknown> {
  const type = paymentMethodType(id);
  const card = TEST_CARDS[id] ?? { brand: 'visa', last4: '4242' };
  return {
    id,
    object: 'payment_method',
    billing_details: { address: null, email: null, name: null, phone: null },
    ...(type === 'card' ? { card: { brand: card.brand, exp_month: 12, exp_year: 2034, funding: 'credit', last4: card.last4 } } : {}),
    created: createdSeconds,
    customer,
    livemode: false,
    metadata: {},
    type,
  };
}

/** Types Stripe settles in days: a confirmed payment with one of them is `processing` at first. */
export function isAsyncPaymentMethodType(type: PaymentMethodType): boolean {
  return type !== 'card';
}

/** A customer id the fake treats as nonexistent, to exercise resource_missing. */
export const MISSING_CUSTOMER = 'cus_missing';
/** Stripe's ceiling for amount (eight digits). */
export const MAX_AMOUNT = 99_999_999;

/** Thrown inside validateCreate (and the refund validation in refunds.ts); carries the 400 to answer. */
export class InvalidParam extends Error {
  readonly envelope: ErrorEnvelope;
  constructor(envelope: ErrorEnvelope) {
    super(envelope.error.message);
    this.envelope = envelope;
  }
}

export function invalid(message: string, code: string, param: string): never {
  throw new InvalidParam(errors.invalidRequest(message, code, param));
}

export function stringParam(body: FormObject, name: string): string | null {
  const value = body[name];
  if (value === undefined) return null;
  if (typeof value !== 'string') invalid(`Invalid ${name}: must be a string`, 'parameter_invalid_string', name);
  // stripe-node sends null as an empty string, which Stripe reads as "unset".
  return value === '' ? null : value;
}

function booleanParam(body: FormObject, name: string): boolean {
  const value = stringParam(body, name);
  if (value === null || value === 'false') return false;
  if (value === 'true') return true;
  return invalid(`Invalid boolean: ${value}`, 'parameter_invalid_boolean', name);
}

/**
 * Stripe validates before it executes, and saves no idempotent result when validation fails — so a
 * caller that fixes its parameters may retry with the same key. The codes are Stripe's where the
 * product relies on them (parameter_missing, parameter_invalid_integer, parameter_unknown,
 * resource_missing, amount_too_small/large); the others only need to be invalid_request_error.
 */
export function validateCreate(body: FormObject, context: CreateContext = PLATFORM): Validated {
  try {
    return { ok: true, params: parseCreate(body, context) };
  } catch (error) {
    if (error instanceof InvalidParam) return { ok: false, error: error.envelope };
    throw error;
  }
}

function parseCreate(body: FormObject, context: CreateContext): CreateParams {
  for (const name of Object.keys(body)) {
    if (!KNOWN_CREATE_PARAMS.has(name) && name !== 'payment_method_types') invalid(`Received unknown parameter: ${name}`, 'parameter_unknown', name);
  }

  const amountText = stringParam(body, 'amount') ?? invalid('Missing required param: amount.', 'parameter_missing', 'amount');
  if (!/^-?\d+$/.test(amountText)) invalid(`Invalid integer: ${amountText}`, 'parameter_invalid_integer', 'amount');
  const amount = Number(amountText);
  if (amount < 1) invalid('Amount must be at least 1.', 'amount_too_small', 'amount');
  if (amount > MAX_AMOUNT) invalid(`Amount must be no more than ${MAX_AMOUNT}.`, 'amount_too_large', 'amount');

  const currencyText =
    stringParam(body, 'currency') ?? invalid('Missing required param: currency.', 'parameter_missing', 'currency');
  // Stripe accepts any case and answers lowercase.
  const currency = currencyText.toLowerCase();
  if (!/^[a-z]{3}$/.test(currency)) invalid(`Invalid currency: ${currencyText}`, 'parameter_invalid_string', 'currency');

  const customer = stringParam(body, 'customer');
  if (customer === MISSING_CUSTOMER) throw new InvalidParam(errors.resourceMissing('customer', customer, 'customer'));

  const paymentMethod = stringParam(body, 'payment_method');
  const confirm = booleanParam(body, 'confirm');
  const offSession = offSessionParam(body);
  if (offSession && !confirm) {
    invalid('off_session can only be used with confirm=true.', 'parameter_invalid_boolean', 'off_session');
  }
  if (confirm && paymentMethod === null) {
    invalid('You cannot confirm this PaymentIntent because it is missing a payment method.', 'parameter_missing', 'payment_method');
  }

  // At 2026-10-28.endive a PaymentIntent's payment methods come from automatic payment methods (the
  // Dashboard's payment method settings), narrowed by allowed_/excluded_payment_method_types;
  // `payment_method_types` is refused (stripe-node 23.1.0's PaymentIntentCreateParams no longer has it).
  if (body.payment_method_types !== undefined) {
    invalid(
      'payment_method_types is no longer supported at this API version. Use allowed_payment_method_types or excluded_payment_method_types to choose which payment methods to offer.',
      'payment_method_types_no_longer_supported',
      'payment_method_types',
    );
  }
  const allowedPaymentMethodTypes = stringListParam(body, 'allowed_payment_method_types');
  const excludedPaymentMethodTypes = stringListParam(body, 'excluded_payment_method_types');
  const automatic = automaticPaymentMethodsEnabled(body);
  const errorOnRequiresAction = booleanParam(body, 'error_on_requires_action');
  if (errorOnRequiresAction && automatic) {
    // docs.stripe.com/api/payment_intents/create#create_payment_intent-error_on_requires_action:
    // "This parameter can't be used with automatic_payment_methods".
    invalid(
      'error_on_requires_action cannot be used with automatic_payment_methods. Set automatic_payment_methods[enabled]=false to use it.',
      'parameter_invalid_boolean',
      'error_on_requires_action',
    );
  }
  if (confirm) {
    const type = paymentMethodType(paymentMethod);
    if ((allowedPaymentMethodTypes !== null && !allowedPaymentMethodTypes.includes(type)) || excludedPaymentMethodTypes?.includes(type)) {
      invalid(
        `The PaymentIntent's allowed payment method types do not include the type of payment method ${paymentMethod} (${type}).`,
        'payment_intent_incompatible_payment_method',
        'payment_method',
      );
    }
  }

  const metadata = metadataParam(body);
  // Kept as sent, so that a test can see what the PaymentIntent carries (an empty string is "unset").
  const description = boundedString(body, 'description', DESCRIPTION_MAX_LENGTH);
  const statementDescriptorSuffix = boundedString(body, 'statement_descriptor_suffix', STATEMENT_DESCRIPTOR_SUFFIX_MAX_LENGTH);
  const captureText = stringParam(body, 'capture_method') ?? 'automatic';
  if (!(CAPTURE_METHODS as readonly string[]).includes(captureText)) {
    invalid(`Invalid capture_method: must be one of ${CAPTURE_METHODS.join(', ')}`, 'parameter_invalid_string', 'capture_method');
  }
  const captureMethod = captureText as CreateParams['captureMethod'];
  const { applicationFeeAmount, transferData } = connectParams(body, amount, context);
  return {
    amount,
    currency,
    customer,
    paymentMethod,
    confirm,
    offSession,
    metadata,
    description,
    statementDescriptorSuffix,
    allowedPaymentMethodTypes,
    excludedPaymentMethodTypes,
    errorOnRequiresAction,
    captureMethod,
    applicationFeeAmount,
    transferData,
  };
}

/** A non-negative integer parameter (`application_fee_amount`, `transfer_data[amount]`, `amount_to_capture`); null when absent. */
export function integerParam(value: FormValue | undefined, param: string): number | null {
  if (value === undefined || value === '') return null;
  if (typeof value !== 'string' || !/^\d+$/.test(value)) return invalid(`Invalid integer: ${typeof value === 'string' ? value : param}`, 'parameter_invalid_integer', param);
  return Number(value);
}

/**
 * Connect parameters of a create. `transfer_data[destination]` makes a destination charge: created on
 * the platform, the funds going to that connected account (docs.stripe.com/connect/destination-charges),
 * so it must name one of the platform's connected accounts ("No such destination", resource_missing,
 * as for any id that names nothing). `application_fee_amount` needs a connected account to take the
 * fee from: the request made as one (Stripe-Account, a direct charge: docs.stripe.com/connect/direct-charges)
 * or a destination — Stripe refuses it otherwise ("Can only apply an application_fee when the request
 * is made on behalf of another account (using an OAuth key, the Stripe-Account header, or the
 * destination parameter)", quoted by Stripe staff in stripe-archive/stripe-payments-demo#18 and
 * stripe/stripe-dotnet#936; the PaymentIntent form of the message names transfer_data[destination]).
 * A fee above the amount is refused too (the fee comes out of the payment).
 */
function connectParams(body: FormObject, amount: number, context: CreateContext): Pick<CreateParams, 'applicationFeeAmount' | 'transferData'> {
  const rawTransfer = body.transfer_data;
  let transferData: CreateParams['transferData'] = null;
  if (rawTransfer !== undefined && rawTransfer !== '') {
    if (typeof rawTransfer === 'string') return invalid('Invalid transfer_data: must be an object', 'parameter_invalid_string', 'transfer_data');
    for (const name of Object.keys(rawTransfer)) {
      if (name !== 'destination' && name !== 'amount') invalid(`Received unknown parameter: transfer_data[${name}]`, 'parameter_unknown', `transfer_data[${name}]`);
    }
    const destination = rawTransfer.destination;
    if (typeof destination !== 'string' || destination === '') {
      return invalid('Missing required param: transfer_data[destination].', 'parameter_missing', 'transfer_data[destination]');
    }
    if (!context.isConnectedAccount(destination)) {
      throw new InvalidParam(errors.resourceMissing('destination', destination, 'transfer_data[destination]'));
    }
    const transferAmount = integerParam(rawTransfer.amount, 'transfer_data[amount]');
    if (transferAmount !== null && transferAmount > amount) {
      invalid('transfer_data[amount] must be less than or equal to the amount of the PaymentIntent.', 'parameter_invalid_integer', 'transfer_data[amount]');
    }
    transferData = transferAmount === null ? { destination } : { destination, amount: transferAmount };
  }
  const applicationFeeAmount = integerParam(body.application_fee_amount, 'application_fee_amount');
  if (applicationFeeAmount !== null) {
    if (context.account === null && transferData === null) {
      invalid(
        'Can only apply an application_fee_amount when the PaymentIntent is attempting a direct payment (using an OAuth key or Stripe-Account header) or destination payment (using `transfer_data[destination]`).',
        'parameter_invalid_integer',
        'application_fee_amount',
      );
    }
    if (applicationFeeAmount > amount) {
      invalid('application_fee_amount must be less than or equal to the amount of the PaymentIntent.', 'parameter_invalid_integer', 'application_fee_amount');
    }
  }
  return { applicationFeeAmount, transferData };
}

/** `off_session`: a boolean, or "one_off" / "recurring" (both mean true), as the spec's anyOf has it. */
function offSessionParam(body: FormObject): boolean {
  const value = stringParam(body, 'off_session');
  if (value === 'one_off' || value === 'recurring') return true;
  return booleanParam(body, 'off_session');
}

function automaticPaymentMethodsEnabled(body: FormObject): boolean {
  const apm = body.automatic_payment_methods;
  if (apm === undefined) return true; // the default at this version
  if (typeof apm === 'string') return invalid('Invalid automatic_payment_methods: must be an object', 'parameter_invalid_string', 'automatic_payment_methods');
  const enabled = apm.enabled;
  if (enabled !== 'true' && enabled !== 'false') {
    return invalid('Invalid boolean: automatic_payment_methods[enabled]', 'parameter_invalid_boolean', 'automatic_payment_methods[enabled]');
  }
  return enabled === 'true';
}

/** `name[0]=a&name[1]=b`: a list of strings; null when absent. */
function stringListParam(body: FormObject, name: string): string[] | null {
  const value = body[name];
  if (value === undefined) return null;
  if (typeof value === 'string') return invalid(`Invalid array: ${name}`, 'parameter_invalid_string', name);
  const items = Object.keys(value)
    .sort((a, b) => Number(a) - Number(b))
    .map((k) => value[k]);
  if (items.some((item) => typeof item !== 'string')) return invalid(`Invalid array: ${name}`, 'parameter_invalid_string', name);
  return items as string[];
}

/** A string parameter with Stripe's documented maximum length. */
export function boundedString(body: FormObject, name: string, maxLength: number): string | null {
  const value = stringParam(body, name);
  if (value !== null && value.length > maxLength) {
    invalid(`Invalid ${name}: must be at most ${maxLength} characters`, 'parameter_invalid_string_too_long', name);
  }
  return value;
}

/** `metadata[...]` of a create body (PaymentIntents and Refunds take it alike). */
export function metadataParam(body: FormObject): Record<string, string> {
  const metadata: Record<string, string> = {};
  const rawMetadata = body.metadata;
  if (typeof rawMetadata === 'string') {
    // `metadata=` (empty) clears metadata; anything else is malformed.
    if (rawMetadata !== '') invalid('Invalid metadata: must be an object', 'parameter_invalid_string', 'metadata');
  } else if (rawMetadata !== undefined) {
    for (const [key, value] of Object.entries(rawMetadata)) {
      if (typeof value !== 'string') {
        invalid(`Invalid metadata[${key}]: must be a string`, 'parameter_invalid_string', `metadata[${key}]`);
      }
      if (key.length > METADATA_MAX_KEY_LENGTH) {
        invalid(`Metadata keys can have up to ${METADATA_MAX_KEY_LENGTH} characters: ${key.slice(0, 50)}`, 'parameter_invalid_string_too_long', `metadata[${key}]`);
      }
      if (value.length > METADATA_MAX_VALUE_LENGTH) {
        invalid(`Metadata values can have up to ${METADATA_MAX_VALUE_LENGTH} characters (metadata[${key}])`, 'parameter_invalid_string_too_long', `metadata[${key}]`);
      }
      if (value !== '') metadata[key] = value; // an empty value unsets the key
    }
    if (Object.keys(metadata).length > METADATA_MAX_KEYS) {
      invalid(`You can have up to ${METADATA_MAX_KEYS} metadata keys`, 'parameter_invalid_metadata', 'metadata');
    }
  }
  return metadata;
}

/** metadata[key] of a raw body, valid or not — for matching faults and logging before validation. */
export function metadataValue(body: FormObject, key: string): string | null {
  const metadata = body.metadata;
  if (metadata === undefined || typeof metadata === 'string') return null;
  const value = metadata[key];
  return typeof value === 'string' && value !== '' ? value : null;
}

// ------------------------------------------------------------------------- payment-method behaviours

export type CardOutcome =
  | { readonly kind: 'status'; readonly status: PaymentIntentStatus }
  | { readonly kind: 'decline'; readonly code: string; readonly declineCode: string; readonly message: string };

const GENERIC_DECLINE = { kind: 'decline', code: 'card_declined', declineCode: 'generic_decline', message: 'Your card was declined.' } as const;
const INSUFFICIENT_FUNDS = {
  kind: 'decline',
  code: 'card_declined',
  declineCode: 'insufficient_funds',
  message: 'Your card has insufficient funds.',
} as const;
/**
 * An off-session payment (or error_on_requires_action) with a card whose bank asks for
 * authentication: Stripe fails it — 402 card_error, code `authentication_required`, the PaymentIntent
 * `requires_payment_method` and `payment_intent.payment_failed` (docs.stripe.com/payments/save-and-reuse,
 * "When a payment attempt fails, the request also fails with a 402 HTTP status code and the status of
 * the PaymentIntent is requires_payment_method"; docs.stripe.com/declines/codes authentication_required).
 */
const AUTHENTICATION_REQUIRED = {
  kind: 'decline',
  code: 'authentication_required',
  declineCode: 'authentication_required',
  message: 'Your card was declined. This transaction requires authentication.',
} as const;

/** Stripe's test payment methods; anything unlisted succeeds (an async one after `processing`). */
const PAYMENT_METHOD_OUTCOMES: Readonly<Record<string, CardOutcome>> = {
  pm_card_chargeDeclined: GENERIC_DECLINE,
  pm_card_visa_chargeDeclined: GENERIC_DECLINE,
  pm_card_insufficientFunds: INSUFFICIENT_FUNDS,
  pm_card_visa_chargeDeclinedInsufficientFunds: INSUFFICIENT_FUNDS,
  pm_card_authenticationRequired: { kind: 'status', status: 'requires_action' },
};

export function cardOutcome(params: CreateParams): CardOutcome {
  if (!params.confirm) {
    // Not confirmed: nothing is charged yet.
    return { kind: 'status', status: params.paymentMethod === null ? 'requires_payment_method' : 'requires_confirmation' };
  }
  if (isAsyncPaymentMethodType(paymentMethodType(params.paymentMethod))) return { kind: 'status', status: 'processing' };
  const outcome = PAYMENT_METHOD_OUTCOMES[params.paymentMethod ?? ''] ?? { kind: 'status', status: 'succeeded' };
  // No customer is there to authenticate: the payment fails instead of waiting for an action.
  if (outcome.kind === 'status' && outcome.status === 'requires_action' && (params.offSession || params.errorOnRequiresAction)) {
    return AUTHENTICATION_REQUIRED;
  }
  return outcome;
}

export const DECLINE_FAULT_OUTCOME: CardOutcome = GENERIC_DECLINE;

// ------------------------------------------------------------------------------------------- search

export type SearchClause =
  | { readonly field: 'status'; readonly value: string }
  | { readonly field: 'metadata'; readonly key: string; readonly value: string };

export type ParsedQuery =
  | { readonly ok: true; readonly clauses: readonly SearchClause[] }
  | { readonly ok: false; readonly message: string };

/**
 * The subset of Stripe's Search query language the product uses: exact-match clauses
 * `metadata['key']:'value'` and `status:'value'` joined by AND (either quote style, `\` escapes).
 * Anything else (OR, negation, ~, ranges, other fields) is refused loudly rather than misread.
 */
export function parseSearchQuery(query: string): ParsedQuery {
  const clause =
    /\s*(?:(status)|metadata\[(?:'((?:\\.|[^'\\])*)'|"((?:\\.|[^"\\])*)")\])\s*:\s*(?:'((?:\\.|[^'\\])*)'|"((?:\\.|[^"\\])*)")\s*/y;
  const and = /AND(?=\s)/y;
  const unescape = (s: string): string => s.replace(/\\(.)/g, '$1');
  const clauses: SearchClause[] = [];
  let position = 0;
  for (;;) {
    clause.lastIndex = position;
    const m = clause.exec(query);
    if (m === null) {
      return {
        ok: false,
        message:
          `Unsupported search query at position ${position}: ${JSON.stringify(query)}. ` +
          "The fake supports metadata['key']:'value' and status:'value' joined by AND.",
      };
    }
    const value = unescape(m[4] ?? m[5] ?? '');
    if (m[1] === 'status') clauses.push({ field: 'status', value });
    else clauses.push({ field: 'metadata', key: unescape(m[2] ?? m[3] ?? ''), value });
    position = clause.lastIndex;
    if (position === query.length) return { ok: true, clauses };
    and.lastIndex = position;
    if (and.exec(query) === null) {
      return { ok: false, message: `Unsupported search query: expected AND at position ${position} of ${JSON.stringify(query)}` };
    }
    position = and.lastIndex;
  }
}

export function clauseMatches(clause: SearchClause, pi: PaymentIntentJson): boolean {
  return clause.field === 'status' ? pi.status === clause.value : pi.metadata[clause.key] === clause.value;
}

/** metadata[key] named by a search query, for matching faults and holds. */
export function queryMetadata(clauses: readonly SearchClause[], key: string): string | null {
  for (const c of clauses) if (c.field === 'metadata' && c.key === key) return c.value;
  return null;
}

/** Search pages are cursors ("older than PaymentIntent #n"), so new PaymentIntents never shift a page. */
export function encodePage(beforeSeq: number): string {
  return `page_${Buffer.from(`before:${beforeSeq}`).toString('base64url')}`;
}

export function decodePage(page: string): number | null {
  if (!page.startsWith('page_')) return null;
  const m = /^before:(\d+)$/.exec(Buffer.from(page.slice(5), 'base64url').toString('utf8'));
  return m === null ? null : Number(m[1]);
}
