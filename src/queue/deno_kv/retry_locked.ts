/**
 * Deno KV calls retried while SQLite answers `database is locked`: another connection holds the
 * file's write lock (another process of a shared flow committing, or one stopped mid-commit),
 * and nothing was applied, so trying again is safe.
 *
 * @module
 */

import { isKvLockedError } from "./port.ts";

/** Retries of a commit (or read) refused with `database is locked`. */
export const LOCK_RETRY_ATTEMPTS = 12;

/**
 * Run `operation`, again while it fails with `database is locked` (nothing was applied), with
 * jittered exponential backoff: 2 ms doubling to 250 ms, a random fraction of each. With a
 * `signal`, until it aborts; without, up to {@linkcode LOCK_RETRY_ATTEMPTS} attempts.
 *
 * @example
 * ```ts
 * import { retryLocked } from "./retry_locked.ts";
 * let calls = 0;
 * const value = await retryLocked(() => {
 *   if (++calls < 3) return Promise.reject(new TypeError("database is locked"));
 *   return Promise.resolve("done");
 * });
 * console.assert(value === "done" && calls === 3);
 * ```
 */
export async function retryLocked<T>(
  operation: () => Promise<T>,
  signal?: AbortSignal,
): Promise<T> {
  for (let attempt = 1;; attempt++) {
    try {
      return await operation();
    } catch (error) {
      if (!isKvLockedError(error) || (!signal && attempt >= LOCK_RETRY_ATTEMPTS)) throw error;
      signal?.throwIfAborted();
      const ceiling = Math.min(250, 2 * 2 ** attempt);
      await new Promise((resolve) => setTimeout(resolve, ceiling * (0.5 + Math.random() / 2)));
    }
  }
}
