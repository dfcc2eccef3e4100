/**
 * The shared mode of the Deno KV job store: several instances of one flow (Deno Deploy isolates,
 * or processes behind a load balancer) on one Deno KV, each with its own controller and its own
 * workers. Every instance serves the whole API (enqueue, get, cancel, dead letters) from KV;
 * each claims due jobs from the shared backlog only as its own workers have demand for them
 * (the job queue asks its store for work only when its controller grants credit), and holds
 * them under a lease; when an instance dies, a survivor takes its jobs back.
 *
 * The pieces, one a module:
 * - `backlog.ts`: the shared backlog, in KV only (other instances write it);
 * - `instance_queue.ts`: the jobs this instance holds and its controller's work queue over them,
 *   every write checked on the instance's fence;
 * - `leases.ts`: the lease, the instance registry, takeover, cancel requests;
 * - `placement.ts`: where a job lives in each state and how it comes back from a lost instance;
 * - `owned_index.ts`, `started_tries.ts`: what an instance holds, and the tries it started, a
 *   list a commit;
 * - `waker.ts`: how an idle instance learns of work (the flow's wake counter);
 * - `migration.ts`: a single-instance store's flow moving into the shared layout at load;
 * - `keys.ts`, `codec.ts`, `kv_writes.ts`: the key layout, the values, and commits that fit KV's
 *   limits (in order, or side by side) and retry `database is locked`.
 *
 * Timers (on the store's clock): a lease round every `renewInterval` (renew, read the registry,
 * take over lapsed instances, pick up cancel requests, refresh `counts()`, read the flow's pause
 * flag: a pause or resume on one instance reaches the others within it), at a steady cadence:
 * while a round is still busy (a takeover of many jobs on a busy KV) the tick renews the lease
 * alone, so slow work never lets this instance's own lease lapse. While the controller has an
 * open grant that found nothing due, the waker (`waker.ts`) watches and reads the flow's wake
 * counter, which every commit that readies a job moves, and wakes the controller when it moves
 * or the earliest due job falls due.
 *
 * @module
 */

import { type Clock, type TimerHandle, wallClock } from "../core/clock.ts";
import { SafeEventTarget } from "../core/safe_event_target.ts";
import { durationOption, identifierOption, optionsObject } from "../core/options.ts";
import type { JobInfo } from "../lifecycle/job_record.ts";
import { isKvLockedError, type KvKey } from "../queue/deno_kv/port.ts";
import { KvQueueLayout } from "../queue/deno_kv/layout.ts";
import {
  type ConfirmOptions,
  type LoadResult,
  type QueueBatch,
  type QueueBatchLimits,
  type QueueBatchResult,
  type QueueCallOptions,
  type QueueEpoch,
  QueueFencedError,
  type StoreRequest,
  type StoreResult,
} from "../queue/work_queue.ts";
import type {
  BacklogCounts,
  DeadLetterPage,
  EnqueueResult,
  InstanceInfo,
  JobStore,
  JobStoreListener,
  JobStoreSettings,
  NewJob,
  ReadyJob,
} from "../backlog/job_store.ts";
import { resolveStoreSettings, type StoreSettingsOptions } from "../backlog/store_settings.ts";
import { type BacklogNotice, SharedBacklog } from "./backlog.ts";
import { ClusterKeys } from "./keys.ts";
import { PauseFlag } from "../backlog/deno_kv/pause_flag.ts";
import type { ClusterKvLike } from "./kv_writes.ts";
import { InstanceQueue } from "./instance_queue.ts";
import { Leases, type ListedLease, type Takeover } from "./leases.ts";
import { Waker } from "./waker.ts";

export type { Takeover } from "./leases.ts";
export type { ClusterAtomicLike, ClusterKvLike, ClusterListSelector } from "./kv_writes.ts";

