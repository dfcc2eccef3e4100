/**
 * Throughput over the last minutes, one value a second per series, kept in a ring: what the
 * dashboard's chart draws.
 *
 * It is fed by sampling cumulative counters (`sample(now, totals)`), never by a timer of its
 * own, so nothing runs while nobody works and nobody watches. Whoever samples does so at most
 * about once a second and *before* counting the event that triggered it; what a counter grew
 * by since the previous sample is spread evenly over the seconds in between (with sampling on
 * every event that is at most two seconds; after a quiet spell during which nobody sampled,
 * the chart shows the average over it).
 *
 * @module
 */

/** A window of per-second values, oldest first. */
export interface RateSeries<K extends string> {
  /** The second (Unix time, whole seconds) of the last value: the last complete second. */
  readonly end: number;
  /** How many seconds the series cover. */
  readonly seconds: number;
  /** Per series, how much it grew in each second, oldest first. */
  readonly values: Readonly<Record<K, readonly number[]>>;
}

/**
 * Per-second growth of a few cumulative counters.
 *
 * @example
 * ```ts
 * import { RateHistory } from "./rate_history.ts";
 * const history = new RateHistory(["done"], 60);
 * history.sample(10_000, { done: 0 });
 * history.sample(11_000, { done: 5 }); // 5 more in the second starting at 10 s
 * const series = history.series(12_500);
 * console.assert(series.end === 11 && series.values.done.at(-1) === 5);
 * ```
 */
export class RateHistory<K extends string> {
  readonly #keys: readonly K[];
  readonly #seconds: number;
  readonly #buckets: Map<K, Float64Array>;
  #lastSecond: number | undefined;
  #lastTotals: Record<K, number> | undefined;

  /** A history of the series `keys` over the last `seconds` seconds. */
  constructor(keys: readonly K[], seconds = 300) {
    if (!Number.isInteger(seconds) || seconds < 2 || seconds > 86_400) {
      throw new RangeError("Cannot create a RateHistory: seconds must be an integer of 2..86400");
    }
    this.#keys = [...keys];
    this.#seconds = seconds;
    this.#buckets = new Map(keys.map((key) => [key, new Float64Array(seconds)]));
  }

  /** Whether a sample now would start a new second (cheap: callers check before sampling). */
  due(now: number): boolean {
    return this.#lastSecond === undefined || Math.floor(now / 1000) > this.#lastSecond;
  }

  /** Record the counters' values at `now` (Unix ms); their growth fills the seconds since. */
  sample(now: number, totals: Readonly<Record<K, number>>): void {
    const second = Math.floor(now / 1000);
    const last = this.#lastSecond;
    const previous = this.#lastTotals;
    this.#lastTotals = { ...totals };
    if (last === undefined || previous === undefined || second < last) {
      // The first sample, or the wall clock went back: start afresh.
      for (const bucket of this.#buckets.values()) bucket.fill(0);
      this.#lastSecond = second;
      return;
    }
    const gap = second - last;
    const n = this.#seconds;
    for (const key of this.#keys) {
      const bucket = this.#buckets.get(key)!;
      // A counter that went down was reset (a new controller): count from zero.
      const grown = totals[key] >= previous[key] ? totals[key] - previous[key] : totals[key];
      if (gap === 0) {
        bucket[slot(second, n)] += grown;
        continue;
      }
      for (let s = Math.max(last + 1, second - n + 1); s <= second; s++) bucket[slot(s, n)] = 0;
      // What grew happened between the two samples: spread it over the seconds they span.
      const share = grown / gap;
      for (let s = Math.max(last, second - n + 1); s < second; s++) bucket[slot(s, n)] += share;
    }
    this.#lastSecond = second;
  }

  /** The complete seconds up to `now` (Unix ms), oldest first. */
  series(now: number): RateSeries<K> {
    const end = Math.floor(now / 1000) - 1;
    const n = this.#seconds;
    const last = this.#lastSecond;
    const values = {} as Record<K, number[]>;
    for (const key of this.#keys) {
      const bucket = this.#buckets.get(key)!;
      const out: number[] = new Array(n);
      for (let i = 0; i < n; i++) {
        const s = end - n + 1 + i;
        // Seconds after the last sample saw nothing yet; older ones than the ring are gone.
        const known = last !== undefined && s <= last && s > last - n;
        out[i] = known ? round(bucket[slot(s, n)]) : 0;
      }
      values[key] = out;
    }
    return { end, seconds: n, values };
  }
}

/** The ring index of second `s` (seconds before 1970 too, for tests with small clocks). */
function slot(s: number, n: number): number {
  return ((s % n) + n) % n;
}

function round(value: number): number {
  return Math.round(value * 100) / 100;
}
