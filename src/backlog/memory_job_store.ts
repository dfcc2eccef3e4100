/**
 * The in-memory job store: the {@linkcode JobStore} contract in its plainest form, for flows that
 * need no durability (a process exit loses the jobs) and as the model the Deno KV store is checked
 * against. Every call runs to completion before the next starts, so all are linearizable.
 *
 * Where a job is kept:
 * - its record (state, attempts, timestamps, result or error) in `#records`, its payload in
 *   `#payloads` until it finishes;
 * - a queued job (waiting, scheduled or failed) has one live entry in the `#due` heap (ordered by
 *   priority, then due time, then submission order) or the `#scheduled` heap (ordered by due
 *   time); entries are replaced, never edited, so a stale one is recognised and skipped;
 * - a taken job is reserved until the controller stores it; then it is in `#active`, the work
 *   queue the controller reloads from, until its confirmation carries the try's outcome;
 * - finished jobs are kept for the retention (by count and by age), dead ones until retried or
 *   deleted.
 *
 * @module
 */

import { type Clock, systemClock, type TimerHandle } from "../core/clock.ts";
import { Heap } from "../core/heap.ts";
import { RecentMap } from "../core/recent_map.ts";
import {
  finishTry,
  infoOf,
  isQueued,
  type JobInfo,
  type JobOutcome,
  type JobRecord,
  newRecord,
  reviveDead,
  startTry,
  tryTimeout,
} from "../lifecycle/job_record.ts";
import { planJob } from "../lifecycle/job_options.ts";
import {
  type CompletedMessage,
  type ConfirmOptions,
  type LoadResult,
  type QueueBatch,
  type QueueBatchLimits,
  type QueueBatchResult,
  type QueueCallOptions,
  QueueConflictError,
  type QueueEpoch,
  QueueFencedError,
  type StoreRequest,
  type StoreResult,
  type UnconfirmedMessage,
} from "../queue/work_queue.ts";
import {
  type BacklogCounts,
  BacklogFullError,
  COMPLETED,
  type DeadLetterPage,
  type EnqueueResult,
  type JobStore,
  type JobStoreListener,
  type JobStoreSettings,
  type NewJob,
  type ReadyJob,
} from "./job_store.ts";
import { resolveStoreSettings, type StoreSettingsOptions } from "./store_settings.ts";

/** A queued job's place in the order. */
interface Entry {
  readonly id: string;
  readonly priority: number;
  readonly runAt: number;
  readonly order: number;
}

/** A job the controller stored (a try in progress), as the work queue sees it. */
interface Active {
  readonly seq: number;
  accepted: boolean;
  confirmed: boolean;
  outcome: JobOutcome | undefined;
}

/** Options of {@linkcode MemoryJobStore}. */
export interface MemoryJobStoreOptions extends StoreSettingsOptions {
  /** The time source. Default: the system clock. */
  readonly clock?: Clock;
  /** Randomness for backoff jitter. Default `Math.random`. */
  readonly random?: () => number;
}

/** Due jobs first by priority (higher first), then due time, then submission order. */
export function readyOrder(a: Entry, b: Entry): number {
  return b.priority - a.priority || a.runAt - b.runAt || a.order - b.order;
}

const byDueTime = (a: Entry, b: Entry) => a.runAt - b.runAt || a.order - b.order;

/**
 * A process-local {@linkcode JobStore}.
 *
 * @example A delayed job becomes due
 * ```ts
 * import { MemoryJobStore } from "./memory_job_store.ts";
 * import { planJob } from "../lifecycle/job_options.ts";
 * import { SimulatedClock } from "../core/clock.ts";
 *
 * const clock = new SimulatedClock();
 * const store = new MemoryJobStore({ clock });
 * await store.enqueue([{ id: "j1", payload: "1", plan: planJob({ delay: 1000 }, clock.now()) }]);
 * console.assert((await store.take(10)).length === 0);
 * clock.advance(1000);
 * console.assert((await store.take(10))[0].messageId === "j1");
 * ```
 */
