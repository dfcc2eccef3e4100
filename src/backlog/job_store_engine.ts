/**
 * The job store engine: the {@linkcode JobStore} contract over an in-memory index, written through
 * a {@linkcode Journal}. The in-memory store's journal keeps nothing; the Deno KV store's journal
 * commits every change (fenced by the epoch) before a call resolves, and re-reads the store after
 * a write whose outcome is unknown. Calls run one at a time, in call order, so all are
 * linearizable. Calls made while a commit is in flight wait together and then share one commit
 * (group commit): each runs in order on the index, their changes are written at once, and each
 * resolves once that write is durable (a failed write fails all of them).
 *
 * Where a job is kept: one {@linkcode JobSlot} a job in `#jobs`, a table keyed by MessageID that
 * hashes each key once (an engine's native `Map` spends about 0.5 µs on the first use of every
 * fresh MessageID, and the store used to look each job up in five of them). The slot holds:
 * - its record (state, attempts, timestamps, result or error), and its payload until it finishes;
 * - while it is queued (waiting, scheduled or failed), its live entry in the `#due` heap (ordered
 *   by priority, then due time, then submission order) or the `#scheduled` heap (ordered by due
 *   time); entries are replaced, never edited, so a stale one is recognised and skipped;
 * - whether it is reserved (taken, until the controller stores it); then its try in progress
 *   (`active`), the work queue the controller reloads from, until its confirmation carries the
 *   try's outcome.
 * Finished jobs are kept for the retention (by count and by age), dead ones (also listed in
 * `#dead`, in order of death) until retried or deleted.
 *
 * @module
 */

