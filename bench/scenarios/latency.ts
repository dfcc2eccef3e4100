/**
 * Scenario 4, latency: submit → handler start, p50/p90/p99/p99.9/max, at half the maximum
 * throughput.
 * The workpull system of scenario 1 with 4 worker processes × 1 endpoint (window 100): first
 * its maximum throughput is measured in this run (median of 3 batches), then jobs are
 * submitted at 50% of it by a steady pacer (every ~1 ms it submits what is due so far) for a
 * fixed time. Each payload carries its submission time; the worker's handler subtracts it from
 * its own clock when it starts. Clock: `performance.timeOrigin + performance.now()` in both
 * processes (one machine; see `lib/runtime.ts`).
 *
 * Between the maximum-throughput batches and the measured rounds the pacer runs unmeasured for
 * `settleSeconds` (default 2 s) at the same rate: the batches leave the garbage of 100,000
 * submissions in the old generation, and the full collection it calls for would otherwise land
 * in the first round and be counted as the latency of the paced load (a pause the paced load
 * did not cause).
 *
 * Before it starts any process it measures the host's timer oversleep for `jitterSeconds`
 * (default 3 s; `lib/timer_jitter.ts`): how late the idle host wakes a process up, beside which
 * a tail is read. During the rounds it also records the CPU time and wake-ups of the kernel's own
 * threads (`lib/kernel_threads.ts`; Linux), such as a memory monitor that takes a core for
 * milliseconds at a time, and how long the controller's and the workers' threads waited for a core
 * while ready to run (`lib/run_queue.ts`): five processes on a small machine take turns. The
 * workers count their samples in a histogram
 * (`lib/latency_histogram.ts`), which costs them no allocation a job.
 *
 * @module
 */

import process from "node:process";
import { now, type Runtime, runtimeVersion, sleep, until } from "../lib/runtime.ts";
import { WorkpullSetup } from "../lib/setups.ts";
import { measureTimerJitter, type TimerJitter } from "../lib/timer_jitter.ts";
import {
  describeKernelThreads,
  KERNEL_THREAD_MIN_MS,
  kernelThreadsBetween,
  kernelThreadTotals,
  type KernelThreadUse,
} from "../lib/kernel_threads.ts";
import { type HistogramData, LatencyHistogram } from "../lib/latency_histogram.ts";
import { describeRunQueue, RunQueueMeter, type RunQueueRecord } from "../lib/run_queue.ts";
import { type Distribution, median, round, roundedDistribution } from "../lib/stats.ts";

/** The scenario's result (ms). */
export interface LatencyResult {
  readonly runtime: string;
  readonly topology: string;
  /** The maximum throughput measured first, jobs/s. */
  readonly maxThroughput: number;
  /** The paced rate, jobs/s. */
  readonly rate: number;
  /** The rate the pacer achieved, jobs/s (median over rounds). */
  readonly achieved: number;
  readonly seconds: number;
  readonly rounds: Distribution[];
  /** Medians over rounds of each percentile. */
  readonly median: Distribution;
  /** How late a 1 ms timer woke on the idle host just before (see `lib/timer_jitter.ts`). */
  readonly hostTimer: TimerJitter;
  /**
   * The kernel's threads that used at least {@linkcode KERNEL_THREAD_MIN_MS} of CPU during the
   * measured rounds, the most first (`lib/kernel_threads.ts`); undefined without Linux `/proc`.
   */
  readonly kernelThreads?: readonly KernelThreadUse[];
  /**
   * How long the controller's and the workers' main threads ran and waited for a core during the
   * measured rounds (`lib/run_queue.ts`); undefined without Linux `/proc`.
   */
  readonly runQueue?: RunQueueRecord;
}

