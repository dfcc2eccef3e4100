/**
 * A job queue: a flow's backlog, lifecycle and controller in one object. Jobs are added whether
 * or not a worker is online (`add` resolves once they are in the store: with a durable store,
 * once they survive a crash); the controller hands due ones to workers as they pull; each try
 * ends completed (with the handler's result), failed (retried after a backoff, on any worker),
 * dead (out of tries: a dead letter), or cancelled.
 *
 * The pieces, each in its own module:
 * - the **job store** (`MemoryJobStore`, or `DenoKvJobStore` on Deno KV): records, backlog order,
 *   and the controller's durable work queue, over the same records;
 * - the **backlog producer**: answers the controller's grants from the store;
 * - the **controller** with `outcomes` on: workers report how each try ended, and the outcome
 *   rides with the confirmation into the store, which decides the job's next state.
 *
 * A queue can be **paused**: the backlog producer then takes nothing from the store, so no new
 * try starts, while jobs keep being added and the tries already at workers run to their end. A
 * durable store persists the pause (`readPaused`/`writePaused`): it outlives a restart, and a
 * shared flow's other instances follow it within their lease round.
 *
 * A queue can also add jobs on a **schedule** (every so many ms, or by a cron pattern): the
 * scheduler (`../schedule/scheduler.ts`) keeps each schedule's next run in the store as a delayed
 * job, under a MessageID that names the run, so every instance adds each run once.
 *
 * @module
 */

import { type Logger, loggerOption } from "../core/logger.ts";
import { SafeEventTarget } from "../core/safe_event_target.ts";
import { type ControllerStats, WorkPullingController } from "../controller/controller.ts";
import { ProgressEvent } from "../controller/events.ts";
import type { WorkPullingControllerOptions } from "../controller/options.ts";
import { type JobOptions, planJob } from "../lifecycle/job_options.ts";
import type { JobInfo, JobRecord } from "../lifecycle/job_record.ts";
import { JsonText } from "../protocol/json_text.ts";
import { MAX_ID_LENGTH } from "../protocol/schemas.ts";
import { utf8Length } from "../core/utf8.ts";
import { BacklogProducer } from "./backlog_producer.ts";
import type {
  BacklogCounts,
  DeadLetterPage,
  EnqueueResult,
  InstanceInfo,
  JobStore,
  NewJob,
} from "./job_store.ts";
import { MemoryJobStore } from "./memory_job_store.ts";
import { type ScheduledJob, type ScheduleInfo, Scheduler } from "../schedule/scheduler.ts";
import type { ScheduleWhen } from "../schedule/recurrence.ts";

/** Options of {@linkcode JobQueue}. */
export interface JobQueueOptions {
  /** The flow's name: what workers register for. */
  readonly name: string;
  /** Where jobs live. Default: a `MemoryJobStore` (nothing survives the process). */
  readonly store?: JobStore;
  /** Options passed to the controller (timing, windows, limits). */
  readonly controller?: Omit<
    WorkPullingControllerOptions,
    "name" | "producer" | "queue" | "outcomes" | "lostLimit" | "lookahead"
  >;
  /** Where contained failures are reported. Default: the controller's `logger`, else `console.error`. */
  readonly logger?: Logger;
}

/** One job to add with {@linkcode JobQueue.addMany}: its payload and options. */
export interface NewJobInput<T = unknown> extends JobOptions {
  /** The job's payload (JSON-serializable). */
  readonly payload: T;
}

/** What {@linkcode JobQueue.add} resolves to. */
export interface JobReceipt extends EnqueueResult {
  /** Resolves with the job once it is completed, dead or cancelled (in this process). */
  readonly finished: Promise<JobInfo>;
  /**
   * Resolves with the handler's result once the job completed; rejects with a
   * {@linkcode JobFailedError} when it ends dead or cancelled.
   */
  readonly result: Promise<unknown>;
}

