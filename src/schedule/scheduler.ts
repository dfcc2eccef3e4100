/**
 * Repeating jobs for a job queue. A schedule names a recurrence (`every` ms, or a cron pattern in
 * a time zone) and the job to add at each run. The scheduler keeps the job of each schedule's
 * next run in the store ahead of time, as a delayed job due at the run's time, under the MessageID
 * `<key>@<run time, ISO 8601>`; when that time comes it adds the run after it. So:
 *
 * - **A run survives a restart.** With a durable store the next run is stored before its time: a
 *   server that is down at that time runs it when it comes back (once; the runs it missed beyond
 *   that one are skipped, as cron skips them).
 * - **Several instances add each run once.** Every instance of a shared flow that declares the
 *   schedule adds the same run under the same MessageID; the first write wins and the others get
 *   `created: false`.
 * - **The job is an ordinary job**: it waits while the queue is paused, and has its tries,
 *   backoff, timeout, result and dead letter like any other.
 *
 * Schedules are declared in code, on every instance that should keep them going: they are not
 * stored. A store error while adding a run is logged and tried again every second until the run
 * after it is due.
 *
 * @module
 */

import type { Clock, TimerHandle } from "../core/clock.ts";
import type { Logger } from "../core/logger.ts";
import type { JobOptions } from "../lifecycle/job_options.ts";
import { MAX_ID_LENGTH } from "../protocol/schemas.ts";
import { type Recurrence, recurrence, type ScheduleWhen } from "./recurrence.ts";

/** The job a schedule adds at each run: its payload and options, but not its MessageID or time. */
export interface ScheduledJob<T = unknown>
  extends Omit<JobOptions, "messageId" | "delay" | "runAt"> {
  /** The payload of every run (JSON-serializable). */
  readonly payload: T;
}

/** A schedule as {@linkcode JobQueue.schedules} shows it. */
export interface ScheduleInfo {
  /** The schedule's key: its runs' MessageIDs are `<key>@<run time, ISO 8601>`. */
  readonly key: string;
  /** When it runs (a cron pattern with its time zone filled in). */
  readonly when: ScheduleWhen;
  /** The next run's time (epoch ms), once the queue has started; undefined before. */
  readonly next: number | undefined;
  /** The MessageID of the next run's job, once the queue has started. */
  readonly nextJob: string | undefined;
  /** Whether the next run's job is in the store (false while it is being added, or failed to). */
  readonly stored: boolean;
}

/** The most characters a schedule key may have (its runs' MessageIDs add 25). */
export const MAX_SCHEDULE_KEY = MAX_ID_LENGTH - 25;
/** How long after a failed add the scheduler tries again, ms. */
export const SCHEDULE_RETRY = 1_000;
/** The longest timer the scheduler sets: a run further away is checked again after this long. */
const MAX_TIMER = 86_400_000;
/** How far ahead a run may be: the store's limit for `runAt`. */
const MAX_AHEAD = 365 * 86_400_000;

/** What the scheduler needs from its queue. */
export interface SchedulerPort {
  /** Wall-clock time (the store's clock). */
  readonly clock: Clock;
  readonly logger: Logger;
  /** Add a run's job (`JobQueue.add` with its MessageID and `runAt`). */
  add(payload: unknown, options: JobOptions): Promise<unknown>;
  /** Cancel the job of a run not yet due. */
  cancel(id: string): Promise<unknown>;
  /** Check a job as `add` would, throwing an error that names the bad field. */
  check(payload: unknown, options: JobOptions): void;
}

interface Entry {
  readonly key: string;
  readonly recurrence: Recurrence;
  readonly job: ScheduledJob;
  /** The time of the run whose job is stored, or being added (its MessageID: `runId`). */
  next: number | undefined;
  /** Whether the job of `next` is stored. */
  stored: boolean;
  timer: TimerHandle | undefined;
  /** False once the entry was replaced, removed or stopped: its pending work is dropped. */
  live: boolean;
}

/** The MessageID of the run of schedule `key` at `time`. */
export function runId(key: string, time: number): string {
  return `${key}@${new Date(time).toISOString()}`;
}

/**
 * The schedules of one queue. Declared with {@linkcode Scheduler.set} (before or after
 * {@linkcode Scheduler.start}); runs are added only between `start` and `stop`.
 *
 * @example
 * ```ts
 * import { Scheduler } from "./scheduler.ts";
 * import { SimulatedClock } from "../core/clock.ts";
 * const clock = new SimulatedClock();
 * const added: string[] = [];
 * const scheduler = new Scheduler({
 *   clock,
 *   logger: console,
 *   add: (_payload, options) => Promise.resolve(void added.push(options.messageId!)),
 *   cancel: () => Promise.resolve(),
 *   check: () => {},
 * });
 * scheduler.set("tick", { every: 60_000 }, { payload: {} });
 * scheduler.start();
 * await Promise.resolve();
 * console.assert(added[0] === "tick@1970-01-01T00:01:00.000Z");
 * scheduler.stop();
 * ```
 */
export class Scheduler {
  readonly #port: SchedulerPort;
  readonly #entries = new Map<string, Entry>();
  #running = false;
  #closed = false;

  /** A scheduler over `port`. */
  constructor(port: SchedulerPort) {
    this.#port = port;
  }

