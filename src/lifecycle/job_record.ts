/**
 * One job's state as a job store keeps it, and the pure decisions that move it along:
 *
 * ```text
 * submitted ──► waiting (due) / scheduled (not yet due)
 *                 │ the controller takes it (a try starts: attempts + 1)
 *                 ▼
 *               active ──► completed                       (the handler resolved)
 *                 │   └──► failed ──(backoff)──► waiting   (it rejected or timed out; tries left)
 *                 │   └──► dead                            (no tries left)
 *                 └──► cancelled                           (cancelled while active)
 * waiting / scheduled / failed ──► cancelled               (cancelled before it ran again)
 * dead ──(retry)──► waiting                                (a fresh set of tries)
 * ```
 *
 * A worker lost while running a job is not a failed try: the controller gives the job to another
 * worker without the store hearing of it, unless the job keeps losing workers (see
 * `LifecycleDefaults.lostLimit`), which the controller then reports as a failed try.
 *
 * @module
 */

import type { Writable } from "../core/writable.ts";
import {
  backoffDelay,
  type JobPlan,
  type ResolvedBackoff,
  type ResolvedDefaults,
} from "./job_options.ts";

/** Where a job is. `scheduled` is a waiting job that is not due yet. */
export type JobState =
  | "scheduled"
  | "waiting"
  | "active"
  | "completed"
  | "failed"
  | "dead"
  | "cancelled";

/** A failed try's error, as reported by the worker (size-capped). */
export interface JobError {
  /** The error's name, for example `TypeError` or `TimeoutError`. */
  readonly name: string;
  /** Its message. */
  readonly message: string;
}

/** How one try of a job ended, as the controller reports it with the confirmation. */
export type JobOutcome =
  /** The handler resolved; `result` is its value as JSON text, when it returned one. */
  | { readonly kind: "completed"; readonly worker?: string; readonly result?: string }
  /**
   * The handler rejected, timed out, or the job lost its worker too often. `lost` is how many
   * workers were lost while running the job so far (it carries over to the next try).
   */
  | {
    readonly kind: "failed";
    readonly worker?: string;
    readonly error: JobError;
    readonly lost?: number;
  }
  /** The job was cancelled while it was active. */
  | { readonly kind: "cancelled"; readonly worker?: string };

/** What a job store keeps about one job (JSON-safe: stores persist it as it is). */
export interface JobRecord {
  /** The MessageID. */
  readonly id: string;
  /** Where it is; `waiting` also stands for `scheduled` (see {@linkcode publicState}). */
  readonly state: Exclude<JobState, "scheduled">;
  /** -1,000..1,000; higher first. */
  readonly priority: number;
  /** When it is due (waiting, failed), ms. */
  readonly runAt: number;
  /** When it was first submitted, ms. */
  readonly enqueuedAt: number;
  /** Tries started so far. */
  readonly attempts: number;
  /** The job's own lifecycle options (absent: the flow's). */
  readonly own: {
    readonly attempts?: number;
    readonly backoff?: ResolvedBackoff;
    readonly timeout?: number;
  };
  /** When the current or last try started, ms. */
  readonly startedAt?: number;
  /** When it reached completed, dead or cancelled, ms. */
  readonly finishedAt?: number;
  /** The worker endpoint of the last try, when known. */
  readonly worker?: string;
  /** The handler's result (JSON text), when completed with one. */
  readonly result?: string;
  /** The last try's error. */
  readonly error?: JobError;
  /** Workers lost while running it, across its tries (see `LifecycleDefaults.lostLimit`). */
  readonly lost?: number;
}

/** A job as `GET /jobs/:id` and `JobQueue.get` show it. */
export interface JobInfo {
  /** The MessageID. */
  readonly id: string;
  /** Where it is. */
  readonly state: JobState;
  /** Tries started so far. */
  readonly attempts: number;
  /** -1,000..1,000. */
  readonly priority: number;
  /** When it was submitted, epoch ms. */
  readonly enqueuedAt: number;
  /** When it is due, epoch ms (scheduled, waiting, failed), or was due (active: this try). */
  readonly runAt?: number;
  /** When the current or last try started, epoch ms. */
  readonly startedAt?: number;
  /** When it finished (completed, dead, cancelled), epoch ms. */
  readonly finishedAt?: number;
  /** The worker endpoint running it (active) or that ran its last try. */
  readonly worker?: string;
  /** The handler's result (completed). */
  readonly result?: unknown;
  /** The last try's error (failed, dead; and completed after earlier failures). */
  readonly error?: JobError;
  /** The latest progress the handler reported (active). */
  readonly progress?: unknown;
}

/** A new job's record. */
export function newRecord(id: string, plan: JobPlan, now: number): JobRecord {
  // Fields assigned one by one rather than spread from temporary objects (a conditional spread
  // cost 3-10x an assignment in V8): every job is made here.
  const own: Writable<JobRecord["own"]> = {};
  if (plan.attempts !== undefined) own.attempts = plan.attempts;
  if (plan.backoff !== undefined) own.backoff = plan.backoff;
  if (plan.timeout !== undefined) own.timeout = plan.timeout;
  return {
    id,
    state: "waiting",
    priority: plan.priority,
    runAt: plan.runAt,
    enqueuedAt: now,
    attempts: 0,
    own,
  };
}