/**
 * A job ended dead or cancelled.
 *
 * @example
 * ```ts
 * import { JobFailedError } from "./job_queue.ts";
 * const error = new JobFailedError({ id: "j1", state: "dead", attempts: 3, priority: 0, enqueuedAt: 0 });
 * console.assert(error.job.state === "dead");
 * ```
 */
export class JobFailedError extends Error {
  /** Creates the error. */
  constructor(
    /** The job as it ended. */
    readonly job: JobInfo,
  ) {
    super(
      `Job ${job.id} ended ${job.state}` +
        (job.error ? ` after ${job.attempts} tries: ${job.error.name}: ${job.error.message}` : ""),
    );
    this.name = "JobFailedError";
  }
}

/**
 * A job changed state (after the change is durable).
 *
 * @example
 * ```ts
 * import { JobChangedEvent } from "./job_queue.ts";
 * const event = new JobChangedEvent({ id: "j1", state: "waiting", attempts: 0, priority: 0, enqueuedAt: 0 }, undefined);
 * console.assert(event.type === "job" && event.job.id === "j1");
 * ```
 */
export class JobChangedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The job as it is now. */
    readonly job: JobInfo,
    /** Its previous state (undefined for a new job). */
    readonly previous: JobRecord["state"] | undefined,
  ) {
    super("job");
  }
}

/**
 * The queue was paused or resumed (here, or by another instance of a shared flow).
 *
 * @example
 * ```ts
 * import { PauseChangedEvent } from "./job_queue.ts";
 * const event = new PauseChangedEvent(true);
 * console.assert(event.type === "pause" && event.paused);
 * ```
 */
export class PauseChangedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** Whether the queue is paused now. */
    readonly paused: boolean,
  ) {
    super("pause");
  }
}

/**
 * Told of every job's change of state (see {@linkcode JobQueue.watchJobs}): the job as it is now
 * and its previous state (undefined for a new job).
 */
export type JobWatcher = (job: JobInfo, previous: JobRecord["state"] | undefined) => void;

/** The events of a {@linkcode JobQueue}. */
export interface JobQueueEventMap {
  /** A job changed state. */
  job: JobChangedEvent;
  /** A running job reported progress. */
  progress: ProgressEvent;
  /** The queue was paused or resumed. */
  pause: PauseChangedEvent;
}

/** What a job queue's stats add to the controller's. */
export interface JobQueueStats extends ControllerStats {
  /** How many jobs are where in the backlog. */
  readonly backlog: BacklogCounts;
  /** Whether the queue is paused: no new try starts (see {@linkcode JobQueue.pause}). */
  readonly paused: boolean;
  /** The queue's schedules (see {@linkcode JobQueue.schedule}). */
  readonly schedules: readonly ScheduleInfo[];
}

/** How long `start` tries to read a busy store's pause flag, ms (the controller's load: 3 × 5 s). */
const START_READ_MS = 15_000;

interface Waiter {
  resolve(job: JobInfo): void;
}

/**
 * A job queue.
 *
 * @example Retries, a result and a dead letter, in process
 * ```ts
 * import { JobQueue } from "./job_queue.ts";
 * import { MemoryJobStore } from "./memory_job_store.ts";
 * import { WorkerEndpoint } from "../worker/worker_endpoint.ts";
 * import { connectInProcess } from "../transport/in_process.ts";
 *
 * const queue = new JobQueue({
 *   name: "jobs",
 *   store: new MemoryJobStore({ defaults: { attempts: 2, backoff: { type: "fixed", delay: 10 } } }),
 * });
 * await queue.start();
 * connectInProcess(queue.controller, new WorkerEndpoint<{ n: number }>({
 *   producer: "jobs",
 *   name: "w1",
 *   handler: ({ payload }) => {
 *     if (payload.n < 0) throw new Error("negative");
 *     return payload.n * 2;
 *   },
 * }));
 * const doubled = await queue.add({ n: 21 });
 * console.assert((await doubled.result) === 42);
 * const bad = await queue.add({ n: -1 });
 * const ended = await bad.finished;
 * console.assert(ended.state === "dead" && ended.attempts === 2);
 * await queue.close();
 * ```
 */
