/**
 * How busy the machine was around each scenario, so that a run on a shared machine says so
 * instead of publishing its figures.
 *
 * Two measures per scenario:
 *
 * - the **1-minute load average** (`node:os` `loadavg()`) just before and just after it: the
 *   number everyone knows, recorded as asked. It cannot tell the benchmark's own processes from
 *   anyone else's: the suite keeps both cores busy, so after a scenario it reads 1.5–3 on a
 *   2-core machine, and it decays over minutes, so the value before a scenario still carries
 *   the previous one.
 * - the **CPU used by other processes** during it (Linux): the machine's busy time from
 *   `/proc/stat` (user, nice, system, irq, softirq and steal, over every core) minus this
 *   process's own time and that of the children it has reaped (`/proc/self/stat`: utime,
 *   stime, cutime, cstime; every scenario reaps its children before it returns, and the Bun
 *   part of a run is one such child). Divided by the scenario's wall time it is in cores: 0.5
 *   means someone else kept half a core busy on average. Its **steal** part is recorded apart:
 *   time the hypervisor gave this virtual machine's cores to others on the host, which no
 *   process here used and nothing here can stop (a quiet machine can be on a busy host).
 *
 * **Busy** (the run prints and records a warning and does not rewrite the README section):
 * the load average before the first scenario is above {@linkcode BUSY_LOAD_PER_CORE} per core
 * (work was already running: on average one runnable process for every two cores, which a
 * benchmark that needs every core would share), or other processes used more than
 * {@linkcode BUSY_OTHERS_SHARE} of the machine's CPU time during any scenario (work that started
 * during the run, which the load average cannot separate from the benchmark's own). A tenth of
 * the machine is about what it takes to move the throughput figures by more than their
 * round-to-round spread (a few per cent); a quiet machine here shows about 1 % (0.01–0.03
 * cores).
 *
 * @module
 */

import { readFileSync } from "node:fs";
import { cpus, loadavg } from "node:os";

/** Load average (1 minute) per core above which the machine was busy before the run. */
export const BUSY_LOAD_PER_CORE = 0.5;
/** Share of the machine's CPU time used by other processes above which a scenario was busy. */
export const BUSY_OTHERS_SHARE = 0.1;

/** One scenario's load record. */
export interface LoadRecord {
  readonly scenario: string;
  /** The runtime that ran it ("deno", "bun"), or "any" for runtime-independent scenarios. */
  readonly runtime: string;
  /** 1-minute load average just before and just after. */
  readonly before: number;
  readonly after: number;
  readonly seconds: number;
  /** Cores' worth of CPU used by other processes on average (null where /proc is missing). */
  readonly othersCores: number | null;
  /**
   * The part of `othersCores` that was steal: the host running other virtual machines on this
   * one's cores (null where /proc is missing; absent from runs recorded before it was measured).
   */
  readonly stealCores?: number | null;
}

/** The verdict on a run. */
export interface BusyVerdict {
  readonly busy: boolean;
  readonly cores: number;
  /** The rule, in words (recorded with the results). */
  readonly rule: string;
  /** Why it was busy (empty when quiet). */
  readonly reasons: string[];
}

/** CPU ticks: the machine's busy time and this process tree's. */
interface Ticks {
  readonly machine: number;
  readonly steal: number;
  readonly own: number;
}

/** Clock ticks per second of /proc (USER_HZ, 100 on Linux). */
const USER_HZ = 100;
/** The shortest scenario whose other processes' CPU is measured (see `measureLoad`). */
const MIN_MEASURED_SECONDS = 1;

/**
 * The machine's CPU time over every core since boot, in ticks of /proc: `busy` (user, nice,
 * system, irq, softirq, steal; guest time is already counted in user), `total` (idle and
 * iowait too) and `steal` (the part of `busy` the hypervisor gave to others on the host).
 */
export function machineCpuTicks(): { busy: number; total: number; steal: number } {
  // "cpu  user nice system idle iowait irq softirq steal guest guest_nice"
  const cpu = readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1)
    .map(Number);
  const busy = cpu[0] + cpu[1] + cpu[2] + cpu[5] + cpu[6] + (cpu[7] ?? 0);
  return { busy, total: busy + cpu[3] + cpu[4], steal: cpu[7] ?? 0 };
}

/**
 * The CPU time (user and system, every thread) process `pid` has used, in ticks of /proc; with
 * `reapedChildren`, also that of the children it has reaped.
 */
