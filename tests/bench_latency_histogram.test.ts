/**
 * The latency scenario's bookkeeping: the histogram its worker processes count samples in
 * (`bench/lib/latency_histogram.ts`) gives the percentiles that sorting the same samples,
 * rounded to 10 µs, gives, across processes merged, with the maximum exact; and the kernel
 * threads' use between two readings (`bench/lib/kernel_threads.ts`).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import process from "node:process";
import { LatencyHistogram } from "../bench/lib/latency_histogram.ts";
import {
  describeKernelThreads,
  kernelThreadsBetween,
  kernelThreadTotals,
} from "../bench/lib/kernel_threads.ts";
import { distribution } from "../bench/lib/stats.ts";

/** A deterministic stream of latencies: mostly under a millisecond, a tail, some beyond 2 s. */
function samples(count: number, seed: number): number[] {
  let state = seed;
  const next = () => (state = (state * 1103515245 + 12345) % 2147483648) / 2147483648;
  return Array.from({ length: count }, () => {
    const u = next();
    if (u < 0.001) return 2000 + next() * 500; // beyond the buckets
    if (u < 0.02) return 5 + next() * 60; // the tail
    return next() * 1.5;
  });
}

test("percentiles are those of the samples rounded to 10 µs, merged across processes", () => {
  const all = samples(50_000, 7);
  const parts = [new LatencyHistogram(), new LatencyHistogram(), new LatencyHistogram()];
  all.forEach((ms, i) => parts[i % 3].record(ms));
  const merged = new LatencyHistogram();
  for (const part of parts) merged.merge(part.data());

  const rounded = all.map((ms) => (ms < 2000 ? Math.round(ms * 100) / 100 : ms));
  const expected = distribution(rounded);
  const got = merged.distribution();
  assert.equal(got.count, all.length);
  for (const key of ["p50", "p90", "p99", "p999"] as const) {
    assert.ok(Math.abs(got[key] - expected[key]) < 1e-9, `${key}: ${got[key]} vs ${expected[key]}`);
  }
  assert.equal(got.max, Math.max(...all), "the maximum is exact");
});

test("a histogram crosses the pipe small and starts again empty after clear()", () => {
  const histogram = new LatencyHistogram();
  for (const ms of samples(75_000, 3)) histogram.record(ms);
  const text = JSON.stringify(histogram.data());
  assert.ok(text.length < 75_000 * 2, `${text.length} characters for 75,000 samples`);
  histogram.record(-0.01); // clocks a hair apart: counts as 0
  assert.equal(histogram.count, 75_001);
  histogram.clear();
  assert.equal(histogram.count, 0);
  assert.ok(Number.isNaN(histogram.distribution().p99));
  histogram.record(3.004);
  assert.deepEqual(histogram.distribution(), {
    count: 1,
    p50: 3,
    p90: 3,
    p99: 3,
    p999: 3,
    max: 3.004,
  });
});

test("kernel threads' use between two readings: the most first, new threads from zero", () => {
  const before = new Map([
    ["kdamond.0", { cpuMs: 1000, wakeups: 50 }],
    ["kworker", { cpuMs: 500, wakeups: 900 }],
  ]);
  const after = new Map([
    ["kdamond.0", { cpuMs: 1120, wakeups: 68 }],
    ["kworker", { cpuMs: 520, wakeups: 950 }],
    ["ksoftirqd", { cpuMs: 30, wakeups: 4 }],
  ]);
  const used = kernelThreadsBetween(before, after, 25);
  assert.deepEqual(used, [
    { name: "kdamond.0", cpuMs: 120, wakeups: 18 },
    { name: "ksoftirqd", cpuMs: 30, wakeups: 4 },
  ]);
  assert.equal(
    describeKernelThreads(used),
    "kdamond.0 120 ms in 18 wake-ups (6.7 ms each), ksoftirqd 30 ms in 4 wake-ups (7.5 ms each)",
  );
  const totals = kernelThreadTotals();
  if (process.platform === "linux") assert.ok(totals instanceof Map);
});