/** How this process takes part in the shared flow. */
export interface InstanceOptions {
  /**
   * This instance's id (at most 256 characters). Default: a random UUID, so that a restarted
   * process is a new instance and its predecessor's jobs are taken over when its lease lapses.
   * Give a stable id (a pod name, a region) and a restart takes its own jobs back at once.
   */
  readonly id?: string;
  /** Where this instance serves (shown in the registry), e.g. `https://eu.example.com`. */
  readonly address?: string;
  /** How long a lease lasts without renewal, ms. Default 10,000 (500..600,000). */
  readonly leaseTtl?: number;
  /** How often the lease is renewed (and the others checked), ms. Default `leaseTtl / 3`. */
  readonly renewInterval?: number;
  /**
   * The longest wait between two reads of the flow's wake counter while this instance's workers
   * wait for work, ms (see `waker.ts`: reads start 5 ms after work was last found and double up
   * to this). Default 250 (1..60,000): an idle instance reads one key 240 times a minute.
   */
  readonly pollInterval?: number;
  /**
   * Also watch the wake counter, on Deno's own KV (`Deno.openKv`): on Deno Deploy's hosted KV
   * and KV Connect a job added on any instance wakes the others at once. Default true; npm
   * `@deno/kv` handles are never watched.
   */
  readonly watch?: boolean;
}

/** Options of {@linkcode DenoKvClusterStore}. */
export interface DenoKvClusterStoreOptions extends StoreSettingsOptions {
  /** The key prefix of the shared flow: the same on every instance. Default `["workpull"]`. */
  readonly prefix?: KvKey;
  /** The time source: wall-clock ms (due times and leases). Default `wallClock`. */
  readonly clock?: Clock;
  /** Randomness for backoff jitter. Default `Math.random`. */
  readonly random?: () => number;
  /** This instance. */
  readonly instance?: InstanceOptions;
}

/**
 * An instance was taken over by this one: its lease had lapsed, its epoch is fenced, and its
 * jobs went back to the shared backlog.
 *
 * @example
 * ```ts
 * import { TakeoverEvent } from "./cluster_store.ts";
 * const event = new TakeoverEvent({ instance: "b", epoch: 1, jobs: 3, expiredAt: 0, at: 10 });
 * console.assert(event.type === "takeover" && event.takeover.jobs === 3);
 * ```
 */
export class TakeoverEvent extends Event {
  /** Creates the event. */
  constructor(
    /** What the takeover did. */
    readonly takeover: Takeover,
  ) {
    super("takeover");
  }
}

/**
 * This instance was taken over by another process (its lease had lapsed): it writes nothing
 * more until it loads again.
 *
 * @example
 * ```ts
 * import { FencedEvent } from "./cluster_store.ts";
 * const event = new FencedEvent(new Error("fenced"));
 * console.assert(event.type === "fenced");
 * ```
 */
export class FencedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** Why (a `QueueFencedError`). */
    readonly error: Error,
  ) {
    super("fenced");
  }
}

/** The events of a {@linkcode DenoKvClusterStore}. */
export interface ClusterStoreEventMap {
  /** This instance took another over. */
  takeover: TakeoverEvent;
  /** Another process took this instance over. */
  fenced: FencedEvent;
}

const OWNER = "DenoKvClusterStore";

/**
 * A KV file that stayed locked past the retries (`database is locked`, a `TypeError`) becomes a
 * plain `Error` saying so: nothing was written and the call may be made again; it is no mistake
 * of the caller's (an HTTP route answers 503, not 400). The message keeps "database is locked".
 */
async function busy<T>(what: string, call: Promise<T>): Promise<T> {
  try {
    return await call;
  } catch (error) {
    if (!isKvLockedError(error)) throw error;
    throw new Error(
      `Cannot ${what}: the KV store stayed busy (database is locked); nothing was written`,
      { cause: error },
    );
  }
}
/** Whether `kv` is Deno's own KV handle (`Deno.openKv`), without naming a Deno type. */
function isDenoKv(kv: unknown): boolean {
  const denoKv = (globalThis as { Deno?: { Kv?: abstract new () => unknown } }).Deno?.Kv;
  return typeof denoKv === "function" && kv instanceof denoKv;
}

