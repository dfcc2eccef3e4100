/**
 * The latency scenario's bookkeeping: the histogram its worker processes count samples in
 * (`bench/lib/latency_histogram.ts`) gives the percentiles that sorting the same samples,
 * rounded to 10 µs, gives, across processes merged, with the maximum exact; the kernel threads'
 * use between two readings (`bench/lib/kernel_threads.ts`); and the run-queue meter of the
 * benchmark's own threads (`bench/lib/run_queue.ts`).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import process from "node:process";
import { LatencyHistogram } from "../bench/lib/latency_histogram.ts";
import {
  describeKernelThreads,
  kernelThreadsBetween,
  kernelThreadTotals,
} from "../bench/lib/kernel_threads.ts";
import { describeRunQueue, RunQueueMeter, threadTime } from "../bench/lib/run_queue.ts";
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

test("the run-queue meter sums a thread's run time over stretches, and says it in one line", {
  skip: process.platform !== "linux" && "reads /proc/<pid>/schedstat",
}, async () => {
  const first = threadTime("self");
  assert.ok(first && first.runMs > 0 && first.waitMs >= 0 && first.slices > 0);
  assert.equal(threadTime(2 ** 22 + 1), undefined, "a pid that is not running reads as undefined");
  // A "worker" that sleeps throughout: its thread runs next to nothing while this one spins.
  const sleeper = spawn("sleep", ["30"], { stdio: "ignore" });
  await new Promise((resolve) => sleeper.once("spawn", resolve));
  const meter = new RunQueueMeter([sleeper.pid!]);
  const spin = (ms: number) => {
    const end = performance.now() + ms;
    while (performance.now() < end) { /* on the CPU, so the thread's run time grows */ }
  };
  for (let stretch = 0; stretch < 2; stretch++) {
    meter.begin();
    spin(30);
    meter.end();
  }
  spin(30); // outside any stretch: not counted
  const record = meter.record()!;
  // The third spin (30 ms) is outside: counted, it would make 90 ms and more.
  const late = record.wallMs - 60 - record.controller.waitMs;
  assert.ok(record.wallMs >= 60 && late < 25, `wall ${record.wallMs} ms`);
  // Two stretches of 30 ms on the CPU, less the time the thread waited for a core and the time the
  // kernel counts as neither (interrupts, and on a VM the hypervisor's steal: CI once read 56 ms
  // run and 1 ms wait in 60 ms). One stretch alone would give at most half of the wall time.
  const busyMs = record.wallMs - record.controller.waitMs;
  assert.ok(record.controller.runMs >= 0.6 * busyMs, JSON.stringify(record));
  assert.ok(record.controller.runMs <= record.wallMs + 2, JSON.stringify(record));
  // At most its start (exec and loading, a few ms) against this thread's 60 ms.
  assert.ok(record.workers.runMs <= 15, `the sleeper ran ${record.workers.runMs} ms`);
  sleeper.kill("SIGKILL");
  await new Promise((resolve) => sleeper.once("exit", resolve));
  assert.throws(() => meter.end(), /without begin/);
  assert.equal(
    describeRunQueue({
      wallMs: 9_900,
      controller: { runMs: 3_450, waitMs: 1_290 },
      workers: { runMs: 900, waitMs: 1_430 },
    }),
    "the controller's thread waited for a core 1,290 ms (13 % of 9,900 ms; it ran 3,450 ms), " +
      "each worker's 1,430 ms (ran 900 ms)",
  );
  const gone = new RunQueueMeter([2 ** 22 + 1]);
  gone.begin();
  gone.end();
  assert.equal(gone.record(), undefined, "a thread that cannot be read leaves no record");
});
