/**
 * How long the benchmark's own processes waited for a core while they were ready to run (Linux):
 * the run-queue wait of each process's main thread, the one that runs its event loop, from
 * `/proc/<pid>/schedstat` ("time on the CPU, time waiting on a run queue, timeslices run", ns).
 *
 * Why: in the latency scenario the machine looks half idle (its load record), yet on the 2-core
 * host where this was found (2026-12-05) the controller's thread waited for a core about 13 % of
 * the time on Bun (6 % on Deno) and each worker's thread waited longer than it ran: five processes
 * woken together by one jobs frame take turns on two cores. The controller's waits are the gaps
 * in its event loop, and the jobs submitted meanwhile then queue behind the workers' windows.
 * Beside the latency percentiles the scenario reports these waits, which show how much of the
 * tail is the processes taking turns for a core rather than their own work.
 *
 * @module
 */

import { readFileSync } from "node:fs";

/** A thread's totals so far, ms: time run, time ready but waiting for a core, and runs. */
export interface ThreadTime {
  readonly runMs: number;
  readonly waitMs: number;
  readonly slices: number;
}

/**
 * The totals of process `pid`'s main thread, or with `"self"` of the thread calling (the one that
 * runs this event loop); undefined without `/proc` or once the process exited.
 */
export function threadTime(pid: number | "self"): ThreadTime | undefined {
  let text: string;
  try {
    text = readFileSync(`/proc/${pid === "self" ? "thread-self" : pid}/schedstat`, "utf8");
  } catch {
    return undefined;
  }
  const [run, wait, slices] = text.trim().split(" ").map(Number);
  if (![run, wait, slices].every(Number.isFinite)) return undefined;
  return { runMs: run / 1e6, waitMs: wait / 1e6, slices };
}

/** What one group of threads (the controller's, or the workers' averaged) did over the rounds. */
export interface RunQueueUse {
  /** Time run, ms (a worker: the mean over the worker processes). */
  readonly runMs: number;
  /** Time ready to run but waiting for a core, ms (a worker: the mean). */
  readonly waitMs: number;
}

/** The run-queue waits of the controller and the worker processes over the measured rounds. */
export interface RunQueueRecord {
  /** Wall time the rounds took together, ms. */
  readonly wallMs: number;
  readonly controller: RunQueueUse;
  /** Each worker process's main thread, the mean over them. */
  readonly workers: RunQueueUse;
}

/**
 * Sums the main threads' time between readings: `begin` before a measured stretch, `end` after
 * it, as often as there are stretches; `record()` is undefined when any reading failed.
 */
export class RunQueueMeter {
  readonly #controller: number | "self";
  readonly #workers: readonly number[];
  #started:
    | { at: number; controller?: ThreadTime; workers: (ThreadTime | undefined)[] }
    | undefined;
  #wallMs = 0;
  #controllerSum = { runMs: 0, waitMs: 0 };
  #workerSum = { runMs: 0, waitMs: 0 };
  #failed = false;

  /** Meter `controller` (this process by default) and the worker processes `workers`. */
  constructor(workers: readonly number[], controller: number | "self" = "self") {
    this.#controller = controller;
    this.#workers = workers;
  }

  /** Start a measured stretch. */
  begin(): void {
    this.#started = {
      at: performance.now(),
      controller: threadTime(this.#controller),
      workers: this.#workers.map((pid) => threadTime(pid)),
    };
  }

  /** End the stretch `begin()` started and add it to the sums. */
  end(): void {
    const started = this.#started;
    if (!started) throw new Error("RunQueueMeter.end() without begin()");
    this.#started = undefined;
    this.#wallMs += performance.now() - started.at;
    const controller = threadTime(this.#controller);
    if (!started.controller || !controller) {
      this.#failed = true;
      return;
    }
    this.#controllerSum.runMs += controller.runMs - started.controller.runMs;
    this.#controllerSum.waitMs += controller.waitMs - started.controller.waitMs;
    this.#workers.forEach((pid, i) => {
      const before = started.workers[i];
      const after = threadTime(pid);
      if (!before || !after) {
        this.#failed = true;
        return;
      }
      this.#workerSum.runMs += after.runMs - before.runMs;
      this.#workerSum.waitMs += after.waitMs - before.waitMs;
    });
  }

  /** The sums so far (ms, rounded to whole ms), or undefined when a thread could not be read. */
  record(): RunQueueRecord | undefined {
    if (this.#failed || this.#wallMs === 0) return undefined;
    const count = Math.max(1, this.#workers.length);
    return {
      wallMs: Math.round(this.#wallMs),
      controller: {
        runMs: Math.round(this.#controllerSum.runMs),
        waitMs: Math.round(this.#controllerSum.waitMs),
      },
      workers: {
        runMs: Math.round(this.#workerSum.runMs / count),
        waitMs: Math.round(this.#workerSum.waitMs / count),
      },
    };
  }
}

/**
 * `the controller's thread waited for a core 1,290 ms (13 % of 9,900 ms; it ran 3,450 ms), each
 * worker's 1,430 ms (ran 900 ms)`, for logs and reports.
 */
export function describeRunQueue(record: RunQueueRecord): string {
  const n = (value: number) => Math.round(value).toLocaleString("en-US");
  const share = Math.round(record.controller.waitMs / record.wallMs * 100);
  return `the controller's thread waited for a core ${
    n(record.controller.waitMs)
  } ms (${share} % of ${n(record.wallMs)} ms; it ran ${
    n(record.controller.runMs)
  } ms), each worker's ${n(record.workers.waitMs)} ms (ran ${n(record.workers.runMs)} ms)`;
}