import { type Clock, type TimerHandle, wallClock } from "../core/clock.ts";
import { RunHeap } from "../core/run_heap.ts";
import { RecentMap } from "../core/recent_map.ts";
import { hashId, hashIds, IdTable } from "../core/id_table.ts";
import type { Writable } from "../core/writable.ts";
import { checkBatch, checkStoredJob } from "../queue/batch_checks.ts";
import {
  finishTry,
  infoOf,
  isQueued,
  isTerminal,
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
  type BatchOutcomes,
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

/** One call of the store's contract, waiting for its turn. */
interface Call {
  readonly options: QueueCallOptions | undefined;
  readonly body: () => unknown;
  /** MessageIDs it names: finished ones are looked up while the history is being read. */
  readonly mentions: readonly string[];
  readonly resolve: (result: unknown) => void;
  readonly reject: (error: unknown) => void;
}

/**
 * A group of calls stops taking more once it changed this many jobs, so that its commit usually
 * fits one KV transaction (the journal splits larger ones).
 */
const GROUP_CHANGES = 400;

/** A queued job's place in the order; live while its slot's `entry` is this one. */
interface Entry {
  readonly slot: JobSlot;
  readonly priority: number;
  readonly runAt: number;
  readonly order: number;
}

/** Everything the index keeps of one job (see the module text). */
class JobSlot {
  /** Its payload while it is live (not finished). */
  payload: string | undefined = undefined;
  /** Its live place in the order while it is queued. */
  entry: Entry | undefined = undefined;
  /** Taken from the backlog and not yet stored. */
  reserved = false;
  /** Its try in progress. */
  active: Active | undefined = undefined;
  /** Still in the index (a slot dropped from it is never used again). */
  live = true;
  /** Its latest place in the ring of finished jobs. */
  finishedPlace = -1;

  constructor(
    /** Its record. */
    public record: JobRecord,
    /** Its MessageID's `hashId`, computed once. */
    readonly hash: number,
  ) {}

  /** Its MessageID. */
  get id(): string {
    return this.record.id;
  }
}

/** A job the controller stored (a try in progress), as the work queue sees it. */
export interface Active {
  /** Its store sequence. */
  readonly seq: number;
  /** The Accept landed. */
  accepted: boolean;
  /** The confirmation landed (waiting for the Accept). */
  confirmed: boolean;
  /** The confirmed try's outcome, until the Accept lets it apply. */
  outcome: JobOutcome | undefined;
}

/** One job as a journal persists it: its record, its queue position, its try in progress. */
export interface JournalEntry {
  /** The record. */
  readonly record: JobRecord;
  /** Its submission order in the backlog (queued jobs). */
  readonly order?: number;
  /** Its try in progress (active jobs). */
  readonly active?: Active;
  /** Its payload while it is live, for a journal that keeps small ones with the record. */
  readonly payload?: string;
  /**
   * The change is only a try's start from the backlog: the record is `startTry` of the one last
   * persisted (a queued job), at `record.startedAt`, and the try is accepted, not confirmed.
   */
  readonly started?: boolean;
}

/** The durable state a journal reads back. */
export interface JournalSnapshot {
  /** The work queue's append cursor. */
  readonly currentSeq: number;
  /** Every job it keeps. */
  readonly entries: readonly JournalEntry[];
  /** The payloads of the jobs that still need them (not finished). */
  readonly payloads: ReadonlyMap<string, string>;
}

/** What changed in one call, for the journal to persist. */
export interface JournalChange {
  /** Changed jobs by MessageID (undefined: forget it). */
  readonly entries: ReadonlyMap<string, JournalEntry | undefined>;
  /** Of those, the ones that were finished (completed or cancelled) before the call. */
  readonly wereFinished: ReadonlySet<string>;
  /** Changed payloads by MessageID (undefined: delete it). */
  readonly payloads: ReadonlyMap<string, string | undefined>;
  /** The new append cursor, when it moved. */
  readonly currentSeq?: number;
}

/**
 * Where a store persists its changes. Finished jobs (completed, cancelled) are kept apart from
 * the live ones: a load reads only the live ones, so a restart does not wait for the retained
 * history; the store reads the finished ones afterwards (`readFinished`) and, until it has,
 * looks up the MessageIDs it is asked about (`lookupFinished`).
 */
export interface Journal {
  /** Acquire writership under a new epoch; the snapshot is the live state (none: keep memory). */
  open(signal?: AbortSignal): Promise<{ epoch: number; snapshot?: JournalSnapshot }>;
  /** Re-read the live state under `epoch` (after a write whose outcome is unknown). */
  reread(epoch: number, signal?: AbortSignal): Promise<JournalSnapshot | undefined>;
  /** Every finished job still retained. */
  readFinished(): Promise<readonly JournalEntry[]>;
  /** The finished jobs among `ids`, if retained. */
  lookupFinished(ids: readonly string[]): Promise<readonly JournalEntry[]>;
  /** Persist one call's changes under `epoch`; throws `QueueFencedError` if it is fenced. */
  commit(epoch: number, change: JournalChange, signal?: AbortSignal): Promise<void>;
}

/** A journal that keeps nothing: the in-memory store's. */
export const MEMORY_JOURNAL: Journal = {
  open: () => Promise.resolve({ epoch: 0 }),
  reread: () => Promise.resolve(undefined),
  readFinished: () => Promise.resolve([]),
  lookupFinished: () => Promise.resolve([]),
  commit: () => Promise.resolve(),
};

/** Options of the engine (and of every job store built on it). */
export interface JobStoreEngineOptions extends StoreSettingsOptions {
  /** The time source: wall-clock milliseconds (due times are epoch ms). Default `wallClock`. */
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
 * The job store logic over an in-memory index and a journal. Use `MemoryJobStore` or
 * `DenoKvJobStore`.
 *
 * @example A delayed job becomes due
 * ```ts
 * import { JobStoreEngine, MEMORY_JOURNAL } from "./job_store_engine.ts";
 * import { planJob } from "../lifecycle/job_options.ts";
 * import { SimulatedClock } from "../core/clock.ts";
 *
 * const clock = new SimulatedClock();
 * const store = new JobStoreEngine("a store", MEMORY_JOURNAL, { clock });
 * await store.load();
 * await store.enqueue([{ id: "j1", payload: "1", plan: planJob({ delay: 1000 }, clock.now()) }]);
 * console.assert((await store.take(10)).length === 0);
 * clock.advance(1000);
 * console.assert((await store.take(10))[0].messageId === "j1");
 * ```
 */
export class JobStoreEngine implements JobStore {
  /** What one group commit may carry. */
  readonly batchLimits: QueueBatchLimits;
  /** The settings it applies. */
  readonly settings: JobStoreSettings;
  /** Its time source. */
  readonly clock: Clock;
  readonly #clock: Clock;
  readonly #random: () => number;
  #epoch = 0;
  #loaded = false;
  #currentSeq = 0;
  #order = 0;
  readonly #jobs = new IdTable<JobSlot>();
  // Jobs come due mostly in the order they were added: RunHeap takes those in O(1).
  readonly #due = new RunHeap<Entry>(readyOrder);
  readonly #scheduled = new RunHeap<Entry>(byDueTime);
  /** Jobs with a live entry (queued), reserved, and with a try in progress. */
  #queued = 0;
  #reserved = 0;
  #active = 0;
  /** Dead jobs in order of death, each with its place in that order (a page's cursor). */
  readonly #dead = new Map<string, number>();
  #deaths = 0;
  /** Finished jobs in finishing order, a ring of `retainedJobs`: the oldest is forgotten. */
  readonly #finished: (JobSlot | undefined)[];
  #finishedNext = 0;
  readonly #completedSeqs: RecentMap<string, number>;
  #listener: JobStoreListener | undefined;
  #timer: TimerHandle | undefined;
  #timerAt = Infinity;
  readonly #journal: Journal;
  /**
   * Whether the journal persists changes: the in-memory store's keeps nothing, so it tracks none
   * of what a call changed (a fifth of its CPU a job went to building changes it threw away).
   */
  readonly #journaled: boolean;
  /** The last write's outcome is unknown: re-read the journal before the next call. */
  #stale = false;
  #tail: Promise<unknown> = Promise.resolve();
  /** Calls and tasks started and not yet settled (running or waiting for their turn). */
  #calls = 0;
  /** Calls waiting for their turn that a call made now joins (none once another task queued). */
  #group: Call[] | undefined;
  // What the running call changed, and what it will tell the listener once that is durable.
  readonly #changedEntries = new Set<string>();
  /** Jobs the running call started from their persisted record, with the record they got. */
  readonly #startedNow = new Map<string, JobRecord>();
  readonly #changedPayloads = new Map<string, string | undefined>();
  #seqMoved = false;
  readonly #wereFinished = new Set<string>();
  #notices: ((listener: JobStoreListener) => void)[] = [];
  /** The finished jobs are all in memory (after a load, they are read in the background). */
  #finishedRead = true;

  /** Creates an empty store; throws an error naming a bad option (`owner` names the store). */
  constructor(
    owner: string,
    journal: Journal,
    options: JobStoreEngineOptions = {},
    batchLimits: QueueBatchLimits = { maxOperations: 10_000, maxBytes: 64 * 1024 * 1024 },
  ) {
    this.settings = resolveStoreSettings(owner, options);
    this.#clock = this.clock = options.clock ?? wallClock;
    this.#random = options.random ?? Math.random;
    this.#finished = new Array(this.settings.retainedJobs);
    this.#completedSeqs = new RecentMap(Math.min(this.settings.retainedJobs, 10_000));
    this.#journal = journal;
    this.#journaled = journal !== MEMORY_JOURNAL;
    this.batchLimits = batchLimits;
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
    // Read now: the call may run later.
    jobs = jobs.map((job) => ({ id: job.id, payload: job.payload, plan: job.plan }));
    return this.#transact(undefined, () => {
      const now = this.#clock.now();
      const hashes = new Int32Array(jobs.length);
      hashIds(jobs.map((job) => job.id), hashes);
      let fresh = 0; // every repeat of a new MessageID in the batch counts here
      for (let i = 0; i < jobs.length; i++) {
        if (!this.#known(jobs[i].id, now, hashes[i])) fresh += 1;
      }
      const size = this.#queued + this.#reserved;
      if (fresh > 0 && size + fresh > this.settings.maxBacklog) {
        const distinct = new Set(jobs.map((job) => job.id).filter((id) => !this.#jobs.has(id)));
        if (size + distinct.size > this.settings.maxBacklog) {
          throw new BacklogFullError(this.settings.maxBacklog, size, distinct.size);
        }
      }
      const results: EnqueueResult[] = [];
      let due = false;
      for (let i = 0; i < jobs.length; i++) {
        const job = jobs[i];
        // Known before the call, or made by an earlier job of this batch with the same MessageID.
        const known = this.#jobs.get(job.id, hashes[i]);
        if (known) {
          results.push({ job: infoOf(known.record, now), created: false });
          continue;
        }
        const record = newRecord(job.id, job.plan, now);
        const slot = this.#addSlot(record, hashes[i]);
        this.#putPayload(slot, job.payload);
        if (this.#place(slot, now)) due = true;
        const info = infoOf(record, now);
        results.push({ job: info, created: true });
        this.#notify((listener) => {
          if (listener.follows?.(job.id) !== false) listener.changed(info, undefined);
        });
      }
      this.#arm();
      if (due) this.#notify((listener) => listener.ready());
      return results;
    }, jobs.map((job) => job.id));
  }

  /** Up to `max` due jobs in order; each is reserved until stored. */
  take(max: number): Promise<readonly ReadyJob[]> {
    return this.#transact(undefined, () => this.#reserve(max));
  }

  /**
   * `take` at once when no other call is running or waiting (a take writes nothing, so it needs
   * no turn of its own); undefined otherwise. The controller's grants usually come when the store
   * is idle: answered in the same turn, the jobs join the confirmations waiting for the next
   * commit instead of waiting for a commit of their own.
   */
  takeNow(max: number): readonly ReadyJob[] | undefined {
    if (this.#calls > 0 || !this.#loaded || this.#stale) return undefined;
    return this.#reserve(max);
  }

  /** Reserve up to `max` due jobs, in order. Memory only. */
  #reserve(max: number): ReadyJob[] {
    const now = this.#clock.now();
    this.#promote(now);
    const ready: ReadyJob[] = [];
    while (ready.length < max && this.#due.size > 0) {
      const entry = this.#due.pop()!;
      const slot = entry.slot;
      if (slot.entry !== entry) continue; // stale
      this.#unqueue(slot);
      slot.reserved = true;
      this.#reserved += 1;
      const record = slot.record;
      const job: Writable<ReadyJob> = {
        messageId: record.id,
        payload: slot.payload!,
        attempt: record.attempts + 1,
        timeout: tryTimeout(record, this.settings.defaults),
      };
      if (record.lost) job.lost = record.lost;
      ready.push(job);
    }
    this.#arm();
    return ready;
  }

  /** A job as it is now. */
  get(id: string): Promise<JobInfo | undefined> {
    return this.#transact(undefined, () => {
      const now = this.#clock.now();
      const slot = this.#known(id, now);
      return slot && infoOf(slot.record, now);
    }, [id]);
  }

  /** Cancel a queued job; an active (or reserved) one is left to the caller. */
  cancel(id: string): Promise<JobInfo | undefined> {
    return this.#transact(undefined, () => {
      const now = this.#clock.now();
      const slot = this.#known(id, now);
      if (!slot) return undefined;
      const record = slot.record;
      if (slot.reserved) return { ...infoOf(record, now), state: "active" };
      if (!isQueued(record)) return infoOf(record, now);
      this.#unqueue(slot);
      const cancelled: JobRecord = { ...record, state: "cancelled", finishedAt: now };
      this.#settle(slot, cancelled, now, record.state);
      return infoOf(cancelled, now);
    }, [id]);
  }

  /** Dead jobs, oldest death first. */
  deadLetters(limit: number, cursor?: string): Promise<DeadLetterPage> {
    return this.#transact(undefined, () => {
      const now = this.#clock.now();
      // The cursor is the last page's place in the order of death, so a page goes on after it
      // even when that job was retried or deleted meanwhile.
      const after = cursor === undefined ? 0 : Number(cursor);
      const page: string[] = [];
      let more = false;
      for (const [id, place] of this.#dead) {
        if (!(place > after)) continue;
        if (page.length === limit) {
          more = true;
          break;
        }
        page.push(id);
      }
      const jobs = page.map((id) => infoOf(this.#jobs.get(id)!.record, now));
      return more ? { jobs, cursor: String(this.#dead.get(page.at(-1)!)) } : { jobs };
    });
  }

  /** Give a dead job a fresh set of tries. */
  retryDead(id: string): Promise<JobInfo | undefined> {
    return this.#transact(undefined, () => this.#revive(id, this.#clock.now()));
  }

  /** Give every dead job a fresh set of tries. */
  retryAllDead(): Promise<number> {
    return this.#transact(undefined, () => {
      const now = this.#clock.now();
      let count = 0;
      for (const id of [...this.#dead.keys()]) if (this.#revive(id, now)) count += 1;
      return count;
    });
  }

  /** Forget a dead job. */
  deleteDead(id: string): Promise<boolean> {
    return this.#transact(undefined, () => {
      if (!this.#dead.delete(id)) return false;
      const slot = this.#jobs.get(id)!;
      this.#dropPayload(slot);
      this.#dropSlot(slot);
      return true;
    });
  }

  /** How many jobs are where. */
  counts(): BacklogCounts {
    const now = this.#clock.now();
    let waiting = 0, scheduled = 0, failed = 0;
    const count = (entry: Entry) => {
      if (entry.slot.entry !== entry) return; // stale
      if (entry.slot.record.state === "failed") failed += 1;
      else if (entry.runAt > now) scheduled += 1;
      else waiting += 1;
    };
    this.#due.forEach(count);
    this.#scheduled.forEach(count);
    return {
      waiting: waiting + this.#reserved,
      scheduled,
      failed,
      active: this.#active,
      dead: this.#dead.size,
    };
  }

  // ------------------------------------------------------------------------------------------
  // The controller's work queue

  /** Snapshot the tries in progress and acquire writership under a new epoch. */
  load(options?: QueueCallOptions): Promise<LoadResult> {
    return this.#serial(options, async () => {
      const { epoch, snapshot } = await this.#journal.open(options?.signal);
      this.#epoch = snapshot ? epoch : this.#epoch + 1;
      if (snapshot) {
        this.#restore(snapshot);
        this.#finishedRead = false;
        this.#readFinished(this.#epoch);
      }
      this.#stale = false;
      this.#loaded = true;
      const unconfirmed: UnconfirmedMessage[] = [];
      for (const [messageId, slot] of this.#jobs) {
        const active = slot.active;
        if (!active?.accepted || active.confirmed) continue;
        const record = slot.record;
        unconfirmed.push({
          messageId,
          seq: active.seq,
          payload: slot.payload!,
          attempt: record.attempts,
          timeout: tryTimeout(record, this.settings.defaults),
          ...(record.lost ? { lost: record.lost } : {}),
        });
      }
      unconfirmed.sort((a, b) => a.seq - b.seq);
      const recentlyCompleted: CompletedMessage[] = [];
      for (const [messageId, seq] of this.#completedSeqs) {
        recentlyCompleted.push({ messageId, seq });
      }
      this.#arm();
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
    request = { ...request }; // read now: the call may run after the caller changed it
    return this.#transact(options, () => {
      this.#fence(epoch);
      checkStoredJob(request.messageId, request.payload);
      const hash = hashId(request.messageId);
      const slot = this.#jobs.get(request.messageId, hash);
      if (slot?.active) return this.#repeat(slot, slot.active);
      if (request.proposedSeq !== this.#currentSeq + 1) {
        throw new QueueConflictError(
          `Cannot store ${request.messageId}: proposed sequence ${request.proposedSeq} is not ${
            this.#currentSeq + 1
          }`,
        );
      }
      return this.#start(request.messageId, request.payload, hash);
    }, [request.messageId]);
  }

  /** Record that the producer removed the job from its source. */
  accept(epoch: QueueEpoch, messageId: string, options?: QueueCallOptions): Promise<void> {
    return this.#transact(options, () => {
      this.#fence(epoch);
      this.#mark(messageId, "accepted", undefined);
    });
  }

  /** The try ended (`options.outcome`, completed by default); a no-op for an unknown one. */
  confirmMessage(epoch: QueueEpoch, messageId: string, options?: ConfirmOptions): Promise<void> {
    return this.#transact(options, () => {
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
    const copy = copyBatch(batch); // read now: the call may run after the caller changed it
    return this.#transact(options, () => {
      const batch = copy;
      this.#fence(epoch);
      const jobs = batch.store?.jobs ?? [];
      const hashes = new Int32Array(jobs.length);
      hashIds(jobs.map((job) => job.messageId), hashes);
      let next = 0; // checkBatch asks about each stored job in order, then about the accepts
      checkBatch(batch, this.#currentSeq + 1, (id) => {
        const hash = next < jobs.length && jobs[next].messageId === id ? hashes[next++] : undefined;
        return this.#jobs.get(id, hash)?.active !== undefined;
      });
      const stored = jobs.map((job, i) => {
        const slot = this.#jobs.get(job.messageId, hashes[i]);
        return slot?.active
          ? this.#repeat(slot, slot.active)
          : this.#start(job.messageId, job.payload, hashes[i]);
      });
      // Flags first, outcomes at the end, so that a MessageID repeated in the batch is a repeat.
      // An array, not a set: a job is in it at most twice (accepted, confirmed), and finishing
      // it again does nothing.
      const touched: JobSlot[] = [];
      for (const id of batch.accept ?? []) {
        const slot = this.#jobs.get(id)!;
        const active = slot.active!;
        if (active.accepted) continue; // a repeat (or a job from the backlog): nothing to write
        active.accepted = true;
        this.#touch(id, slot);
        touched.push(slot);
      }
      for (const id of batch.confirm ?? []) {
        const hash = hashId(id);
        const slot = this.#jobs.get(id, hash);
        const active = slot?.active;
        if (!active || active.confirmed) continue;
        active.confirmed = true;
        active.outcome = batch.outcomes?.get(id, hash);
        this.#touch(id, slot);
        touched.push(slot!);
      }
      for (let i = 0; i < touched.length; i++) this.#finishIfDone(touched[i]);
      return { stored };
    }, copy.store?.jobs.map((job) => job.messageId));
  }

  // ------------------------------------------------------------------------------------------

  /** `id`'s slot if the job is known now; a finished job past its retention is forgotten here. */
  #known(id: string, now: number, hash: number = hashId(id)): JobSlot | undefined {
    const slot = this.#jobs.get(id, hash);
    if (!slot) return undefined;
    const record = slot.record;
    const terminal = record.state === "completed" || record.state === "cancelled";
    if (terminal && now - (record.finishedAt ?? now) > this.settings.retention) {
      this.#dropSlot(slot);
      return undefined;
    }
    return slot;
  }

  #repeat(slot: JobSlot, active: Active): StoreResult {
    return { seq: active.seq, alreadyStored: true, payload: slot.payload! };
  }

  /** A try starts for `messageId` (whose `hashId` is `hash`) at the next sequence. */
  #start(messageId: string, payload: string, hash: number): StoreResult {
    const now = this.#clock.now();
    let slot = this.#known(messageId, now, hash);
    // A job taken from this store's own backlog needs no separate Accept: the store is the
    // producer's recoverable source, and storing it removed it from there in the same write.
    const fromBacklog = slot?.reserved === true;
    if (!slot) {
      slot = this.#addSlot(newRecord(messageId, planJob({}, now), now), hash);
      this.#putPayload(slot, payload);
    } else if (slot.payload === undefined) {
      this.#putPayload(slot, payload); // a finished job stored again counts as new
    }
    const persisted = this.#journaled && fromBacklog && !this.#changedEntries.has(messageId);
    this.#unqueue(slot);
    if (slot.reserved) {
      slot.reserved = false;
      this.#reserved -= 1;
    }
    const record = slot.record;
    const previous = record.state;
    if (previous === "dead") this.#dead.delete(messageId);
    const started = startTry(record, now);
    this.#putRecord(slot, started);
    // Started from its record as last persisted: a journal may write just the start.
    if (persisted) this.#startedNow.set(messageId, started);
    this.#currentSeq += 1;
    this.#seqMoved = this.#journaled;
    slot.active = {
      seq: this.#currentSeq,
      accepted: fromBacklog,
      confirmed: false,
      outcome: undefined,
    };
    this.#active += 1;
    this.#tellChanged(started, now, previous);
    const result: Writable<StoreResult> = {
      seq: this.#currentSeq,
      alreadyStored: false,
      payload: slot.payload!,
    };
    if (fromBacklog) result.accepted = true;
    return result;
  }

  #mark(messageId: string, flag: "accepted" | "confirmed", outcome: JobOutcome | undefined): void {
    const slot = this.#jobs.get(messageId);
    const active = slot?.active;
    if (!active && flag === "confirmed") return; // finished already: a no-op
    if (!active) throw new QueueConflictError(`Cannot accept ${messageId}: unknown MessageID`);
    if (flag === "confirmed") {
      if (active.confirmed) return;
      active.outcome = outcome;
    } else if (active.accepted) return; // a repeat (or a job from the backlog): nothing to write
    active[flag] = true;
    this.#touch(messageId, slot);
    this.#finishIfDone(slot!);
  }

  /** A try both accepted and confirmed is over: apply its outcome. */
  #finishIfDone(slot: JobSlot): void {
    const active = slot.active;
    if (!active?.accepted || !active.confirmed) return;
    slot.active = undefined;
    this.#active -= 1;
    const record = slot.record;
    this.#touch(record.id, slot);
    const now = this.#clock.now();
    const next = finishTry(
      record,
      active.outcome ?? COMPLETED,
      this.settings.defaults,
      now,
      this.#random,
    );
    if (next.state === "completed") this.#completedSeqs.set(record.id, active.seq, slot.hash);
    this.#settle(slot, next, now, record.state);
  }

  /** Store a job's new record and put the job where that state lives. */
  #settle(slot: JobSlot, record: JobRecord, now: number, previous: JobRecord["state"]): void {
    this.#putRecord(slot, record);
    let due = false;
    if (record.state === "completed" || record.state === "cancelled") {
      this.#dropPayload(slot);
      this.#retain(slot);
    } else if (record.state === "dead") {
      this.#dead.set(record.id, ++this.#deaths);
    } else if (isQueued(record)) {
      due = this.#place(slot, now);
    }
    this.#tellChanged(record, now, previous);
    this.#arm();
    if (due) this.#notify((listener) => listener.ready());
  }

  /** Tell the listener, once durable, that the job moved to `record` (if it follows the job). */
  #tellChanged(record: JobRecord, now: number, previous: JobRecord["state"] | undefined): void {
    this.#notify((listener) => {
      if (listener.follows?.(record.id) !== false) listener.changed(infoOf(record, now), previous);
    });
  }

  /** Put a queued job in the order; true when it is due now. */
  #place(slot: JobSlot, now: number): boolean {
    const record = slot.record;
    const entry: Entry = {
      slot,
      priority: record.priority,
      runAt: record.runAt,
      order: ++this.#order,
    };
    this.#enqueueEntry(slot, entry);
    if (record.runAt <= now) {
      this.#due.push(entry);
      return true;
    }
    this.#scheduled.push(entry);
    return false;
  }

  /** Make `entry` the job's live place in the order (its earlier one goes stale). */
  #enqueueEntry(slot: JobSlot, entry: Entry): void {
    if (slot.entry === undefined) this.#queued += 1;
    slot.entry = entry;
  }

  /** Take the job out of the order (its entry goes stale). */
  #unqueue(slot: JobSlot): void {
    if (slot.entry === undefined) return;
    slot.entry = undefined;
    this.#queued -= 1;
  }

  /** Keep a finished job for the retention; the oldest beyond the count is forgotten. */
  #retain(slot: JobSlot): void {
    if (this.#finished.length === 0) return void this.#dropSlot(slot);
    const at = this.#finishedNext;
    const old = this.#finished[at];
    // Forgotten unless it was dropped already, runs again, or finished again since (it has a
    // later place then: the one it takes now, if it is the job finishing).
    if (
      old !== undefined && old !== slot && old.live && old.finishedPlace === at &&
      isTerminal(old.record)
    ) {
      this.#dropSlot(old);
    }
    this.#finished[at] = slot;
    slot.finishedPlace = at;
    this.#finishedNext = (at + 1) % this.#finished.length;
  }

  #revive(id: string, now: number): JobInfo | undefined {
    const slot = this.#jobs.get(id);
    const record = slot?.record;
    if (!slot || !record || record.state !== "dead") return undefined;
    this.#dead.delete(id);
    const revived = reviveDead(record, now);
    this.#settle(slot, revived, now, "dead");
    return infoOf(revived, now);
  }

  /** Move the scheduled jobs that fell due into the due order. */
  #promote(now: number): void {
    while (this.#scheduled.size > 0 && this.#scheduled.peek()!.runAt <= now) {
      const entry = this.#scheduled.pop()!;
      if (entry.slot.entry === entry) this.#due.push(entry);
    }
  }

  /** Wake the listener when the earliest scheduled job falls due. */
  #arm(): void {
    while (this.#scheduled.size > 0) {
      const top = this.#scheduled.peek()!;
      if (top.slot.entry === top) break;
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

  /**
   * Run a call: after the calls before it, in a group with the calls made while it waits (on a
   * fresh index if the last write's outcome is unknown); then persist what the group changed and,
   * once that is durable, tell the listener.
   */
  #transact<T>(
    options: QueueCallOptions | undefined,
    body: () => T,
    mentions: readonly string[] = [],
  ): Promise<T> {
    this.#calls += 1;
    return new Promise<T>((resolve, reject) => {
      const call: Call = {
        options,
        body,
        mentions,
        resolve: (result) => {
          this.#calls -= 1;
          resolve(result as T);
        },
        reject: (error) => {
          this.#calls -= 1;
          reject(error);
        },
      };
      if (this.#group) return void this.#group.push(call);
      const group = [call];
      this.#serial(undefined, () => this.#run(group), false);
      this.#group = group; // after #serial, which closes the group before it
    });
  }

  /** Run a group of calls in order: as many as fit one commit at a time. */
  async #run(calls: Call[]): Promise<void> {
    if (this.#group === calls) this.#group = undefined;
    let next = 0;
    while (next < calls.length) {
      try {
        await this.#prepare(calls, next);
      } catch (error) {
        calls[next++].reject(error); // as if it had run alone; the next one tries again
        continue;
      }
      this.#changedEntries.clear();
      this.#startedNow.clear();
      this.#changedPayloads.clear();
      this.#wereFinished.clear();
      this.#seqMoved = false;
      this.#notices = [];
      const ran: [Call, unknown][] = [];
      const start = next;
      const fits = () => next === start || this.#changedEntries.size < GROUP_CHANGES;
      while (next < calls.length && fits()) {
        const call = calls[next++];
        try {
          call.options?.signal?.throwIfAborted();
          ran.push([call, call.body()]);
        } catch (error) {
          call.reject(error);
        }
      }
      const change = this.#change();
      if (change) {
        // One call's commit may be aborted by its signal; a group's belongs to several callers.
        const signal = ran.length === 1 ? ran[0][0].options?.signal : undefined;
        try {
          await this.#journal.commit(this.#epoch, change, signal);
        } catch (error) {
          this.#stale = true; // memory is ahead of what is durable (or may be)
          for (const [call] of ran) call.reject(error);
          continue;
        }
      }
      const notices = this.#notices;
      this.#notices = [];
      const listener = this.#listener;
      if (listener) { for (const notice of notices) notice(listener); }
      for (const [call, result] of ran) call.resolve(result);
    }
  }

  /**
   * Before the calls from `from` on run: a loaded store, an index re-read after a write whose
   * outcome is unknown, and the finished jobs they mention while the history is still being read.
   */
  async #prepare(calls: readonly Call[], from: number): Promise<void> {
    if (!this.#loaded) throw new Error("Cannot use the job store before load()");
    if (this.#stale) {
      const snapshot = await this.#journal.reread(this.#epoch, calls[from].options?.signal);
      if (snapshot) {
        // The snapshot holds the live jobs: the finished ones are read again, as after a load.
        this.#restore(snapshot);
        this.#finishedRead = false;
        this.#readFinished(this.#epoch);
      }
      this.#stale = false;
    }
    if (!this.#finishedRead) {
      // The finished jobs are still being read: look up the ones these calls mention.
      const unknown = new Set<string>();
      for (let i = from; i < calls.length; i++) {
        for (const id of calls[i].mentions) if (!this.#jobs.has(id)) unknown.add(id);
      }
      if (unknown.size > 0) this.#adoptFinished(await this.#journal.lookupFinished([...unknown]));
    }
  }

  /**
   * Tasks run one at a time in call order; one aborted while waiting never runs. A task counts
   * as a call until it settles, except a group's, whose calls count themselves.
   */
  #serial<T>(
    options: QueueCallOptions | undefined,
    task: () => Promise<T>,
    counted = true,
  ): Promise<T> {
    this.#group = undefined; // a call made from now on runs after this task
    if (counted) this.#calls += 1;
    const run = this.#tail.then(() => {
      options?.signal?.throwIfAborted();
      return task();
    });
    const settled = () => void (counted && (this.#calls -= 1));
    this.#tail = run.then(settled, settled);
    return run;
  }

  /** What the running call changed, or undefined when nothing durable did. */
  #change(): JournalChange | undefined {
    if (this.#changedEntries.size === 0 && this.#changedPayloads.size === 0 && !this.#seqMoved) {
      return undefined;
    }
    const entries = new Map<string, JournalEntry | undefined>();
    for (const id of this.#changedEntries) {
      const slot = this.#jobs.get(id);
      if (!slot) {
        entries.set(id, undefined);
        continue;
      }
      const { record, active, payload } = slot;
      const order = slot.entry?.order;
      const entry: Writable<JournalEntry> = { record };
      if (order !== undefined) entry.order = order;
      if (active) entry.active = { ...active };
      if (payload !== undefined) entry.payload = payload;
      if (this.#onlyStarted(id, record, active)) entry.started = true;
      entries.set(id, entry);
    }
    return {
      entries,
      wereFinished: new Set(this.#wereFinished),
      payloads: new Map(this.#changedPayloads),
      ...(this.#seqMoved ? { currentSeq: this.#currentSeq } : {}),
    };
  }

  /** Whether the running call did nothing to `id` but start a try from its persisted record. */
  #onlyStarted(id: string, record: JobRecord, active: Active | undefined): boolean {
    return this.#startedNow.get(id) === record && active !== undefined && active.accepted &&
      !active.confirmed;
  }

  /** A new job in the index, changed by the running call. */
  #addSlot(record: JobRecord, hash: number): JobSlot {
    this.#touch(record.id, undefined);
    return this.#insert(record, hash);
  }

  /** A job new to the index, as it is (read back from the journal, or just made). */
  #insert(record: JobRecord, hash: number): JobSlot {
    const slot = new JobSlot(record, hash);
    this.#jobs.set(record.id, slot, hash);
    return slot;
  }

  #putRecord(slot: JobSlot, record: JobRecord): void {
    this.#touch(record.id, slot);
    slot.record = record;
  }

  /** Forget a job (it holds no payload, or `#dropPayload` noted its deletion). */
  #dropSlot(slot: JobSlot): void {
    const id = slot.id;
    this.#touch(id, slot);
    this.#jobs.delete(id, slot.hash);
    this.#unqueue(slot);
    if (slot.reserved) this.#reserved -= 1;
    if (slot.active) this.#active -= 1;
    slot.reserved = false;
    slot.active = undefined;
    slot.live = false;
  }

  /**
   * Note that the running call changes `id` (before it does; `slot` is its slot, if it has one),
   * and whether the job was finished before this call first changed it; nothing for a journal
   * that persists nothing.
   */
  #touch(id: string, slot: JobSlot | undefined): void {
    if (!this.#journaled || this.#changedEntries.has(id)) return;
    this.#changedEntries.add(id);
    const state = slot?.record.state;
    if (state === "completed" || state === "cancelled") this.#wereFinished.add(id);
  }

  /** Finished jobs read from the journal: kept unless memory knows the MessageID already. */
  #adoptFinished(entries: readonly JournalEntry[]): void {
    const fresh = entries.map((entry) => entry.record).filter((record) =>
      !this.#jobs.has(record.id)
    );
    fresh.sort((a, b) => (a.finishedAt ?? 0) - (b.finishedAt ?? 0));
    for (const record of fresh) {
      if (this.#jobs.has(record.id)) continue; // listed twice
      this.#retain(this.#insert(record, hashId(record.id)));
    }
  }

  #putPayload(slot: JobSlot, payload: string): void {
    slot.payload = payload;
    if (this.#journaled) this.#changedPayloads.set(slot.id, payload);
  }

  #dropPayload(slot: JobSlot): void {
    if (slot.payload === undefined) return;
    slot.payload = undefined;
    if (this.#journaled) this.#changedPayloads.set(slot.id, undefined);
  }

  /** Tell the listener, once the running call's changes are durable. */
  #notify(notice: (listener: JobStoreListener) => void): void {
    this.#notices.push(notice);
  }

  /** Read the retained finished jobs after a load, behind whatever calls come first. */
  #readFinished(epoch: number): void {
    this.#journal.readFinished().then((entries) =>
      this.#serial(undefined, () => {
        if (this.#epoch !== epoch) return Promise.resolve();
        this.#adoptFinished(entries);
        this.#finishedRead = true;
        return Promise.resolve();
      })
    ).catch(() => {
      // Not fatal: the store keeps looking finished jobs up one by one (a closed handle, or a
      // backend error; the next load reads them again).
    });
  }

  /** Rebuild the index from a journal's snapshot. */
  #restore(snapshot: JournalSnapshot): void {
    this.#jobs.clear();
    this.#dead.clear();
    this.#due.clear();
    this.#scheduled.clear();
    this.#queued = this.#reserved = this.#active = 0;
    this.#finished.fill(undefined);
    this.#finishedNext = 0;
    this.#currentSeq = snapshot.currentSeq;
    const now = this.#clock.now();
    const finished: JobSlot[] = [];
    let order = 0;
    for (const { record, order: position, active } of snapshot.entries) {
      const hash = hashId(record.id);
      if (this.#jobs.has(record.id, hash)) continue; // listed twice: the first counts
      const slot = this.#insert(record, hash);
      if (active) {
        slot.active = { ...active };
        this.#active += 1;
      } else if (record.state === "dead") this.#dead.set(record.id, ++this.#deaths);
      else if (record.state === "completed" || record.state === "cancelled") finished.push(slot);
      else if (isQueued(record)) {
        const entry: Entry = {
          slot,
          priority: record.priority,
          runAt: record.runAt,
          order: position ?? 0,
        };
        this.#enqueueEntry(slot, entry);
        (record.runAt <= now ? this.#due : this.#scheduled).push(entry);
      }
      order = Math.max(order, position ?? 0);
    }
    this.#order = order;
    for (const [id, payload] of snapshot.payloads) {
      const slot = this.#jobs.get(id);
      if (slot) slot.payload = payload;
    }
    finished.sort((a, b) => (a.record.finishedAt ?? 0) - (b.record.finishedAt ?? 0));
    for (const slot of finished) this.#retain(slot);
  }
}