const NO_COUNTS: BacklogCounts = { waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 };

/**
 * One instance of a flow shared by several processes on one Deno KV. Use it as the store of a
 * `JobQueue` in every process; the KV handle stays the caller's to close.
 *
 * @example Two instances of one flow (here in one process, on one KV)
 * ```ts
 * import { DenoKvClusterStore } from "./cluster_store.ts";
 * import { JobQueue } from "../backlog/job_queue.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const [a, b] = ["a", "b"].map((id) =>
 *   new JobQueue({
 *     name: "emails",
 *     store: new DenoKvClusterStore(kv, { prefix: ["emails"], instance: { id } }),
 *   })
 * );
 * await a.start();
 * await b.start();
 * await a.add({ to: "ada@example.com" }, { messageId: "welcome-ada" });
 * console.assert((await b.get("welcome-ada"))?.state === "waiting"); // any instance sees it
 * console.assert((await b.instances())?.length === 2);
 * await a.close();
 * await b.close();
 * kv.close();
 * ```
 */
export class DenoKvClusterStore extends SafeEventTarget<ClusterStoreEventMap> implements JobStore {
  /** What one group commit may carry. */
  // A unit's changes go in as many commits as KV's limits need, all in flight at once.
  readonly batchLimits: QueueBatchLimits = { maxOperations: 2_000, maxBytes: 4 * 1024 * 1024 };
  /** The largest payload: 640 KiB (a job's parts fit one commit). */
  readonly maxPayloadBytes = 640 * 1024;
  /** The settings it applies. */
  readonly settings: JobStoreSettings;
  /** Its time source. */
  readonly clock: Clock;
  /** This instance's id. */
  readonly instance: string;
  readonly #backlog: SharedBacklog;
  readonly #queue: InstanceQueue;
  readonly #leases: Leases;
  readonly #renewInterval: number;
  readonly #pollInterval: number;
  #listener: JobStoreListener | undefined;
  #counts: BacklogCounts = NO_COUNTS;
  #peers: { count: number; rank: number } = { count: 1, rank: 0 };
  #leaseTimer: TimerHandle | undefined;
  readonly #waker: Waker;
  #round: Promise<void> | undefined;
  /** The round a `renew()` made during `#round` waits for. */
  #nextRound: Promise<void> | undefined;
  /** The renewal in flight (a round's, or a tick's while a round is busy). */
  #renewal: Promise<boolean> | undefined;
  /** The epoch whose fencing was reported (one report per epoch). */
  #fencedEpoch = 0;
  readonly #leaseTtl: number;
  /** No takeovers before this time (after this instance's own lease had lapsed). */
  #restraintUntil = 0;
  readonly #pauseFlag: PauseFlag;
  /** The pause flag as this instance last read or wrote it (undefined: not read yet). */
  #paused: boolean | undefined;
  /** Pause flag reads and writes the owner completed: a round's read that one overtook is stale. */
  #pauseChanges = 0;