export class MemoryJobStore implements JobStore {
  /** Large enough never to be the bottleneck. */
  readonly batchLimits: QueueBatchLimits = { maxOperations: 10_000, maxBytes: 64 * 1024 * 1024 };
  /** The settings it applies. */
  readonly settings: JobStoreSettings;
  /** Its time source. */
  readonly clock: Clock;
  readonly #clock: Clock;
  readonly #random: () => number;
  #epoch = 0;
  #currentSeq = 0;
  #order = 0;
  readonly #records = new Map<string, JobRecord>();
  readonly #payloads = new Map<string, string>();
  readonly #entries = new Map<string, Entry>();
  readonly #due = new Heap<Entry>(readyOrder);
  readonly #scheduled = new Heap<Entry>(byDueTime);
  readonly #reserved = new Set<string>();
  readonly #active = new Map<string, Active>();
  readonly #dead = new Map<string, true>();
  /** Finished jobs in finishing order, a ring of `retainedJobs`: the oldest is forgotten. */
  readonly #finished: ({ id: string; at: number } | undefined)[];
  #finishedNext = 0;
  readonly #completedSeqs: RecentMap<string, number>;
  #listener: JobStoreListener | undefined;
  #timer: TimerHandle | undefined;
  #timerAt = Infinity;

  /** Creates an empty store; throws an error naming a bad option. */
  constructor(options: MemoryJobStoreOptions = {}) {
    this.settings = resolveStoreSettings("MemoryJobStore", options);
    this.#clock = this.clock = options.clock ?? systemClock;
    this.#random = options.random ?? Math.random;
    this.#finished = new Array(this.settings.retainedJobs);
    this.#completedSeqs = new RecentMap(Math.min(this.settings.retainedJobs, 10_000));
  }

  /** Register the owner's listener. */
  listen(listener: JobStoreListener): void {
    this.#listener = listener;
    this.#arm();
  }

  /** Stop the due-time timer and drop the listener. */
  close(): void {
    this.#timer?.cancel();
    this.#timer = undefined;
    this.#timerAt = Infinity;
    this.#listener = undefined;
  }

  // ------------------------------------------------------------------------------------------
  // The backlog

  /** Add jobs, all or none; known MessageIDs change nothing. */
  enqueue(jobs: readonly NewJob[]): Promise<readonly EnqueueResult[]> {
    return this.#run(undefined, () => {
      const now = this.#clock.now();
      const fresh = new Set<string>();
      for (const job of jobs) if (!this.#known(job.id, now)) fresh.add(job.id);
      const size = this.#entries.size + this.#reserved.size;
      if (fresh.size > 0 && size + fresh.size > this.settings.maxBacklog) {
        throw new BacklogFullError(this.settings.maxBacklog, size, fresh.size);
      }
      const results: EnqueueResult[] = [];
      let due = false;
      for (const job of jobs) {
        const known = this.#records.get(job.id);
        if (known && !fresh.has(job.id)) {
          results.push({ job: infoOf(known, now), created: false });
          continue;
        }
        fresh.delete(job.id);
        const record = newRecord(job.id, job.plan, now);
        this.#records.set(job.id, record);
        this.#payloads.set(job.id, job.payload);
        if (this.#place(record, now)) due = true;
        results.push({ job: infoOf(record, now), created: true });
        this.#listener?.changed(infoOf(record, now), undefined);
      }
      this.#arm();
      if (due) this.#listener?.ready();
      return results;
    });
  }