export class JobQueue extends SafeEventTarget<JobQueueEventMap> {
  /** The flow's controller: attach workers to it (or serve it). */
  readonly controller: WorkPullingController;
  /** The job store. */
  readonly store: JobStore;
  readonly #producer: BacklogProducer;
  readonly #waiters = new Map<string, Waiter[]>();
  #jobWatchers: readonly JobWatcher[] = [];
  /** `finished`, bound once for every receipt. */
  readonly #finishedOf = (id: string) => this.finished(id);
  readonly #logger: Logger;
  readonly #progress = new Map<string, unknown>();
  /** Whether the queue is paused; undefined while `start` reads a durable store's pause. */
  #paused: boolean | undefined = false;
  readonly #scheduler: Scheduler;

  /** Validates `options`, throwing an error that names a bad option. */
  constructor(options: JobQueueOptions) {
    super();
    if (typeof options !== "object" || options === null) {
      throw new TypeError("Cannot create JobQueue: options must be an object");
    }
    const store = options.store ?? new MemoryJobStore();
    if (typeof store?.enqueue !== "function" || typeof store.take !== "function") {
      throw new TypeError('Cannot create JobQueue: option "store" must be a JobStore');
    }
    this.store = store;
    const logger = loggerOption("JobQueue", options.logger ?? options.controller?.logger);
    this.reportTo(logger);
    this.#logger = logger;
    this.#producer = new BacklogProducer(store, logger);
    this.controller = new WorkPullingController({
      ...options.controller,
      logger,
      name: options.name,
      producer: this.#producer,
      queue: store,
      outcomes: true,
      lostLimit: store.settings.defaults.lostLimit,
      // Jobs stay in the store until a worker can take them: priorities, delays and
      // cancellations then apply to every job not yet running, and instances share fairly.
      lookahead: 0,
    });
    store.listen({
      ready: () => this.#producer.ready(),
      changed: (job, previous) => this.#changed(job, previous),
      // A change matters to a listener of "job" events, a caller waiting for the job to finish,
      // or its progress to forget; building the others' JobInfo was half of what a job allocated.
      // The sizes first: a MessageID's first use as a native Map key costs it a hash (~0.5 µs).
      follows: (id) =>
        this.#jobWatchers.length > 0 || this.listens("job") ||
        (this.#waiters.size > 0 && this.#waiters.has(id)) ||
        (this.#progress.size > 0 && this.#progress.has(id)),
      // A store shared by several instances reports this instance's figures in its registry,
      // passes on cancel requests from other instances, and stops the controller once another
      // process took this instance over.
      stats: () => this.controller.stats(),
      cancelRequested: (id) => void this.controller.cancel(id),
      fenced: (error) => this.controller.fail(error, "lease"),
      pausedChanged: (paused) => this.#setPaused(paused),
    });
    this.controller.addEventListener("progress", (event) => {
      this.#progress.set(event.messageId, event.value);
      this.dispatchEvent(new ProgressEvent(event.messageId, event.worker, event.value));
    });
    this.#scheduler = new Scheduler({
      clock: store.clock,
      logger,
      add: (payload, options) => this.add(payload, options),
      cancel: (id) => this.cancel(id),
      check: (payload, options) =>
        void this.#prepare({ ...options, payload }, store.clock.now(), "job"),
    });
  }

  /** The flow's name. */
  get name(): string {
    return this.controller.name;
  }

  /**
   * Load the store and start serving workers. Nothing is handed out until a durable store's pause
   * is read: a queue paused before a restart starts paused. Then the schedules start: each
   * one's next run is stored.
   */
  async start(): Promise<void> {
    await this.#startController();
    this.#scheduler.start();
  }

