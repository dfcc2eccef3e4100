/**
 * A histogram of durations with fixed bucket bounds, as Prometheus shows one: how many
 * observations fell at or below each bound, their sum and their count. Observing is a short
 * scan over at most a few dozen bounds and allocates nothing, so it can sit on a busy path.
 *
 * @module
 */

/** Bucket bounds for latencies in seconds: 1 ms to 5 minutes. */
export const LATENCY_BUCKETS: readonly number[] = [
  0.001,
  0.0025,
  0.005,
  0.01,
  0.025,
  0.05,
  0.1,
  0.25,
  0.5,
  1,
  2.5,
  5,
  10,
  30,
  60,
  300,
];

/** What a histogram holds at one moment. */
export interface HistogramSnapshot {
  /** The upper bounds, ascending (the `+Inf` bucket is implicit). */
  readonly bounds: readonly number[];
  /** Observations at or below each bound, cumulative, one per bound. */
  readonly cumulative: readonly number[];
  /** Every observation, the `+Inf` bucket. */
  readonly count: number;
  /** The sum of the observed values. */
  readonly sum: number;
}

/**
 * A histogram with fixed bounds.
 *
 * @example
 * ```ts
 * import { Histogram } from "./histogram.ts";
 * const histogram = new Histogram([0.1, 1]);
 * histogram.observe(0.05);
 * histogram.observe(0.5, 2);
 * const { cumulative, count, sum } = histogram.snapshot();
 * console.assert(cumulative.join() === "1,3" && count === 3 && sum === 1.05);
 * ```
 */
export class Histogram {
  readonly #bounds: readonly number[];
  /** Observations per bucket, not cumulative; the last one is `+Inf`. */
  readonly #counts: number[];
  #sum = 0;

  /** A histogram with these ascending, finite upper bounds. */
  constructor(bounds: readonly number[] = LATENCY_BUCKETS) {
    if (
      bounds.length === 0 ||
      !bounds.every((b, i) => Number.isFinite(b) && (i === 0 || b > bounds[i - 1]))
    ) {
      throw new RangeError("Cannot create a Histogram: bounds must be finite and ascending");
    }
    this.#bounds = [...bounds];
    this.#counts = new Array(bounds.length + 1).fill(0);
  }

  /** Record `value` (`times` times: a batch of equal observations). NaN is ignored. */
  observe(value: number, times = 1): void {
    if (Number.isNaN(value) || !(times > 0)) return;
    const bounds = this.#bounds;
    let i = 0;
    while (i < bounds.length && value > bounds[i]) i++;
    this.#counts[i] += times;
    this.#sum += value * times;
  }

  /** The histogram now. */
  snapshot(): HistogramSnapshot {
    const cumulative: number[] = [];
    let running = 0;
    for (let i = 0; i < this.#bounds.length; i++) {
      running += this.#counts[i];
      cumulative.push(running);
    }
    return {
      bounds: this.#bounds,
      cumulative,
      count: running + this.#counts[this.#bounds.length],
      sum: this.#sum,
    };
  }
}
