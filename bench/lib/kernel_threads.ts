/**
 * What the kernel's own threads ran while a scenario measured (Linux): CPU time and wake-ups of
 * every kernel thread, summed by name, from `/proc/<pid>/stat` and `/proc/<pid>/status`.
 *
 * Why: on the AMD EPYC host where this was found (2026-12-02) the kernel runs DAMON, a memory
 * monitor with a page-out scheme, and its thread `kdamond.0` wakes about every 0.54 s and then
 * holds one of the two cores for 10–20 ms. The processes it preempts stall at those moments, and
 * each stall leaves a few hundred jobs late at the latency scenario's rate; the machine-load
 * record cannot show it (it is 1–2 % of the machine). Beside the latency percentiles the scenario
 * reports the kernel threads that used the most CPU during its rounds, and the time per wake-up
 * tells how long each held a core (see `bench/README.md`, "The host stalls").
 *
 * @module
 */

import { readdirSync, readFileSync } from "node:fs";
import { MS_PER_TICK } from "./machine_load.ts";

/** `PF_KTHREAD` in a task's flags (`include/linux/sched.h`): the task is a kernel thread. */
const PF_KTHREAD = 0x00200000;

/** The CPU time (ms) and wake-ups of the kernel threads of one name. */
export interface KernelThreadUse {
  /** The thread's name with any `/<cpu>…` suffix cut (`kworker/1:1H` counts as `kworker`). */
  readonly name: string;
  readonly cpuMs: number;
  /** Voluntary context switches: each is the end of one run of the thread. */
  readonly wakeups: number;
}

/** Every kernel thread's CPU time and wake-ups so far, by name; undefined without `/proc`. */
export function kernelThreadTotals(): Map<string, { cpuMs: number; wakeups: number }> | undefined {
  let pids: string[];
  try {
    pids = readdirSync("/proc").filter((entry) => /^\d+$/.test(entry));
  } catch {
    return undefined;
  }
  const totals = new Map<string, { cpuMs: number; wakeups: number }>();
  for (const pid of pids) {
    const stat = readText(`/proc/${pid}/stat`);
    if (stat === undefined) continue; // it exited meanwhile
    // pid (comm) state …: comm may hold spaces and parentheses, so split after the last ')'.
    const close = stat.lastIndexOf(")");
    const fields = stat.slice(close + 2).split(" "); // fields[0] is field 3 (state)
    if ((Number(fields[6]) & PF_KTHREAD) === 0) continue; // field 9: flags
    const status = readText(`/proc/${pid}/status`); // read for kernel threads only
    if (status === undefined) continue;
    const cpuMs = (Number(fields[11]) + Number(fields[12])) * MS_PER_TICK; // utime, stime
    const wakeups = Number(/^voluntary_ctxt_switches:\s*(\d+)/m.exec(status)?.[1] ?? 0);
    const name = stat.slice(stat.indexOf("(") + 1, close).split("/")[0];
    const total = totals.get(name) ?? { cpuMs: 0, wakeups: 0 };
    total.cpuMs += cpuMs;
    total.wakeups += wakeups;
    totals.set(name, total);
  }
  return totals;
}

/** A file's text, or undefined when it cannot be read (a process that exited). */
function readText(path: string): string | undefined {
  try {
    return readFileSync(path, "utf8");
  } catch {
    return undefined;
  }
}

/**
 * The kernel threads that used at least `minMs` of CPU between two {@linkcode kernelThreadTotals}
 * readings, the most first (a thread that started meanwhile counts from zero).
 */
export function kernelThreadsBetween(
  before: Map<string, { cpuMs: number; wakeups: number }>,
  after: Map<string, { cpuMs: number; wakeups: number }>,
  minMs = 1,
): KernelThreadUse[] {
  const used: KernelThreadUse[] = [];
  for (const [name, total] of after) {
    const earlier = before.get(name) ?? { cpuMs: 0, wakeups: 0 };
    const cpuMs = Math.max(0, total.cpuMs - earlier.cpuMs);
    const wakeups = Math.max(0, total.wakeups - earlier.wakeups);
    if (cpuMs >= minMs) used.push({ name, cpuMs, wakeups });
  }
  return used.sort((a, b) => b.cpuMs - a.cpuMs);
}

/** Kernel threads that used less CPU than this (ms) during the rounds go unreported. */
export const KERNEL_THREAD_MIN_MS = 10;

/** `kdamond.0 120 ms in 18 wake-ups (6.7 ms each), kworker 20 ms …`, for logs and reports. */
export function describeKernelThreads(threads: readonly KernelThreadUse[]): string {
  if (threads.length === 0) return `none used ${KERNEL_THREAD_MIN_MS} ms of CPU or more`;
  return threads.slice(0, 3).map((use) =>
    `${use.name} ${Math.round(use.cpuMs)} ms in ${use.wakeups} wake-ups` +
    (use.wakeups > 0 ? ` (${(use.cpuMs / use.wakeups).toFixed(1)} ms each)` : "")
  ).join(", ");
}