/** Run the scenario on this process's runtime. */
export async function latency(options: {
  maxJobs: number;
  seconds: number;
  rounds: number;
  window: number;
  /** Unmeasured pacing before the rounds, s (default 2). */
  settleSeconds?: number;
  /** How long to measure the idle host's timer oversleep first, s (default 3). */
  jitterSeconds?: number;
  log: (line: string) => void;
  /** The worker processes' runtime (default: this one); for experiments. */
  workerRuntime?: Runtime;
}): Promise<LatencyResult> {
  const hostTimer = await measureTimerJitter(options.jitterSeconds ?? 3);
  options.log(
    `  idle host: a 1 ms timer woke late by p99 ${hostTimer.p99.toFixed(2)} ms, p99.9 ${
      hostTimer.p999.toFixed(2)
    } ms, max ${
      hostTimer.max.toFixed(2)
    } ms (${hostTimer.over5ms} wake-ups over 5 ms in ${hostTimer.seconds} s)`,
  );
  const setup = await WorkpullSetup.start({ processes: 4, perProcess: 1 }, {
    window: options.window,
    handler: "latency",
    workerRuntime: options.workerRuntime,
    submit: "each", // a job a `submit()`, as the pacer submits: its maximum is the one to halve
  });
  try {
    /** Every worker's samples since the last call, in one histogram. */
    const collect = async () => {
      const all = new LatencyHistogram();
      for (const worker of setup.workers) {
        worker.command({ cmd: "latency" });
        const report = await worker.next((r) => r.ev === "latency", "latency samples");
        all.merge(report.histogram as HistogramData);
      }
      return all;
    };
    await setup.run(Math.round(options.maxJobs / 2)); // warm-up
    const maxima: number[] = [];
    for (let i = 0; i < 3; i++) maxima.push(await setup.run(options.maxJobs));
    await collect();
    const maxThroughput = median(maxima);
    const rate = maxThroughput / 2;
    options.log(
      `  max throughput ${Math.round(maxThroughput).toLocaleString("en-US")} jobs/s; pacing at ${
        Math.round(rate).toLocaleString("en-US")
      } jobs/s for ${options.seconds} s`,
    );
    /** Submit at `rate` for `seconds`; how many, and the rate achieved, once all are confirmed. */
    const pace = async (seconds: number) => {
      const base = setup.controller.stats().totals.confirmed;
      const started = now();
      const end = started + seconds * 1000;
      let submitted = 0;
      for (let t = started; t < end; t = now()) {
        const due = Math.floor((t - started) / 1000 * rate);
        for (; submitted < due; submitted++) {
          setup.producer.submit({ n: submitted, t: now() }).catch(() => {});
        }
        await sleep(1);
      }
      const achieved = submitted / ((now() - started) / 1000);
      await until(
        () => setup.controller.stats().totals.confirmed >= base + submitted,
        "paced jobs confirmed",
        60_000,
      );
      return { submitted, achieved };
    };
    await pace(options.settleSeconds ?? 2);
    await collect();
    const rounds: Distribution[] = [];
    const achieved: number[] = [];
    /** The kernel threads' use summed over the rounds; undefined without Linux `/proc`. */
    let kernel: Map<string, { cpuMs: number; wakeups: number }> | undefined = new Map();
    const runQueue = new RunQueueMeter(setup.workers.map((worker) => worker.pid));
    for (let r = 0; r < options.rounds; r++) {
      const threadsBefore = kernelThreadTotals();
      runQueue.begin();
      const { submitted, achieved: rateAchieved } = await pace(options.seconds);
      runQueue.end();
      const threadsAfter = kernelThreadTotals();
      if (!threadsBefore || !threadsAfter) kernel = undefined;
      else if (kernel) {
        for (const use of kernelThreadsBetween(threadsBefore, threadsAfter, 0)) {
          const sum = kernel.get(use.name) ?? { cpuMs: 0, wakeups: 0 };
          kernel.set(use.name, {
            cpuMs: sum.cpuMs + use.cpuMs,
            wakeups: sum.wakeups + use.wakeups,
          });
        }
      }
      achieved.push(rateAchieved);
      const samples = await collect();
      if (samples.count !== submitted) {
        throw new Error(`expected ${submitted} latency samples, got ${samples.count}`);
      }
      const d = samples.distribution();
      rounds.push(d);
      options.log(
        `  round ${r + 1}/${options.rounds}: ${d.count} jobs, p50 ${d.p50.toFixed(2)} ms, p99 ${
          d.p99.toFixed(2)
        } ms, p99.9 ${d.p999.toFixed(2)} ms, max ${d.max.toFixed(2)} ms`,
      );
    }
    // The sums against nothing: those that used enough, the most first.
    const kernelThreads = kernel && kernelThreadsBetween(new Map(), kernel, KERNEL_THREAD_MIN_MS);
    if (kernelThreads) {
      options.log(`  kernel threads during the rounds: ${describeKernelThreads(kernelThreads)}`);
    }
    const waits = runQueue.record();
    if (waits) options.log(`  during the rounds ${describeRunQueue(waits)}`);
    const pick = (key: keyof Distribution) => round(median(rounds.map((d) => d[key])), 3);
    return {
      runtime: runtimeVersion(),
      topology: "4×1",
      maxThroughput: round(maxThroughput),
      rate: round(rate),
      achieved: round(median(achieved)),
      seconds: options.seconds,
      rounds: rounds.map((d) => roundedDistribution(d)),
      median: {
        count: pick("count"),
        p50: pick("p50"),
        p90: pick("p90"),
        p99: pick("p99"),
        p999: pick("p999"),
        max: pick("max"),
      },
      hostTimer,
      kernelThreads,
      runQueue: waits,
    };
  } finally {
    await setup.close();
  }
}

if (import.meta.main) {
  const result = await latency({
    maxJobs: Number(process.argv[2] ?? 100_000),
    seconds: Number(process.argv[3] ?? 3),
    rounds: Number(process.argv[4] ?? 3),
    window: 100,
    log: console.log,
    workerRuntime: process.argv[5] as Runtime | undefined,
  });
  console.log(JSON.stringify(result));
  process.exit(0);
}