  /** Up to `max` due jobs in order; each is reserved until stored. */
  take(max: number): Promise<readonly ReadyJob[]> {
    return this.#run(undefined, () => {
      const now = this.#clock.now();
      this.#promote(now);
      const ready: ReadyJob[] = [];
      while (ready.length < max && this.#due.size > 0) {
        const entry = this.#due.pop()!;
        if (this.#entries.get(entry.id) !== entry) continue; // stale
        this.#entries.delete(entry.id);
        this.#reserved.add(entry.id);
        const record = this.#records.get(entry.id)!;
        ready.push({
          messageId: entry.id,
          payload: this.#payloads.get(entry.id)!,
          attempt: record.attempts + 1,
          timeout: tryTimeout(record, this.settings.defaults),
        });
      }
      this.#arm();
      return ready;
    });
  }

  /** A job as it is now. */
  get(id: string): Promise<JobInfo | undefined> {
    return this.#run(undefined, () => {
      const now = this.#clock.now();
      if (!this.#known(id, now)) return undefined;
      return infoOf(this.#records.get(id)!, now);
    });
  }

  /** Cancel a queued job; an active (or reserved) one is left to the caller. */
  cancel(id: string): Promise<JobInfo | undefined> {
    return this.#run(undefined, () => {
      const now = this.#clock.now();
      if (!this.#known(id, now)) return undefined;
      const record = this.#records.get(id)!;
      if (this.#reserved.has(id)) return { ...infoOf(record, now), state: "active" };
      if (!isQueued(record)) return infoOf(record, now);
      this.#entries.delete(id);
      return this.#settle({ ...record, state: "cancelled", finishedAt: now }, now, record.state);
    });
  }

  /** Dead jobs, oldest death first. */
  deadLetters(limit: number, cursor?: string): Promise<DeadLetterPage> {
    return this.#run(undefined, () => {
      const now = this.#clock.now();
      const ids = [...this.#dead.keys()];
      const start = cursor === undefined ? 0 : ids.indexOf(cursor) + 1;
      const page = ids.slice(start, start + limit);
      const jobs = page.map((id) => infoOf(this.#records.get(id)!, now));
      const more = start + limit < ids.length;
      return more ? { jobs, cursor: page.at(-1) } : { jobs };
    });
  }

  /** Give a dead job a fresh set of tries. */
  retryDead(id: string): Promise<JobInfo | undefined> {
    return this.#run(undefined, () => this.#revive(id, this.#clock.now()));
  }

  /** Give every dead job a fresh set of tries. */
  retryAllDead(): Promise<number> {
    return this.#run(undefined, () => {
      const now = this.#clock.now();
      let count = 0;
      for (const id of [...this.#dead.keys()]) if (this.#revive(id, now)) count += 1;
      return count;
    });
  }

  /** Forget a dead job. */
  deleteDead(id: string): Promise<boolean> {
    return this.#run(undefined, () => {
      if (!this.#dead.delete(id)) return false;
      this.#records.delete(id);
      this.#payloads.delete(id);
      return true;
    });
  }

  /** How many jobs are where. */
  counts(): BacklogCounts {
    const now = this.#clock.now();
    let waiting = 0, scheduled = 0, failed = 0;
    for (const entry of this.#entries.values()) {
      const state = this.#records.get(entry.id)!.state;
      if (state === "failed") failed += 1;
      else if (entry.runAt > now) scheduled += 1;
      else waiting += 1;
    }
    return {
      waiting: waiting + this.#reserved.size,
      scheduled,
      failed,
      active: this.#active.size,
      dead: this.#dead.size,
    };
  }

  // ------------------------------------------------------------------------------------------
  // The controller's work queue

  /** Snapshot the tries in progress and acquire writership under a new epoch. */
  load(options?: QueueCallOptions): Promise<LoadResult> {
    return this.#run(options, () => {
      const unconfirmed: UnconfirmedMessage[] = [];
      for (const [messageId, active] of this.#active) {
        if (!active.accepted || active.confirmed) continue;
        const record = this.#records.get(messageId)!;
        unconfirmed.push({
          messageId,
          seq: active.seq,
          payload: this.#payloads.get(messageId)!,
          attempt: record.attempts,
          timeout: tryTimeout(record, this.settings.defaults),
        });
      }
      unconfirmed.sort((a, b) => a.seq - b.seq);
      const recentlyCompleted: CompletedMessage[] = [];
      for (const [messageId, seq] of this.#completedSeqs) {
        recentlyCompleted.push({ messageId, seq });
      }
      this.#epoch += 1;
      const state = { currentSeq: this.#currentSeq, unconfirmed, recentlyCompleted };
      return { epoch: this.#epoch, state };
    });
  }

  /** Start a try: the first store of a MessageID (in this try) wins. */
  store(
    epoch: QueueEpoch,
    request: StoreRequest,
    options?: QueueCallOptions,
  ): Promise<StoreResult> {
    return this.#run(options, () => {
      this.#fence(epoch);
      checkJob(request.messageId, request.payload);
      const active = this.#active.get(request.messageId);
      if (active) return this.#repeat(request.messageId, active);
      if (request.proposedSeq !== this.#currentSeq + 1) {
        throw new QueueConflictError(
          `Cannot store ${request.messageId}: proposed sequence ${request.proposedSeq} is not ${
            this.#currentSeq + 1
          }`,
        );
      }
      return this.#start(request.messageId, request.payload);
    });
  }

  /** Record that the producer removed the job from its source. */
  accept(epoch: QueueEpoch, messageId: string, options?: QueueCallOptions): Promise<void> {
    return this.#run(options, () => {
      this.#fence(epoch);
      this.#mark(messageId, "accepted", undefined);
    });
  }

  /** The try ended (`options.outcome`, completed by default); a no-op for an unknown one. */
  confirmMessage(epoch: QueueEpoch, messageId: string, options?: ConfirmOptions): Promise<void> {
    return this.#run(options, () => {
      this.#fence(epoch);
      this.#mark(messageId, "confirmed", options?.outcome);
    });
  }

  /** Stores, accepts and confirms all-or-nothing. */
  commit(
    epoch: QueueEpoch,
    batch: QueueBatch,
    options?: QueueCallOptions,
  ): Promise<QueueBatchResult> {
    return this.#run(options, () => {
      this.#fence(epoch);
      const jobs = batch.store?.jobs ?? [];
      const fresh = new Set<string>();
      for (const job of jobs) {
        checkJob(job.messageId, job.payload);
        if (!this.#active.has(job.messageId)) fresh.add(job.messageId);
      }
      if (fresh.size > 0 && batch.store!.firstSeq !== this.#currentSeq + 1) {
        throw new QueueConflictError(
          `Cannot store a batch at ${batch.store!.firstSeq}: the next sequence is ${
            this.#currentSeq + 1
          }`,
        );
      }
      for (const id of batch.accept ?? []) {
        if (!this.#active.has(id) && !fresh.has(id)) {
          throw new QueueConflictError(`Cannot accept ${id}: unknown MessageID`);
        }
      }
      const stored = jobs.map((job) => {
        const active = this.#active.get(job.messageId);
        return active
          ? this.#repeat(job.messageId, active)
          : this.#start(job.messageId, job.payload);
      });
      // Flags first, outcomes at the end, so that a MessageID repeated in the batch is a repeat.
      const touched = new Set<string>();
      for (const id of batch.accept ?? []) {
        this.#active.get(id)!.accepted = true;
        touched.add(id);
      }
      for (const id of batch.confirm ?? []) {
        const active = this.#active.get(id);
        if (!active || active.confirmed) continue;
        active.confirmed = true;
        active.outcome = batch.outcomes?.get(id);
        touched.add(id);
      }
      for (const id of touched) this.#finishIfDone(id);
      return { stored };
    });
  }

  // ------------------------------------------------------------------------------------------

  /** Whether `id` is known now; a finished job past its retention is forgotten here. */
  #known(id: string, now: number): boolean {
    const record = this.#records.get(id);
    if (!record) return false;
    const terminal = record.state === "completed" || record.state === "cancelled";
    if (terminal && now - (record.finishedAt ?? now) > this.settings.retention) {
      this.#records.delete(id);
      return false;
    }
    return true;
  }

  #repeat(messageId: string, active: Active): StoreResult {
    return { seq: active.seq, alreadyStored: true, payload: this.#payloads.get(messageId)! };
  }

  /** A try starts for `messageId` at the next sequence. */
  #start(messageId: string, payload: string): StoreResult {
    const now = this.#clock.now();
    let record = this.#known(messageId, now) ? this.#records.get(messageId)! : undefined;
    if (!record) {
      record = newRecord(messageId, planJob({}, now), now);
      this.#payloads.set(messageId, payload);
    } else if (!this.#payloads.has(messageId)) {
      this.#payloads.set(messageId, payload); // a finished job stored again counts as new
    }
    this.#entries.delete(messageId);
    this.#reserved.delete(messageId);
    this.#dead.delete(messageId);
    const previous = record.state;
    const started = startTry(record, now);
    this.#records.set(messageId, started);
    this.#currentSeq += 1;
    this.#active.set(messageId, {
      seq: this.#currentSeq,
      accepted: false,
      confirmed: false,
      outcome: undefined,
    });
    this.#listener?.changed(infoOf(started, now), previous);
    return { seq: this.#currentSeq, alreadyStored: false, payload: this.#payloads.get(messageId)! };
  }

  #mark(messageId: string, flag: "accepted" | "confirmed", outcome: JobOutcome | undefined): void {
    const active = this.#active.get(messageId);
    if (!active && flag === "confirmed") return; // finished already: a no-op
    if (!active) throw new QueueConflictError(`Cannot accept ${messageId}: unknown MessageID`);
    if (flag === "confirmed") {
      if (active.confirmed) return;
      active.outcome = outcome;
    }
    active[flag] = true;
    this.#finishIfDone(messageId);
  }

  /** A try both accepted and confirmed is over: apply its outcome. */
  #finishIfDone(messageId: string): void {
    const active = this.#active.get(messageId);
    if (!active?.accepted || !active.confirmed) return;
    this.#active.delete(messageId);
    const now = this.#clock.now();
    const record = this.#records.get(messageId)!;
    const next = finishTry(
      record,
      active.outcome ?? COMPLETED,
      this.settings.defaults,
      now,
      this.#random,
    );
    if (next.state === "completed") this.#completedSeqs.set(messageId, active.seq);
    this.#settle(next, now, record.state);
  }

  /** Store a record's new state and put it where that state lives. */
  #settle(record: JobRecord, now: number, previous: JobRecord["state"]): JobInfo {
    this.#records.set(record.id, record);
    let due = false;
    if (record.state === "completed" || record.state === "cancelled") {
      this.#payloads.delete(record.id);
      this.#retain(record);
    } else if (record.state === "dead") {
      this.#dead.set(record.id, true);
    } else if (isQueued(record)) {
      due = this.#place(record, now);
    }
    const info = infoOf(record, now);
    this.#listener?.changed(info, previous);
    this.#arm();
    if (due) this.#listener?.ready();
    return info;
  }

  /** Put a queued record in the order; true when it is due now. */
  #place(record: JobRecord, now: number): boolean {
    const entry: Entry = {
      id: record.id,
      priority: record.priority,
      runAt: record.runAt,
      order: ++this.#order,
    };
    this.#entries.set(record.id, entry);
    if (record.runAt <= now) {
      this.#due.push(entry);
      return true;
    }
    this.#scheduled.push(entry);
    return false;
  }

  /** Keep a finished record for the retention; the oldest beyond the count is forgotten. */
  #retain(record: JobRecord): void {
    if (this.#finished.length === 0) return void this.#records.delete(record.id);
    const slot = this.#finishedNext;
    const old = this.#finished[slot];
    if (old && this.#records.get(old.id)?.finishedAt === old.at) this.#records.delete(old.id);
    this.#finished[slot] = { id: record.id, at: record.finishedAt! };
    this.#finishedNext = (slot + 1) % this.#finished.length;
  }

  #revive(id: string, now: number): JobInfo | undefined {
    const record = this.#records.get(id);
    if (!record || record.state !== "dead") return undefined;
    this.#dead.delete(id);
    return this.#settle(reviveDead(record, now), now, "dead");
  }

  /** Move the scheduled jobs that fell due into the due order. */
  #promote(now: number): void {
    while (this.#scheduled.size > 0 && this.#scheduled.peek()!.runAt <= now) {
      const entry = this.#scheduled.pop()!;
      if (this.#entries.get(entry.id) === entry) this.#due.push(entry);
    }
  }

  /** Wake the listener when the earliest scheduled job falls due. */
  #arm(): void {
    while (this.#scheduled.size > 0) {
      const top = this.#scheduled.peek()!;
      if (this.#entries.get(top.id) === top) break;
      this.#scheduled.pop(); // stale
    }
    const next = this.#scheduled.peek()?.runAt ?? Infinity;
    if (next === this.#timerAt || !this.#listener) return;
    this.#timer?.cancel();
    this.#timer = undefined;
    this.#timerAt = next;
    if (next === Infinity) return;
    this.#timer = this.#clock.setTimeout(() => {
      this.#timer = undefined;
      this.#timerAt = Infinity;
      this.#promote(this.#clock.now());
      this.#arm();
      this.#listener?.ready();
    }, Math.max(0, next - this.#clock.now()));
  }

  #fence(epoch: QueueEpoch): void {
    if (epoch === 0 || epoch !== this.#epoch) {
      throw new QueueFencedError(`Cannot write: epoch ${epoch} is fenced (current ${this.#epoch})`);
    }
  }

  #run<T>(options: QueueCallOptions | undefined, body: () => T): Promise<T> {
    try {
      options?.signal?.throwIfAborted();
      return Promise.resolve(body());
    } catch (error) {
      return Promise.reject(error);
    }
  }
}

function checkJob(messageId: string, payload: string): void {
  if (typeof messageId !== "string" || messageId.trim() === "") {
    throw new TypeError("Cannot store a job: messageId must be a non-blank string");
  }
  if (typeof payload !== "string" || payload === "") {
    throw new TypeError(`Cannot store ${messageId}: payload must be non-empty JSON text`);
  }
}
