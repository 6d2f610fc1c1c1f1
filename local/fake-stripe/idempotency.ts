// Stripe's idempotency layer, per key: first request executes and its answer is stored with a
// fingerprint of its parameters; later requests with the key get that answer replayed verbatim.
//
//   t ─────────────────────────────────────────────────────────────────────────────────────────▶
//   A: key K ──lock──[ executing ........ ]──store(status, body)──▶ answer (maybe lost!)
//   B: key K, same params        ──▶ 409 idempotency_key_in_use (A still in flight, nothing stored)
//   C: key K, same params                                      ──▶ stored answer, Idempotent-Replayed
//   D: key K, other params                                     ──▶ 400 idempotency_error
//   after pruning K: E: key K ──▶ executes AGAIN (a second charge) — the danger the product guards against
//
// Validation failures, 429s and auth errors never reach store(), so they are never replayed.

/** An answer as it was first given; replays send exactly this status and body. */
export interface StoredResponse {
  readonly status: number;
  readonly body: string;
  /** The Request-Id of the request that executed (sent back as Original-Request on replays). */
  readonly requestId: string;
  /** The PaymentIntent the execution created (for a refund: the one refunded), if any (for matching replays and bookkeeping). */
  readonly paymentIntentId: string | null;
  /** The Refund the execution created, if any (refund creates only). */
  readonly refundId?: string | null;
}

/** An in-flight or completed key; callers hold it between lock() and complete()/abandon(). */
export interface KeyEntry {
  readonly key: string;
  /** The account the key belongs to: '' the platform, else the Stripe-Account it was sent as. */
  readonly scope: string;
  readonly fingerprint: string;
  /** When the key was first used: what "older than" means for pruning. */
  readonly firstUsedAtMs: number;
  response: StoredResponse | null;
}

export type Lookup =
  | { readonly kind: 'new' }
  | { readonly kind: 'replay'; readonly response: StoredResponse }
  | { readonly kind: 'mismatch' }
  | { readonly kind: 'in_flight' };

export class IdempotencyStore {
  #entries = new Map<string, KeyEntry>();
  #pruned = 0;

  /**
   * Keys are per account: a request made as a connected account (Stripe-Account) is that account's
   * request (docs.stripe.com/connect/authentication: the header makes the call "for" the connected
   * account, as if it made it itself), so the same key sent as another account, or as the platform,
   * is another key. `scope`: '' for the platform, else the account id.
   */
  lookup(key: string, fingerprint: string, scope = ''): Lookup {
    const entry = this.#entries.get(scoped(scope, key));
    if (entry === undefined) return { kind: 'new' };
    // Stripe compares parameters before it looks at the state of the first request.
    if (entry.fingerprint !== fingerprint) return { kind: 'mismatch' };
    if (entry.response === null) return { kind: 'in_flight' };
    return { kind: 'replay', response: entry.response };
  }

  /** Marks the key in flight. Must follow a lookup() that said 'new' with no await in between. */
  lock(key: string, fingerprint: string, nowMs: number, scope = ''): KeyEntry {
    const entry: KeyEntry = { key, scope, fingerprint, firstUsedAtMs: nowMs, response: null };
    this.#entries.set(scoped(scope, key), entry);
    return entry;
  }

  /** Stores the answer of the request holding `entry` (a no-op if the key was pruned or reset meanwhile). */
  complete(entry: KeyEntry, response: StoredResponse): void {
    if (this.#entries.get(scoped(entry.scope, entry.key)) === entry) entry.response = response;
  }

  /** Drops an in-flight lock without storing anything (the server closed or was reset mid-request). */
  abandon(entry: KeyEntry): void {
    if (this.#entries.get(scoped(entry.scope, entry.key)) === entry && entry.response === null) this.#entries.delete(scoped(entry.scope, entry.key));
  }

  /** Forgets completed keys; in-flight keys stay (Stripe prunes by age, and an in-flight key is young). */
  prune(nowMs: number, filter: { readonly olderThanMs?: number; readonly idempotencyKey?: string } = {}): number {
    let count = 0;
    for (const [mapKey, entry] of this.#entries) {
      if (entry.response === null) continue;
      if (filter.idempotencyKey !== undefined && entry.key !== filter.idempotencyKey) continue;
      if (filter.olderThanMs !== undefined && nowMs - entry.firstUsedAtMs <= filter.olderThanMs) continue;
      this.#entries.delete(mapKey);
      count += 1;
    }
    this.#pruned += count;
    return count;
  }

  get size(): number {
    return this.#entries.size;
  }

  get pruned(): number {
    return this.#pruned;
  }

  clear(): void {
    this.#entries.clear();
    this.#pruned = 0;
  }
}

/** The map key of an idempotency key within its account (a NUL cannot occur in a header value). */
function scoped(scope: string, key: string): string {
  return scope === '' ? key : `${scope}\u0000${key}`;
}
