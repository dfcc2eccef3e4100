/**
 * The job store contract: where a flow's jobs live from submission to their end. It is two things
 * at once, over the same records:
 *
 * - **the backlog**: `enqueue` takes jobs whether or not a worker is online (idempotent by
 *   MessageID, bounded by `maxBacklog`), `take` hands out the due ones in priority order, and
 *   `get`, `cancel` and the dead-letter calls serve the API;
 * - **the controller's {@linkcode DurableWorkQueue}**: a taken job is stored and accepted when
 *   the controller takes it (a try starts), and its confirmation carries the try's outcome,
 *   which the store turns into the job's next state (completed, retried after its backoff, dead,
 *   cancelled) in the same write.
 *
 * So the delivery core stays the spec's (credit, fencing and the durable lane are unchanged), the
 * backlog-fed producer answers grants from `take`, and one write per step keeps a job's state
 * and its place in the work queue from ever disagreeing after a crash.
 *
 * @module
 */

import type { JobInfo, JobOutcome, JobRecord } from "../lifecycle/job_record.ts";
import type { JobPlan, ResolvedDefaults } from "../lifecycle/job_options.ts";
import type { DurableWorkQueue, QueueCallOptions } from "../queue/work_queue.ts";
import type { Clock } from "../core/clock.ts";
import type { ControllerStats } from "../controller/controller.ts";

/** A job to add to the backlog. */
export interface NewJob {
  /** Its MessageID. */
  readonly id: string;
  /** Its payload as JSON text. */
  readonly payload: string;
  /** Its validated lifecycle options. */
  readonly plan: JobPlan;
}

/** What `enqueue` says about one job. */
export interface EnqueueResult {
  /** The job as it is now. */
  readonly job: JobInfo;
  /** True when this call created it; false when the MessageID was known (nothing changed). */
  readonly created: boolean;
}

/** A due job handed to the producer. */
export interface ReadyJob {
  /** Its MessageID. */
  readonly messageId: string;
  /** Its payload as JSON text. */
  readonly payload: string;
  /** The try this will be (1 for the first). */
  readonly attempt: number;
  /** How long the try may take, ms (0 = no limit). */
  readonly timeout: number;
  /** Workers lost while running it in earlier tries (absent: none). */
  readonly lost?: number;
}

/** A page of dead letters, oldest death first. */
export interface DeadLetterPage {
  /** The dead jobs. */
  readonly jobs: readonly JobInfo[];
  /** Pass it back to get the next page; absent on the last page. */
  readonly cursor?: string;
}

/** How many jobs are where. */
export interface BacklogCounts {
  /** Due and waiting for a worker. */
  readonly waiting: number;
  /** Not due yet (delayed). */
  readonly scheduled: number;
  /** Failed, waiting out their backoff. */
  readonly failed: number;
  /** Taken by the controller: in its pool or at a worker. */
  readonly active: number;
  /** Out of tries. */
  readonly dead: number;
}

/** What a job store tells its owner. */
export interface JobStoreListener {
  /** Due jobs may be available (after an enqueue, or when scheduled ones fell due). */
  ready(): void;
  /** A job moved (after the write is durable). */
  changed(job: JobInfo, previous: JobRecord["state"] | undefined): void;
  /**
   * Optional: whether the owner needs `changed` for job `id` now (absent: for every job). A
   * store may skip a change nobody follows, and the `JobInfo` it would build for it.
   */
  follows?(id: string): boolean;
  /** Optional, for a store shared by several instances: the owner's controller figures. */
  stats?(): ControllerStats;
  /**
   * Optional, for a shared store: another instance asked to cancel a job this instance holds
   * (the owner's controller cancels it).
   */
  cancelRequested?(id: string): void;
  /**
   * Optional, for a shared store: another process took this instance over (its lease had
   * lapsed); every write of this instance now fails until it loads again, so the owner stops.
   */
  fenced?(error: Error): void;
  /**
   * Optional, for a shared store: another process paused or resumed the flow (its pause flag
   * changed); the owner stops or restarts handing out jobs.
   */
  pausedChanged?(paused: boolean): void;
}

/** One instance of a flow that several processes share (see `DenoKvClusterStore`). */
export interface InstanceInfo {
  /** The instance's id. */
  readonly id: string;
  /** Where it serves, as it was configured. */
  readonly address?: string;
  /** Its current epoch. */
  readonly epoch: number;
  /** When its lease lapses, epoch ms (on its own clock). */
  readonly expiresAt: number;
  /** When it last renewed its lease, epoch ms. */
  readonly heartbeat: number;
  /** When it loaded, epoch ms. */
  readonly startedAt: number;
  /** Worker endpoints connected to it. */
  readonly workers: number;
  /** Jobs at its workers, not yet confirmed. */
  readonly inFlight: number;
  /** Jobs in its controller's pool. */
  readonly pending: number;
  /** Jobs it holds (claimed from the backlog, or trying). */
  readonly claimed: number;
  /** The instance taking it over (its lease lapsed), while that happens. */
  readonly takenOverBy?: string;
  /** Whether its lease has not lapsed (on the reader's clock). */
  readonly live: boolean;
  /** Whether it is the instance that answered. */
  readonly self: boolean;
}

