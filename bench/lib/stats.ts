/**
 * Small statistics for benchmark samples: medians of rounds and latency percentiles.
 *
 * @module
 */

/** The median (the mean of the two middle values for an even count). */
export function median(values: readonly number[]): number {
  if (values.length === 0) return Number.NaN;
  const sorted = values.toSorted((a, b) => a - b);
  const middle = sorted.length >> 1;
  return sorted.length % 2 === 1 ? sorted[middle] : (sorted[middle - 1] + sorted[middle]) / 2;
}

/** The nearest-rank percentile `p` (0..100) of already sorted values. */
export function percentileSorted(sorted: ArrayLike<number>, p: number): number {
  if (sorted.length === 0) return Number.NaN;
  const rank = Math.ceil((p / 100) * sorted.length);
  return sorted[Math.min(sorted.length - 1, Math.max(0, rank - 1))];
}

/** p50, p90, p99, p99.9 and max of a set of samples. */
export interface Distribution {
  readonly count: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly p999: number;
  readonly max: number;
}

/** The distribution of `samples` (which it sorts in place). */
export function distribution(samples: Float64Array | number[]): Distribution {
  const sorted = samples instanceof Float64Array ? samples.sort() : samples.sort((a, b) => a - b);
  return {
    count: sorted.length,
    p50: percentileSorted(sorted, 50),
    p90: percentileSorted(sorted, 90),
    p99: percentileSorted(sorted, 99),
    p999: percentileSorted(sorted, 99.9),
    max: sorted.length ? sorted[sorted.length - 1] : Number.NaN,
  };
}

/** `d` with every figure rounded to `digits` decimals (for results files). */
export function roundedDistribution(d: Distribution, digits = 3): Distribution {
  return {
    count: d.count,
    p50: round(d.p50, digits),
    p90: round(d.p90, digits),
    p99: round(d.p99, digits),
    p999: round(d.p999, digits),
    max: round(d.max, digits),
  };
}

/** Round to `digits` decimals (for results files). */
export function round(value: number, digits = 0): number {
  const scale = 10 ** digits;
  return Math.round(value * scale) / scale;
}