export function processCpuTicks(pid: number | "self", reapedChildren = false): number {
  // Fields after "(comm) ": state is [0], utime [11], stime [12], cutime [13], cstime [14].
  const stat = readFileSync(`/proc/${pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ").map(Number);
  return fields[11] + fields[12] + (reapedChildren ? fields[13] + fields[14] : 0);
}

/** Milliseconds of CPU time per tick of /proc. */
export const MS_PER_TICK = 1000 / USER_HZ;

function readTicks(): Ticks | null {
  try {
    const { busy: machine, steal } = machineCpuTicks();
    const own = processCpuTicks("self", true);
    return Number.isFinite(machine) && Number.isFinite(own) ? { machine, steal, own } : null;
  } catch {
    return null;
  }
}

/** The 1-minute load average, two decimals. */
export function load1(): number {
  return Math.round(loadavg()[0] * 100) / 100;
}

/** Run `body` and record the load around it in `into`. */
export async function measureLoad<T>(
  into: LoadRecord[],
  scenario: string,
  runtime: string,
  body: () => Promise<T>,
): Promise<T> {
  const before = load1();
  const ticks = readTicks();
  const started = performance.now();
  try {
    return await body();
  } finally {
    const seconds = (performance.now() - started) / 1000;
    const end = readTicks();
    // /proc counts in ticks of 10 ms: over a scenario that was skipped or took well under a
    // second, one tick of a kernel thread reads as cores of "other" CPU. Not measured then.
    const measured = ticks && end && seconds >= MIN_MEASURED_SECONDS;
    const othersCores = measured
      ? Math.max(0, (end.machine - ticks.machine) - (end.own - ticks.own)) / USER_HZ / seconds
      : null;
    const stealCores = measured ? (end.steal - ticks.steal) / USER_HZ / seconds : null;
    into.push({
      scenario,
      runtime,
      before,
      after: load1(),
      seconds: Math.round(seconds * 10) / 10,
      othersCores: othersCores === null ? null : Math.round(othersCores * 1000) / 1000,
      stealCores: stealCores === null ? null : Math.round(stealCores * 1000) / 1000,
    });
  }
}

/** Whether the run was busy, from the load average before it and every scenario's record. */
export function busyVerdict(loadBeforeRun: number, records: readonly LoadRecord[]): BusyVerdict {
  const cores = cpus().length || 1;
  const reasons: string[] = [];
  if (loadBeforeRun > BUSY_LOAD_PER_CORE * cores) {
    reasons.push(
      `the 1-minute load average was ${loadBeforeRun.toFixed(2)} before the run (above ${
        BUSY_LOAD_PER_CORE * cores
      } = ${BUSY_LOAD_PER_CORE} per core on ${cores} cores)`,
    );
  }
  for (const record of records) {
    if (record.othersCores === null) continue;
    const share = record.othersCores / cores;
    if (share > BUSY_OTHERS_SHARE) {
      reasons.push(
        `other processes used ${(share * 100).toFixed(0)} % of the CPU during ${record.scenario}${
          record.runtime === "any" ? "" : ` on ${record.runtime}`
        } (${record.othersCores.toFixed(2)} cores${stealPart(record)}; limit ${
          BUSY_OTHERS_SHARE * 100
        } %)`,
      );
    }
  }
  return {
    busy: reasons.length > 0,
    cores,
    rule: `busy when the 1-minute load average before the run is above ${BUSY_LOAD_PER_CORE} ` +
      `per core, or other processes use more than ${
        BUSY_OTHERS_SHARE * 100
      } % of the machine's CPU time during a scenario (from /proc: the machine's busy time, the hypervisor's steal included, minus this run's own; ` +
      `not measured for a scenario under ${MIN_MEASURED_SECONDS} s, too short for /proc's 10 ms ticks)`,
    reasons,
  };
}

/**
 * ", of which steal …" when the hypervisor took a measurable part of `record`'s other CPU: the
 * host was busy, not this machine.
 *
 * @example
 * ```ts
 * import { stealPart } from "./machine_load.ts";
 * const record = { scenario: "durable", runtime: "deno", before: 0.1, after: 2, seconds: 30 };
 * console.assert(stealPart({ ...record, othersCores: 0.6, stealCores: 0.5 }).includes("steal"));
 * console.assert(stealPart({ ...record, othersCores: 0.6, stealCores: 0 }) === "");
 * ```
 */
export function stealPart(record: LoadRecord): string {
  const steal = record.stealCores;
  if (steal === undefined || steal === null || steal < 0.01) return "";
  return `, of which ${steal.toFixed(2)} steal: the host ran other virtual machines on these cores`;
}
