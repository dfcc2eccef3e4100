/**
 * Reconnect delays: exponential growth from `initial` to `max`, with random jitter so that a
 * pool of workers cut off together does not reconnect in lockstep.
 *
 * @module
 */

import { durationOption } from "../core/options.ts";

/** Reconnect backoff options. */
export interface BackoffOptions {
  /** Delay before the first reconnect, ms. Default 250. */
  readonly initial?: number;
  /** Largest delay, ms. Default 30,000. */
  readonly max?: number;
  /** Fraction of each delay that is random: 0 = none, 1 = anywhere from 0 to the delay. Default 0.5. */
  readonly jitter?: number;
}

/** Backoff options with defaults applied. */
export interface Backoff {
  readonly initial: number;
  readonly max: number;
  readonly jitter: number;
}

/**
 * Validate backoff options and apply the defaults.
 *
 * @example
 * ```ts
 * import { resolveBackoff } from "./backoff.ts";
 * console.assert(resolveBackoff("connectWorker", { initial: 100 }).max === 30_000);
 * ```
 */
export function resolveBackoff(owner: string, options: BackoffOptions = {}): Backoff {
  const initial = durationOption(owner, "backoff.initial", options.initial, 250, 1, 3_600_000);
  const max = durationOption(owner, "backoff.max", options.max, 30_000, initial, 3_600_000);
  const jitter = options.jitter ?? 0.5;
  if (typeof jitter !== "number" || !(jitter >= 0 && jitter <= 1)) {
    throw new RangeError(
      `Cannot create ${owner}: option "backoff.jitter" must be a number in 0..1, got ${jitter}`,
    );
  }
  return { initial, max, jitter };
}

/**
 * The delay before reconnect attempt `attempt` (1 for the first), given a uniform random number
 * in [0, 1): `min(max, initial * 2^(attempt - 1))`, of which the `jitter` fraction is random.
 *
 * @example
 * ```ts
 * import { backoffDelay } from "./backoff.ts";
 * const backoff = { initial: 100, max: 1000, jitter: 0.5 };
 * console.assert(backoffDelay(1, backoff, 0) === 100);
 * console.assert(backoffDelay(3, backoff, 0.5) === 300); // 400, a quarter of it taken off
 * console.assert(backoffDelay(10, backoff, 0) === 1000);
 * ```
 */
export function backoffDelay(attempt: number, backoff: Backoff, random: number): number {
  const exponent = Math.min(Math.max(0, attempt - 1), 52);
  const base = Math.min(backoff.max, backoff.initial * 2 ** exponent);
  return Math.round(base * (1 - backoff.jitter * random));
}