  async #startController(): Promise<void> {
    if (!this.store.readPaused) return await this.controller.start();
    // The controller starts now, as without a pause to read (a server may attach workers at
    // once); the backlog hands out nothing until the pause is known.
    this.#paused = undefined;
    this.#producer.pause();
    const paused = this.#readPaused();
    const started = this.controller.start();
    try {
      this.#setPaused(await paused);
    } catch (error) {
      await started.catch(() => {});
      await this.controller.close();
      throw error;
    }
    await started;
  }

  /** Whether the queue is paused (see {@linkcode JobQueue.pause}). */
  get paused(): boolean {
    return this.#paused === true;
  }

  /**
   * Pause the queue: no new try starts until {@linkcode JobQueue.resume}. Jobs are still added
   * (they wait), and the tries already handed to workers (up to each worker's window) run to
   * their end. With a durable store the pause is persisted before this resolves: it outlives a
   * restart, and every instance of a shared flow follows it within its lease round.
   */
  async pause(): Promise<void> {
    await this.store.writePaused?.(true);
    this.#setPaused(true);
  }

  /** Resume a paused queue: waiting jobs go to workers again (persisted like the pause). */
  async resume(): Promise<void> {
    await this.store.writePaused?.(false);
    this.#setPaused(false);
  }

  /**
   * Add a job on a schedule: `when` is `{ every: ms }` (counted from the Unix epoch: 60,000 runs
   * at each whole minute) or `{ cron: "0 3 * * *", timezone: "Europe/Berlin" }` (default UTC), and
   * `job` the payload and options of every run. Each run is an ordinary job, with the MessageID
   * `<key>@<run time, ISO 8601>` and its time as `runAt`. The next run is stored ahead of time:
   * with a durable store, a run whose time passes while the server is down runs once it is back
   * (the earlier missed ones are skipped), and every instance of a shared flow that declares the
   * same schedule adds each run once. Schedules are not stored: declare them on each instance at
   * startup, before or after {@linkcode JobQueue.start}. Declaring a key again replaces the
   * schedule (its next run is cancelled unless it falls at the same time). Throws a `TypeError` or
   * `RangeError` naming a bad field.
   *
   * @example A report every night at 3:00 in Berlin
   * ```ts
   * import { JobQueue } from "./job_queue.ts";
   * const queue = new JobQueue({ name: "reports" });
   * queue.schedule("nightly", { cron: "0 3 * * *", timezone: "Europe/Berlin" }, {
   *   payload: { report: "sales" },
   *   attempts: 5,
   * });
   * await queue.start();
   * const [nightly] = queue.schedules();
   * console.assert(nightly.nextJob?.startsWith("nightly@"));
   * await queue.close();
   * ```
   */
  schedule<T>(key: string, when: ScheduleWhen, job: ScheduledJob<T>): ScheduleInfo {
    return this.#scheduler.set(key, when, job);
  }

  /**
   * Remove the schedule `key`: no further run is added here, and its next run, if not due yet, is
   * cancelled. Other instances that declare it go on adding its runs. Whether there was one.
   */
  unschedule(key: string): boolean {
    return this.#scheduler.delete(key);
  }

  /** The queue's schedules, with each one's next run. */
  schedules(): ScheduleInfo[] {
    return this.#scheduler.list();
  }

  /**
   * Add a job. Resolves once it is in the store (with a durable store: once it survives a
   * crash), whether or not a worker is online. A MessageID already known changes nothing: the
   * receipt says `created: false` and shows the job as it is. Rejects with a `TypeError` or
   * `RangeError` naming a bad field, or a `BacklogFullError`; nothing is stored then.
   */
  async add<T>(payload: T, options: JobOptions = {}): Promise<JobReceipt> {
    const [result] = await this.addMany([{ ...options, payload }]);
    return result;
  }

  /**
   * Add several jobs, all or none: one invalid job (the error names `jobs.<index>.<field>`) or a
   * full backlog refuses the whole batch.
   */
  async addMany<T>(jobs: readonly NewJobInput<T>[]): Promise<JobReceipt[]> {
    if (!Array.isArray(jobs)) throw new TypeError("Cannot add jobs: jobs must be an array");
    const now = this.store.clock.now();
    const prepared = jobs.map((job, index) => this.#prepare(job, now, `jobs.${index}`));
    const results = await this.store.enqueue(prepared);
    const finished = this.#finishedOf;
    return results.map((result) => new Receipt(result.job, result.created, finished));
  }

  /** A job as it is now (with the worker running it and its progress), or undefined. */
  async get(id: string): Promise<JobInfo | undefined> {
    const job = await this.store.get(id);
    if (!job || job.state !== "active") return job;
    const where = this.controller.locate(id);
    const progress = this.#progress.get(id);
    return {
      ...job,
      ...(where && where !== "pending" ? { worker: where } : {}),
      ...(progress === undefined ? {} : { progress }),
    };
  }

  /**
   * Cancel a job. A waiting, scheduled or failed job never runs (again) and is `cancelled` at
   * once; an active one is aborted at its worker (`delivery.signal`) and ends `cancelled`, not
   * retried, when the worker reports it. Resolves to the job as it is now, or undefined.
   */
  async cancel(id: string): Promise<JobInfo | undefined> {
    const job = await this.store.cancel(id);
    if (job?.state === "active") await this.controller.cancel(id);
    return job;
  }

  /** Dead jobs, oldest death first. */
  deadLetters(limit = 100, cursor?: string): Promise<DeadLetterPage> {
    return this.store.deadLetters(limit, cursor);
  }

  /** Give a dead job a fresh set of tries. */
  retryDead(id: string): Promise<JobInfo | undefined> {
    return this.store.retryDead(id);
  }

  /** Give every dead job a fresh set of tries; resolves to how many. */
  retryAllDead(): Promise<number> {
    return this.store.retryAllDead();
  }

  /** Forget a dead job. */
  deleteDead(id: string): Promise<boolean> {
    return this.store.deleteDead(id);
  }

  /** Resolves with the job once it is completed, dead or cancelled (in this process). */
  finished(id: string): Promise<JobInfo> {
    return new Promise((resolve) => {
      const waiters = this.#waiters.get(id) ?? [];
      waiters.push({ resolve });
      this.#waiters.set(id, waiters);
      // It may have finished already.
      this.store.get(id).then((job) => job && this.#settle(job), () => {});
    });
  }

  /** The controller's figures, the backlog's counts, whether the queue is paused, its schedules. */
  stats(): JobQueueStats {
    return {
      ...this.controller.stats(),
      backlog: this.store.counts(),
      paused: this.paused,
      schedules: this.#scheduler.list(),
    };
  }

  /**
   * Be told of every job's change of state, as `job` events tell it, without an event object a
   * change (metrics follow every job this way); returns the function that stops it. The watcher
   * runs inside the store's turn: keep it short (a throw is logged and ignored).
   *
   * @example Count completed jobs
   * ```ts
   * import { JobQueue } from "./job_queue.ts";
   * const queue = new JobQueue({ name: "mail" });
   * let completed = 0;
   * const stop = queue.watchJobs((job) => {
   *   if (job.state === "completed") completed += 1;
   * });
   * stop();
   * ```
   */
  watchJobs(watcher: JobWatcher): () => void {
    this.#jobWatchers = [...this.#jobWatchers, watcher];
    return () => {
      this.#jobWatchers = this.#jobWatchers.filter((w) => w !== watcher);
    };
  }

  /**
   * Every instance of the flow, when its store is shared by several processes
   * (`DenoKvClusterStore`); undefined for a store of one process.
   */
  async instances(): Promise<readonly InstanceInfo[] | undefined> {
    return await this.store.instances?.();
  }

  /** Stop gracefully: no new tries, running ones finish and are written (see the controller). */
  async drain(timeout?: number): Promise<void> {
    this.#scheduler.stop();
    this.#producer.close();
    await this.controller.drain(timeout);
    await this.#leave();
    this.store.close();
  }

  /** Stop for good (the store's data stays). */
  async close(): Promise<void> {
    this.#scheduler.stop();
    this.#producer.close();
    await this.controller.close();
    await this.#leave();
    this.store.close();
  }

  /**
   * The persisted pause, read at start: a backend busy with other processes (a shared SQLite
   * file) is tried again for up to {@linkcode START_READ_MS}, as long as the store's load may.
   */
  async #readPaused(): Promise<boolean> {
    const giveUp = new AbortController();
    const timer = this.store.clock.setTimeout(() => giveUp.abort(), START_READ_MS);
    try {
      return await this.store.readPaused!({ signal: giveUp.signal });
    } finally {
      timer.cancel();
    }
  }

  /** Pause or resume the producer; an event when it changes what `paused` says. */
  #setPaused(paused: boolean): void {
    const was = this.paused;
    this.#paused = paused;
    if (paused) this.#producer.pause();
    else this.#producer.resume();
    if (paused !== was) this.dispatchEvent(new PauseChangedEvent(paused));
  }

  /** A shared store hands what this instance still holds back to the other instances. */
  async #leave(): Promise<void> {
    try {
      await this.store.leave?.();
    } catch (error) {
      // Not fatal: the instance's lease lapses and another instance takes its jobs over.
      console.error("workpull: leaving the shared flow failed", error);
    }
  }

  /** Same as {@linkcode JobQueue.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  #prepare(job: NewJobInput<unknown>, now: number, where: string): NewJob {
    if (typeof job !== "object" || job === null) {
      throw new TypeError(`${where} must be an object with a payload`);
    }
    const id = job.messageId ?? crypto.randomUUID();
    if (typeof id !== "string" || id.trim() === "" || id.length > MAX_ID_LENGTH) {
      throw new TypeError(
        `${where}.messageId must be a non-blank string of at most ${MAX_ID_LENGTH} characters`,
      );
    }
    let text: string;
    try {
      text = JsonText.encode(job.payload).text;
    } catch {
      throw new TypeError(`${where}.payload must be JSON-serializable`);
    }
    const max = this.controller.maxPayloadBytes;
    if (text.length * 3 > max && utf8Length(text) > max) {
      throw new RangeError(`${where}.payload is ${utf8Length(text)} bytes; the maximum is ${max}`);
    }
    return { id, payload: text, plan: planJob(job, now, where) };
  }

  #changed(job: JobInfo, previous: JobRecord["state"] | undefined): void {
    if (job.state !== "active") this.#progress.delete(job.id);
    this.#settle(job);
    for (const watcher of this.#jobWatchers) {
      try {
        watcher(job, previous);
      } catch (error) {
        this.#logger.error("a job watcher threw", error);
      }
    }
    if (this.listens("job")) this.dispatchEvent(new JobChangedEvent(job, previous));
  }

  #settle(job: JobInfo): void {
    if (job.state !== "completed" && job.state !== "dead" && job.state !== "cancelled") return;
    if (this.#waiters.size === 0) return;
    const waiters = this.#waiters.get(job.id);
    if (!waiters) return;
    this.#waiters.delete(job.id);
    for (const waiter of waiters) waiter.resolve(job);
  }
}

/**
 * A receipt of `addMany`: a class, so that its `finished` and `result` are getters of the
 * prototype, not two closures and accessors made for every job added; waiting starts on first
 * use.
 */
class Receipt implements JobReceipt {
  #finished: Promise<JobInfo> | undefined;
  readonly #wait: (id: string) => Promise<JobInfo>;

  constructor(
    readonly job: JobInfo,
    readonly created: boolean,
    wait: (id: string) => Promise<JobInfo>,
  ) {
    this.#wait = wait;
  }

  get finished(): Promise<JobInfo> {
    return this.#finished ??= this.#wait(this.job.id);
  }

  get result(): Promise<unknown> {
    return this.finished.then((job) => {
      if (job.state !== "completed") throw new JobFailedError(job);
      return job.result;
    });
  }
}
