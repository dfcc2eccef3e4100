/**
 * The slice of the Deno KV API the work queue adapter uses, as structural types (so `Deno.Kv`
 * and npm `@deno/kv` both fit and no Deno type is needed to compile), plus Deno KV's per-commit
 * limits and an atomic commit that counts against them.
 *
 * @module
 */

/** One part of a Deno KV key, restricted to the kinds that can be stored. */
export type KvKeyPart = Uint8Array | string | number | bigint | boolean;

/** A Deno KV key: an array of parts. */
export type KvKey = readonly KvKeyPart[];

/** An entry read from KV: `versionstamp` is null when the key does not exist. */
export interface KvEntryLike {
  /** The key. */
  readonly key: readonly unknown[];
  /** The value, or null. */
  readonly value: unknown;
  /** The versionstamp, or null when absent. */
  readonly versionstamp: string | null;
}

/** A versionstamp check inside an atomic commit (null: the key must not exist). */
export interface KvCheckLike {
  /** The key. */
  readonly key: KvKey;
  /** The expected versionstamp. */
  readonly versionstamp: string | null;
}

/** The part of `Deno.AtomicOperation` the adapter uses. */
export interface KvAtomicLike {
  /** Adds versionstamp checks. */
  check(...checks: KvCheckLike[]): KvAtomicLike;
  /** Adds a set mutation; `expireIn` (ms) lets the store delete the key some time after. */
  set(key: KvKey, value: Uint8Array, options?: { readonly expireIn?: number }): KvAtomicLike;
  /** Adds a delete mutation. */
  delete(key: KvKey): KvAtomicLike;
  /** Commits: `{ ok: false }` when a check failed (nothing was written). */
  commit(): Promise<{ readonly ok: true; readonly versionstamp: string } | { readonly ok: false }>;
}

/** The part of `Deno.Kv` (or npm `@deno/kv`) the adapter uses. */
export interface KvLike {
  /** Reads up to 10 keys consistently. */
  getMany(keys: readonly KvKey[]): Promise<readonly KvEntryLike[]>;
  /**
   * Lists the keys under a prefix in key order, or the reverse (consistent only within one
   * batch), up to `limit` of them.
   */
  list(
    selector: { readonly prefix: KvKey },
    options?: { readonly batchSize?: number; readonly reverse?: boolean; readonly limit?: number },
  ): AsyncIterable<KvEntryLike>;
  /** Starts an atomic commit. */
  atomic(): KvAtomicLike;
}

/**
 * Deno KV's limits (measured on Deno 2.9): per value, per key, and per atomic commit. A commit's
 * mutation bytes count each check key and mutation key once, plus key and value again for each
 * set; its key bytes count the keys of sets only.
 *
 * @example
 * ```ts
 * import { KV_LIMITS } from "./port.ts";
 * console.assert(KV_LIMITS.maxMutationBytes === 800 * 1024);
 * ```
 */
export const KV_LIMITS = {
  maxValueBytes: 65_536,
  maxKeyBytes: 2_048,
  maxChecks: 100,
  maxMutations: 1_000,
  maxMutationBytes: 819_200,
  maxSetKeyBytes: 81_920,
  maxGetMany: 10,
  maxListBatch: 500,
} as const;

/**
 * An atomic commit that counts what Deno KV counts, so that an oversized commit fails with a
 * clear RangeError before it reaches the backend. Callers pass each key's encoded size.
 *
 * @example Count a commit
 * ```ts
 * import { MeasuredAtomic } from "./port.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const atomic = new MeasuredAtomic(kv.atomic())
 *   .check(["epoch"], 7, null)
 *   .set(["job", 1], 12, new Uint8Array(10));
 * atomic.assertFits();
 * console.assert((await atomic.commit()).ok);
 * kv.close();
 * ```
 */
export class MeasuredAtomic {
  readonly #op: KvAtomicLike;
  #checks = 0;
  #mutations = 0;
  #bytes = 0;
  #setKeyBytes = 0;

  /** Wraps a fresh atomic operation. */
  constructor(op: KvAtomicLike) {
    this.#op = op;
  }

  /** Adds a versionstamp check. */
  check(key: KvKey, keySize: number, versionstamp: string | null): this {
    this.#checks += 1;
    this.#bytes += keySize;
    this.#op.check({ key, versionstamp });
    return this;
  }

  /** Adds a set, optionally expiring `expireIn` ms later. */
  set(key: KvKey, keySize: number, value: Uint8Array, expireIn?: number): this {
    this.#mutations += 1;
    this.#bytes += 2 * keySize + value.length;
    this.#setKeyBytes += keySize;
    if (expireIn === undefined) this.#op.set(key, value);
    else this.#op.set(key, value, { expireIn });
    return this;
  }

  /** Adds a delete. */
  delete(key: KvKey, keySize: number): this {
    this.#mutations += 1;
    this.#bytes += keySize;
    this.#op.delete(key);
    return this;
  }

  /** Throws RangeError when the commit would exceed a Deno KV limit. */
  assertFits(): void {
    const over = [
      [this.#checks, KV_LIMITS.maxChecks, "checks"],
      [this.#mutations, KV_LIMITS.maxMutations, "mutations"],
      [this.#bytes, KV_LIMITS.maxMutationBytes, "mutation bytes"],
      [this.#setKeyBytes, KV_LIMITS.maxSetKeyBytes, "key bytes"],
    ].find(([count, max]) => count > max);
    if (over) {
      throw new RangeError(
        `Cannot commit: the write needs ${over[0]} ${over[2]}, Deno KV allows ${over[1]}`,
      );
    }
  }

  /** Commits. */
  commit(): ReturnType<KvAtomicLike["commit"]> {
    return this.#op.commit();
  }
}

/**
 * True for SQLite's `database is locked`: another process held the file, nothing was applied,
 * and the call may be retried.
 *
 * @example
 * ```ts
 * import { isKvLockedError } from "./port.ts";
 * console.assert(isKvLockedError(new TypeError("database is locked")));
 * ```
 */
export function isKvLockedError(error: unknown): boolean {
  return error instanceof Error && /database is locked/i.test(error.message);
}
