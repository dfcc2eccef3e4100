/**
 * A token bucket: the rate limit the socket edge puts on each connection's inbound frames.
 *
 * The bucket holds up to `burst` tokens and refills at `rate` tokens a second; every frame takes
 * one. An honest worker sends a few frames per job at most — usually far fewer, since its
 * confirmations are cumulative and a held `ack` is dropped when a `request` follows — so it stays
 * far below any sensible rate, while a connection that floods runs the bucket dry within `burst`
 * frames and is closed. The decision costs two multiplications and no allocation, so it can run
 * before a frame is even parsed.
 *
 * Time comes from the caller (milliseconds), so the bucket is exact under a simulated clock.
 *
 * @module
 */

/**
 * A token bucket of `burst` tokens refilled at `rate` per second.
 *
 * @example Ten frames at once pass, the eleventh is refused, and time refills the bucket
 * ```ts
 * import { TokenBucket } from "./token_bucket.ts";
 * const bucket = new TokenBucket(100, 10, 0);
 * for (let i = 0; i < 10; i++) console.assert(bucket.take(0));
 * console.assert(!bucket.take(0));
 * console.assert(bucket.take(10)); // 10 ms at 100/s gives back one token
 * ```
 */
export class TokenBucket {
  readonly #perMs: number;
  readonly #burst: number;
  #tokens: number;
  #last: number;

  /** A full bucket at time `now` (ms). */
  constructor(rate: number, burst: number, now: number) {
    this.#perMs = rate / 1000;
    this.#burst = burst;
    this.#tokens = burst;
    this.#last = now;
  }

  /** Take one token at time `now` (ms); false when the bucket is empty. */
  take(now: number): boolean {
    if (now > this.#last) {
      this.#tokens = Math.min(this.#burst, this.#tokens + (now - this.#last) * this.#perMs);
      this.#last = now;
    }
    if (this.#tokens < 1) return false;
    this.#tokens -= 1;
    return true;
  }
}