  /** Wraps a KV handle; throws an error naming a bad option. */
  constructor(kv: ClusterKvLike, options: DenoKvClusterStoreOptions = {}) {
    super();
    if (
      typeof kv !== "object" || kv === null || typeof kv.getMany !== "function" ||
      typeof kv.list !== "function" || typeof kv.atomic !== "function"
    ) {
      throw new TypeError(`Cannot create ${OWNER}: kv must be a Deno.Kv (getMany, list, atomic)`);
    }
    this.settings = resolveStoreSettings(OWNER, options);
    optionsObject(OWNER, options);
    const instance: InstanceOptions = options.instance ?? {};
    if (typeof instance !== "object" || instance === null) {
      throw new TypeError(`Cannot create ${OWNER}: option "instance" must be an object`);
    }
    this.instance = instance.id === undefined
      ? crypto.randomUUID()
      : identifierOption(OWNER, "instance.id", instance.id);
    const address = instance.address === undefined
      ? undefined
      : identifierOption(OWNER, "instance.address", instance.address, 2048);
    const ttl = durationOption(OWNER, "instance.leaseTtl", instance.leaseTtl, 10_000, 500, 600_000);
    this.#leaseTtl = ttl;
    this.#renewInterval = durationOption(
      OWNER,
      "instance.renewInterval",
      instance.renewInterval,
      Math.round(ttl / 3),
      10,
      ttl / 2,
    );
    this.#pollInterval = durationOption(
      OWNER,
      "instance.pollInterval",
      instance.pollInterval,
      250,
      1,
      60_000,
    );
    this.clock = options.clock ?? wallClock;
    const random = options.random ?? Math.random;
    if (typeof this.clock.now !== "function" || typeof this.clock.setTimeout !== "function") {
      throw new TypeError(
        `Cannot create ${OWNER}: option "clock" must implement now and setTimeout`,
      );
    }
    const prefix = new KvQueueLayout(options.prefix ?? ["workpull"]).prefix; // validates it
    const keys = new ClusterKeys(prefix);
    this.#pauseFlag = new PauseFlag(kv, prefix);
    if (instance.watch !== undefined && typeof instance.watch !== "boolean") {
      throw new TypeError(`Cannot create ${OWNER}: option "instance.watch" must be a boolean`);
    }
    this.#waker = new Waker({
      kv,
      key: keys.wake,
      clock: this.clock,
      maxPoll: this.#pollInterval,
      // npm @deno/kv's watch is left alone: on a file it sees only this process's writes, and
      // a cancelled watch of its (0.14) can spin the event loop for good.
      watch: (instance.watch ?? true) && isDenoKv(kv),
      wake: () => this.#listener?.ready(),
    });
    this.#backlog = new SharedBacklog(kv, keys, this.settings, this.clock);
    const placement = {
      keys,
      retention: this.settings.retainedJobs === 0 ? 0 : this.settings.retention,
    };
    const notify = (notice: BacklogNotice) => this.#notify(notice);
    // deno-lint-ignore prefer-const -- assigned below, read lazily by the queue's callbacks
    let leases!: Leases;
    this.#queue = new InstanceQueue({
      kv,
      keys,
      instance: this.instance,
      settings: this.settings,
      clock: this.clock,
      random,
      backlog: this.#backlog,
      maxPayloadBytes: this.maxPayloadBytes,
      lapsed: () => leases.lapsed,
      peers: () => this.#peers,
      leaseFor: (epoch) => leases.leaseFor(epoch),
      notify,
    }, placement);
    leases = this.#leases = new Leases({
      kv,
      keys,
      instance: this.instance,
      address,
      clock: this.clock,
      random,
      defaults: this.settings.defaults,
      placement,
      queue: this.#queue,
      figures: () => this.#figures(),
      notify,
    }, ttl);
  }

  /** Register the owner's listener. */
  listen(listener: JobStoreListener): void {
    this.#listener = listener;
  }

  /** Stop the timers and drop the listener (the instance's lease lapses; see `leave`). */
  close(): void {
    this.#stopTimers();
    this.#waker.close();
    this.#listener = undefined;
    this.#queue.close();
  }

  // ------------------------------------------------------------------------------------------
  // The backlog (any instance)

  /** Add jobs; known MessageIDs change nothing. */
  async enqueue(jobs: readonly NewJob[]): Promise<readonly EnqueueResult[]> {
    const copies = jobs.map((job) => ({ ...job }));
    const { results, notices } = await busy("enqueue", this.#backlog.enqueue(copies));
    for (const notice of notices) this.#notify(notice);
    return results;
  }

  /**
   * Claim up to `max` due jobs for this instance's controller. Nothing due (or a KV that stays
   * locked, which is retried): the waker wakes the controller when the flow's wake counter
   * moves or the earliest due job falls due.
   */
  async take(max: number): Promise<readonly ReadyJob[]> {
    if (!this.#hasWorkers()) {
      // A grant left open by workers that went: claim nothing another instance could run, and
      // give back what was claimed ahead; look again when the counter moves (a worker may come).
      await this.#queue.handBackLookahead().catch(() => {});
      this.#armWaker();
      return [];
    }
    let jobs: readonly ReadyJob[];
    try {
      jobs = await this.#queue.take(max);
    } catch (error) {
      this.#armWaker();
      if (isKvLockedError(error)) return [];
      throw error;
    }
    if (jobs.length === 0) this.#armWaker();
    else this.#waker.found();
    return jobs;
  }

  /** `take` answered from the jobs this instance claimed ahead, or undefined (then `take`). */
  takeNow(max: number): readonly ReadyJob[] | undefined {
    if (!this.#hasWorkers()) return undefined;
    const jobs = this.#queue.takeNow(max);
    if (jobs) this.#waker.found();
    return jobs;
  }

  /** A job as it is now. */
  get(id: string): Promise<JobInfo | undefined> {
    return busy("read a job", this.#backlog.get(id));
  }

  /**
   * Cancel a job. A queued one is cancelled at once; one this instance holds is reported
   * `active` (its controller cancels it); one another instance holds gets a cancel request
   * there, which that instance acts on within its `renewInterval`.
   */
  async cancel(id: string): Promise<JobInfo | undefined> {
    const { job, notice } = await busy("cancel", this.#backlog.cancel(id, this.instance));
    if (notice) this.#notify(notice);
    return job;
  }

  /** Dead jobs, oldest death first. */
  deadLetters(limit: number, cursor?: string): Promise<DeadLetterPage> {
    return busy("list dead letters", this.#backlog.deadLetters(limit, cursor));
  }

  /** Give a dead job a fresh set of tries. */
  async retryDead(id: string): Promise<JobInfo | undefined> {
    const notice = await busy("retry a dead job", this.#backlog.retryDead(id));
    if (notice) this.#notify(notice);
    return notice?.job;
  }

  /** Give every dead job a fresh set of tries. */
  async retryAllDead(): Promise<number> {
    let count = 0;
    for (const id of await busy("list dead letters", this.#backlog.deadIds())) {
      if (await this.retryDead(id)) count += 1;
    }
    return count;
  }

  /** Forget a dead job. */
  deleteDead(id: string): Promise<boolean> {
    return busy("delete a dead job", this.#backlog.deleteDead(id));
  }

  /** How many jobs are where across the flow, as of the last lease round. */
  counts(): BacklogCounts {
    return this.#counts;
  }

  /** Every instance in the registry, as read now. */
  async instances(): Promise<readonly InstanceInfo[]> {
    const now = this.clock.now();
    return (await this.#leases.list()).map(({ lease }) => ({
      ...lease,
      live: lease.expiresAt >= now,
      self: lease.id === this.instance,
    }));
  }

  // ------------------------------------------------------------------------------------------
  // The controller's work queue (this instance's jobs)

  /** Take a new epoch for this instance, read what it holds, and start the lease timer. */
  async load(options?: QueueCallOptions): Promise<LoadResult> {
    const result = await this.#queue.load(options?.signal);
    this.#fencedEpoch = 0;
    this.#startTimers();
    return result;
  }

  /** Start a try: the first store of a MessageID (in this try) wins. */
  store(
    epoch: QueueEpoch,
    request: StoreRequest,
    options?: QueueCallOptions,
  ): Promise<StoreResult> {
    return this.#fenced(
      this.#queue.store(
        epoch,
        request.messageId,
        request.proposedSeq,
        request.payload,
        options?.signal,
      ),
    );
  }

  /** Record that the producer removed the job from its source. */
  async accept(epoch: QueueEpoch, messageId: string, options?: QueueCallOptions): Promise<void> {
    await this.#fenced(this.#queue.commit(epoch, { accept: [messageId] }, options?.signal));
  }

  /** The try ended (`options.outcome`, completed by default); a no-op for an unknown one. */
  async confirmMessage(
    epoch: QueueEpoch,
    messageId: string,
    options?: ConfirmOptions,
  ): Promise<void> {
    const outcome = options?.outcome;
    const batch: QueueBatch = {
      confirm: [messageId],
      ...(outcome ? { outcomes: new Map([[messageId, outcome]]) } : {}),
    };
    await this.#fenced(this.#queue.commit(epoch, batch, options?.signal));
  }

  /** Stores, accepts and confirms all-or-nothing. */
  commit(
    epoch: QueueEpoch,
    batch: QueueBatch,
    options?: QueueCallOptions,
  ): Promise<QueueBatchResult> {
    return this.#fenced(this.#queue.commit(epoch, batch, options?.signal));
  }

  // ------------------------------------------------------------------------------------------
  // Leases

  /**
   * One lease round now (the timer runs one every `renewInterval`): renew this instance's
   * lease, read the registry, take over instances whose lease lapsed, hand cancel requests to
   * the controller, refresh `counts()`. Resolves after a round that started after the call: with
   * a round in flight, another runs once it is over.
   */
  renew(): Promise<void> {
    if (this.#round) {
      // The round in flight may have read the registry and the counts before the caller's latest
      // change: one more round after it, shared by every caller meanwhile (a round that another
      // caller started after this one ended began after the change too).
      this.#nextRound ??= this.#round.catch(() => {}).then(() => {
        this.#nextRound = undefined;
        return this.#round ?? this.renew();
      });
      return this.#nextRound;
    }
    this.#round = this.#leaseRound().finally(() => (this.#round = undefined));
    return this.#round;
  }

  /** Whether the flow is paused (see `JobQueue.pause`); read from KV. */
  async readPaused(options?: QueueCallOptions): Promise<boolean> {
    const paused = await this.#pauseFlag.read(options?.signal);
    this.#pauseChanges += 1;
    this.#paused = paused;
    return paused;
  }

  /** Persist a pause (true) or a resume (false) for every instance of the flow. */
  async writePaused(paused: boolean): Promise<void> {
    await this.#pauseFlag.write(paused, this.clock.now());
    this.#pauseChanges += 1;
    this.#paused = paused;
  }

  /** Hand this instance's jobs back to the shared backlog and remove its lease now. */
  async leave(): Promise<void> {
    this.#stopTimers();
    await this.#round;
    await this.#nextRound;
    await this.#renewal; // a renewal landing after the leave would write the lease back
    if (this.#queue.live) await this.#queue.leave();
  }

  async #leaseRound(): Promise<void> {
    const queue = this.#queue;
    if (queue.live && !(await this.#renewLease())) return;
    const now = this.clock.now();
    const listed = await this.#leases.list();
    const live: ListedLease[] = [];
    for (const entry of listed) {
      if (entry.lease.expiresAt >= now || entry.lease.id === this.instance) {
        live.push(entry);
        continue;
      }
      if (!queue.live || now < this.#restraintUntil) continue;
      const takeover = await this.#leases.takeOver(entry);
      if (takeover) {
        this.dispatchEvent(new TakeoverEvent(takeover));
        if (takeover.jobs > 0) this.#listener?.ready();
      }
    }
    const ids = live.map((entry) => entry.lease.id);
    if (!ids.includes(this.instance)) ids.push(this.instance);
    ids.sort();
    this.#peers = { count: ids.length, rank: ids.indexOf(this.instance) };
    if (queue.live) {
      for (const id of await this.#leases.cancelRequests()) {
        if (queue.holds(id)) this.#listener?.cancelRequested?.(id);
      }
    }
    this.#counts = await this.#backlog.counts(this.clock.now());
    if (queue.fenced) return this.#reportFenced();
    if (this.#paused === undefined) return; // the owner has not read it yet (it reads at start)
    const changes = this.#pauseChanges;
    const paused = await this.#pauseFlag.read();
    if (changes === this.#pauseChanges && paused !== this.#paused) {
      this.#paused = paused;
      this.#listener?.pausedChanged?.(paused);
    }
  }

  /** Renew this instance's lease (one renewal at a time); false when it was fenced. */
  #renewLease(): Promise<boolean> {
    this.#renewal ??= (async () => {
      if (!this.#queue.live) return true;
      // Renewing after this instance's own lease lapsed (it was paused, or could not write: a
      // shared SQLite file locked by a stopped process holds every instance up alike) makes it
      // take nobody over for a TTL: the others may have been held up the same way.
      const lapsed = this.#leases.lapsed;
      if (!(await this.#leases.renew())) {
        this.#reportFenced();
        return false;
      }
      if (lapsed) this.#restraintUntil = this.clock.now() + this.#leaseTtl;
      return true;
    })().finally(() => (this.#renewal = undefined));
    return this.#renewal;
  }

  /** Pass a fenced error on to the owner once per epoch; stop the timers. */
  #reportFenced(): void {
    if (this.#fencedEpoch === this.#queue.epoch) return;
    this.#fencedEpoch = this.#queue.epoch;
    this.#stopTimers();
    const error = new QueueFencedError(
      `Cannot write: instance ${this.instance} was taken over by another process (its lease lapsed)`,
    );
    this.dispatchEvent(new FencedEvent(error));
    this.#listener?.fenced?.(error);
  }

  /** A write that finds the instance fenced is reported like a renewal that does. */
  async #fenced<T>(write: Promise<T>): Promise<T> {
    try {
      return await write;
    } catch (error) {
      if (error instanceof QueueFencedError && this.#queue.fenced) this.#reportFenced();
      throw error;
    }
  }

  /** Whether a worker is connected to this instance's controller (true when it cannot tell). */
  #hasWorkers(): boolean {
    const stats = this.#listener?.stats?.();
    return !stats || stats.workers.some((worker) => worker.connected);
  }

  #figures(): { workers: number; inFlight: number; pending: number } {
    const stats = this.#listener?.stats?.();
    if (!stats) return { workers: 0, inFlight: 0, pending: 0 };
    let workers = 0, inFlight = 0;
    for (const worker of stats.workers) {
      if (worker.connected) workers += 1;
      inFlight += worker.inFlight;
    }
    return { workers, inFlight, pending: stats.pending };
  }

  #notify({ job, previous }: BacklogNotice): void {
    const listener = this.#listener;
    if (!listener) return;
    listener.changed(job, previous);
    if (job.state === "waiting") listener.ready();
  }

  #startTimers(): void {
    this.#stopTimers();
    const failed = (error: unknown) =>
      console.error(`workpull: instance ${this.instance}'s lease round failed`, error);
    const tick = () => {
      this.#leaseTimer = this.clock.setTimeout(() => {
        tick(); // the cadence holds however long this round takes
        if (this.#round === undefined) this.renew().catch(failed);
        else this.#renewLease().catch(failed);
      }, this.#renewInterval);
    };
    tick();
    this.renew().catch(() => {}); // learn the registry and the counts now
  }

  #stopTimers(): void {
    this.#leaseTimer?.cancel();
    this.#leaseTimer = undefined;
    this.#waker.disarm();
  }

  /** An open grant found nothing due: wake on the next change, or when a job falls due. */
  #armWaker(): void {
    if (!this.#queue.live || this.#leaseTimer === undefined) return;
    this.#waker.arm(this.#queue.nextDue);
  }
}