/** The lifecycle settings a store applies. */
export interface JobStoreSettings {
  /** Flow defaults for the jobs' lifecycle options. */
  readonly defaults: ResolvedDefaults;
  /** Most jobs waiting, scheduled or failed (active and finished ones do not count). */
  readonly maxBacklog: number;
  /** Completed and cancelled jobs are kept this long, ms. */
  readonly retention: number;
  /** At most this many completed and cancelled jobs are kept. */
  readonly retainedJobs: number;
}

/**
 * The backlog is full: the whole batch was refused and nothing was stored.
 *
 * @example
 * ```ts
 * import { BacklogFullError } from "./job_store.ts";
 * const error = new BacklogFullError(1000, 1000, 5);
 * console.assert(error.name === "BacklogFullError" && error.retryAfter === 1);
 * ```
 */
export class BacklogFullError extends Error {
  /** Suggested wait before trying again, seconds. */
  readonly retryAfter: number = 1;
  /** Creates the error. */
  constructor(
    /** The backlog's limit. */
    readonly limit: number,
    /** Jobs in the backlog now. */
    readonly size: number,
    /** Jobs the refused batch would have added. */
    readonly adding: number,
  ) {
    super(
      `Cannot enqueue ${adding} jobs: the backlog holds ${size} of at most ${limit}`,
    );
    this.name = "BacklogFullError";
  }
}

/** A job store: the backlog and the controller's durable work queue over the same records. */
export interface JobStore extends DurableWorkQueue {
  /** The settings it applies (fixed at construction). */
  readonly settings: JobStoreSettings;
  /** Its time source (wall-clock ms): due times and timestamps are on this clock. */
  readonly clock: Clock;
  /** Register the owner's listener (one; the `JobQueue`). */
  listen(listener: JobStoreListener): void;
  /**
   * Add jobs, all or none: a MessageID already known changes nothing and reports the job as it
   * is; rejects with {@linkcode BacklogFullError} when the new ones would pass `maxBacklog`.
   * Resolves once the jobs are durable.
   */
  enqueue(jobs: readonly NewJob[]): Promise<readonly EnqueueResult[]>;
  /**
   * Up to `max` due jobs, highest priority first, then earliest due, then first submitted; each
   * is reserved until the controller stores it (a try starts) and not handed out again.
   */
  take(max: number): Promise<readonly ReadyJob[]>;
  /**
   * `take` answered at once, when the store can without waiting (no other call is running);
   * undefined when it cannot, and then the caller uses `take`. Optional: a store without it
   * always answers through `take`.
   */
  takeNow?(max: number): readonly ReadyJob[] | undefined;
  /** A job as it is now, or undefined when unknown (or past its retention). */
  get(id: string): Promise<JobInfo | undefined>;
  /**
   * Cancel a job that is waiting, scheduled or failed (it never runs again). An active job is
   * left to the caller (the controller aborts it; its outcome then says cancelled). Resolves to
   * the job as it is afterwards, or undefined when unknown.
   */
  cancel(id: string): Promise<JobInfo | undefined>;
  /** Dead jobs, oldest death first, `limit` a page. */
  deadLetters(limit: number, cursor?: string): Promise<DeadLetterPage>;
  /** Give a dead job a fresh set of tries; undefined when it is not dead. */
  retryDead(id: string): Promise<JobInfo | undefined>;
  /** Give every dead job a fresh set of tries; resolves to how many. */
  retryAllDead(): Promise<number>;
  /** Forget a dead job; false when it is not dead. */
  deleteDead(id: string): Promise<boolean>;
  /** How many jobs are where. */
  counts(): BacklogCounts;
  /** Optional, for a store shared by several instances: every instance of the flow. */
  instances?(): Promise<readonly InstanceInfo[]>;
  /**
   * Optional, for a shared store: hand what this instance holds back to the shared backlog and
   * leave the flow now, rather than when its lease lapses.
   */
  leave?(): Promise<void>;
  /**
   * Optional, for a durable store: whether the flow is paused, as persisted (a pause outlives
   * the process that set it). A store without it keeps no pause: the owner holds it in memory.
   * A busy backend is tried again until `signal` aborts.
   */
  readPaused?(options?: QueueCallOptions): Promise<boolean>;
  /**
   * Optional, with `readPaused`: persist a pause (true) or a resume (false) for every process of
   * the flow; resolves once it is durable.
   */
  writePaused?(paused: boolean): Promise<void>;
  /** Stop timers and drop listeners (the store's data stays). */
  close(): void;
}

/** The outcome a plain confirmation (without one) stands for. */
export const COMPLETED: JobOutcome = { kind: "completed" };