/** A batch as `copyBatch` copies it: its outcomes in a table (no native hash of a MessageID). */
export type CopiedBatch = Omit<QueueBatch, "outcomes"> & {
  readonly outcomes?: IdTable<JobOutcome>;
};

/** A copy of a batch as it is now (a store's call may run after the caller changed it). */
export function copyBatch(batch: QueueBatch): CopiedBatch {
  return {
    ...(batch.store
      ? {
        store: {
          firstSeq: batch.store.firstSeq,
          jobs: batch.store.jobs.map((job) => ({ messageId: job.messageId, payload: job.payload })),
        },
      }
      : {}),
    ...(batch.accept ? { accept: [...batch.accept] } : {}),
    ...(batch.confirm ? { confirm: [...batch.confirm] } : {}),
    ...(batch.outcomes ? { outcomes: copyOutcomes(batch.outcomes, batch.confirm ?? []) } : {}),
  };
}

/** The outcomes of the confirmed MessageIDs, as they are now. */
function copyOutcomes(
  outcomes: BatchOutcomes,
  confirmed: readonly string[],
): IdTable<JobOutcome> {
  if (outcomes instanceof IdTable) return outcomes.copy();
  const copy = new IdTable<JobOutcome>();
  for (const id of confirmed) {
    const outcome = outcomes.get(id);
    if (outcome !== undefined) copy.set(id, outcome);
  }
  return copy;
}