  /**
   * Declare (or replace) the schedule `key`. Throws a `TypeError` or `RangeError` naming what is
   * wrong, and changes nothing then. A replaced schedule's next run is cancelled unless the new
   * schedule runs at the same time (that run keeps the job it was stored with).
   */
  set(key: string, when: ScheduleWhen, job: ScheduledJob): ScheduleInfo {
    if (this.#closed) {
      throw new Error(`Cannot schedule ${JSON.stringify(key)}: the queue is closed`);
    }
    if (typeof key !== "string" || key.trim() === "" || key.length > MAX_SCHEDULE_KEY) {
      throw new TypeError(
        `the schedule key must be a non-blank string of at most ${MAX_SCHEDULE_KEY} characters`,
      );
    }
    const checked = recurrence(when);
    const now = this.#port.clock.now();
    const next = checked.next(now);
    if (next === undefined || next > now + MAX_AHEAD) {
      throw new RangeError(`when never runs within a year from now`);
    }
    if (typeof job !== "object" || job === null) {
      throw new TypeError("job must be an object with a payload");
    }
    for (const field of ["messageId", "delay", "runAt"] as const) {
      if (job[field as keyof ScheduledJob] !== undefined) {
        throw new TypeError(`job.${field} is set by the schedule and must be absent`);
      }
    }
    const { payload, ...options } = job;
    this.#port.check(payload, { ...options, messageId: runId(key, next), runAt: next });
    const previous = this.#entries.get(key);
    const entry: Entry = {
      key,
      recurrence: checked,
      // A copy (JSON, as each run encodes it): later changes to the caller's objects do not
      // reach the runs.
      job: JSON.parse(JSON.stringify(job)),
      next: undefined,
      stored: false,
      timer: undefined,
      live: true,
    };
    this.#entries.set(key, entry);
    if (previous) this.#retire(previous, runId(key, next));
    if (this.#running) this.#plan(entry);
    return info(entry);
  }

  /** Remove the schedule `key` and cancel its next run; whether there was one. */
  delete(key: string): boolean {
    const entry = this.#entries.get(key);
    if (!entry) return false;
    this.#entries.delete(key);
    this.#retire(entry);
    return true;
  }

  /** The schedules, in the order they were declared. */
  list(): ScheduleInfo[] {
    return [...this.#entries.values()].map(info);
  }

  /** Start adding runs: each schedule's next run is stored now. */
  start(): void {
    if (this.#running || this.#closed) return;
    this.#running = true;
    for (const entry of this.#entries.values()) this.#plan(entry);
  }

  /** Stop for good: no run is added after this (the ones stored stay). */
  stop(): void {
    this.#closed = true;
    this.#running = false;
    for (const entry of this.#entries.values()) halt(entry);
  }

  /**
   * An entry replaced or removed: stop it, and cancel its stored run when that run is not due
   * yet (a due one may be running) and is not `keep` (the replacement's own next run).
   */
  #retire(entry: Entry, keep?: string): void {
    halt(entry);
    const next = entry.next;
    if (next === undefined || next <= this.#port.clock.now()) return;
    const nextJob = runId(entry.key, next);
    if (nextJob === keep) return;
    this.#port.cancel(nextJob).catch((error) =>
      this.#port.logger.error(`the schedule ${entry.key} could not cancel ${nextJob}`, error)
    );
  }

  /** Make the first run after now the entry's next, and store its job. */
  #plan(entry: Entry): void {
    const next = entry.recurrence.next(this.#port.clock.now());
    if (next === undefined) {
      this.#port.logger.warn(`the schedule ${entry.key} has no further run`);
      return;
    }
    entry.next = next;
    entry.stored = false;
    this.#store(entry);
  }

  #store(entry: Entry): void {
    const time = entry.next!;
    const id = runId(entry.key, time);
    const { payload, ...options } = entry.job;
    this.#port.add(payload, { ...options, messageId: id, runAt: time }).then(
      () => {
        if (!entry.live || entry.next !== time) return;
        entry.stored = true;
        this.#wait(entry, time);
      },
      (error) => {
        if (!entry.live || entry.next !== time) return;
        this.#port.logger.error(
          `the schedule ${entry.key} could not add its run ${id}; trying again`,
          error,
        );
        this.#wait(entry, this.#port.clock.now() + SCHEDULE_RETRY);
      },
    );
  }

  /** Wake at `at` (at most a day ahead, then look again). */
  #wait(entry: Entry, at: number): void {
    entry.timer?.cancel();
    const delay = Math.min(MAX_TIMER, Math.max(0, at - this.#port.clock.now()));
    entry.timer = this.#port.clock.setTimeout(() => {
      entry.timer = undefined;
      if (entry.live) this.#wake(entry);
    }, delay);
  }

  #wake(entry: Entry): void {
    const now = this.#port.clock.now();
    const next = entry.next!;
    if (!entry.stored) {
      // A failed add: try the same run again, unless the run after it is due already.
      const after = entry.recurrence.next(next);
      if (after !== undefined && after <= now) {
        this.#port.logger.error(
          `the schedule ${entry.key} skipped its run ${runId(entry.key, next)}`,
        );
        return this.#plan(entry);
      }
      return this.#store(entry);
    }
    if (now < next) return this.#wait(entry, next); // a long wait, checked again
    this.#plan(entry); // the run is due (in the store): store the one after it
  }
}

function info(entry: Entry): ScheduleInfo {
  return {
    key: entry.key,
    when: entry.recurrence.when,
    next: entry.next,
    nextJob: entry.next === undefined ? undefined : runId(entry.key, entry.next),
    stored: entry.stored,
  };
}

/** An entry stops: its pending work is dropped and its timer cancelled. */
function halt(entry: Entry): void {
  entry.live = false;
  entry.timer?.cancel();
  entry.timer = undefined;
}