/** A try starts: the job is active and its attempt count grows. */
export function startTry(record: JobRecord, now: number): JobRecord {
  return { ...record, state: "active", attempts: record.attempts + 1, startedAt: now };
}

/** The timeout of one try (0 = none). */
export function tryTimeout(record: JobRecord, defaults: ResolvedDefaults): number {
  return record.own.timeout ?? defaults.timeout;
}

/**
 * Where a try's outcome takes the job: completed, failed (retried after its backoff), dead, or
 * cancelled. `random` draws the backoff's jitter.
 *
 * @example A failure with tries left waits out its backoff
 * ```ts
 * import { finishTry, newRecord, startTry } from "./job_record.ts";
 * import { planJob, resolveDefaults } from "./job_options.ts";
 *
 * const defaults = resolveDefaults({ attempts: 2, backoff: { type: "fixed", delay: 500 } });
 * const active = startTry(newRecord("j1", planJob({}, 0), 0), 10);
 * const failed = finishTry(active, { kind: "failed", error: { name: "Error", message: "boom" } }, defaults, 20, Math.random);
 * console.assert(failed.state === "failed" && failed.runAt === 520);
 * const dead = finishTry(startTry(failed, 600), { kind: "failed", error: { name: "Error", message: "boom" } }, defaults, 700, Math.random);
 * console.assert(dead.state === "dead" && dead.attempts === 2);
 * ```
 */
export function finishTry(
  record: JobRecord,
  outcome: JobOutcome,
  defaults: ResolvedDefaults,
  now: number,
  random: () => number,
): JobRecord {
  const worker = outcome.worker ?? record.worker;
  if (outcome.kind === "completed") {
    // The path of nearly every job: one copy (an earlier completion's result is left out). A
    // spread, not object rest (`{ result, ...rest }`), unless there is a result to leave out:
    // rest took 200-650 ns in V8 against 30 for a spread.
    const next: Writable<JobRecord> = record.result === undefined
      ? { ...record }
      : withoutResult(record);
    if (worker !== undefined) next.worker = worker;
    next.state = "completed";
    next.finishedAt = now;
    if (outcome.result !== undefined) next.result = outcome.result;
    return next;
  }
  const base = { ...record, ...(worker === undefined ? {} : { worker }) };
  switch (outcome.kind) {
    case "cancelled":
      return { ...base, state: "cancelled", finishedAt: now };
    case "failed": {
      const failed = {
        ...base,
        error: outcome.error,
        ...(outcome.lost ? { lost: Math.max(outcome.lost, record.lost ?? 0) } : {}),
      };
      const limit = record.own.attempts ?? defaults.attempts;
      if (record.attempts >= limit) return { ...failed, state: "dead", finishedAt: now };
      const backoff = record.own.backoff ?? defaults.backoff;
      const runAt = now + backoffDelay(backoff, record.attempts, random);
      return { ...failed, state: "failed", runAt };
    }
  }
}

/** A copy of `record` without its result (object rest: the rare path, see `finishTry`). */
function withoutResult(record: JobRecord): Writable<JobRecord> {
  const { result: _, ...rest } = record;
  return rest;
}

/** A dead job gets a fresh set of tries, due now. */
export function reviveDead(record: JobRecord, now: number): JobRecord {
  const { finishedAt: _, lost: __, ...rest } = record;
  return { ...rest, state: "waiting", attempts: 0, runAt: now };
}

/** The state a caller sees at time `now`: a waiting job not due yet is `scheduled`. */
export function publicState(record: JobRecord, now: number): JobState {
  return record.state === "waiting" && record.runAt > now ? "scheduled" : record.state;
}

/** Whether a record is finished for good (kept only for its retention). */
export function isTerminal(record: JobRecord): boolean {
  return record.state === "completed" || record.state === "cancelled";
}

/** Whether the job is in the backlog: not taken, and not finished. */
export function isQueued(record: JobRecord): boolean {
  return record.state === "waiting" || record.state === "failed";
}

/** The public view of a record at time `now`. */
export function infoOf(
  record: JobRecord,
  now: number,
  live?: { worker?: string; progress?: unknown },
): JobInfo {
  const state = publicState(record, now);
  const queued = state === "waiting" || state === "scheduled" || state === "failed";
  let result: unknown;
  if (record.result !== undefined) {
    try {
      result = JSON.parse(record.result);
    } catch {
      result = undefined;
    }
  }
  const worker = live?.worker ?? record.worker;
  // Fields assigned one by one, in this order, rather than spread from temporary objects: every
  // job's changes go through here.
  const info: Writable<JobInfo> = {
    id: record.id,
    state,
    attempts: record.attempts,
    priority: record.priority,
    enqueuedAt: record.enqueuedAt,
  };
  if (queued || state === "active") info.runAt = record.runAt;
  if (record.startedAt !== undefined) info.startedAt = record.startedAt;
  if (record.finishedAt !== undefined) info.finishedAt = record.finishedAt;
  if (worker !== undefined) info.worker = worker;
  if (record.result !== undefined) info.result = result;
  if (record.error !== undefined) info.error = record.error;
  if (state === "active" && live?.progress !== undefined) info.progress = live.progress;
  return info;
}
