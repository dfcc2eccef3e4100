/**
 * A {@linkcode DurableWorkQueue} on Deno KV (a local SQLite file, Deno Deploy or a denokv
 * server); on Node and Bun, pass an npm `@deno/kv` handle.
 *
 * Key layout under the prefix `P` (default `["workpull"]`; value formats in `codec.ts`):
 *
 * ```text
 * [...P, "epoch"]          {"epoch":n}                      written only by load: the fence
 * [...P, "meta"]           {"version":2,"currentSeq":n}     rewritten by every write
 * [...P, "job", seq]       header line, MessageID, payload  one per retained job
 * [...P, "accepted", s]    {"last":n}                       jobs s..n accepted (one a run)
 * [...P, "flags", seq]     {"accepted":a,"confirmed":c}     only if confirmed before accepted
 * [...P, "part", seq, n]   payload bytes, n = 1, 2, ...     only for payloads over ~63 KiB
 * [...P, "completed", n]   header line, MessageIDs          jobs commit n completed (expiring)
 * [...P, "done", slot]     header line, MessageID           format 1's; read until they expire
 * ```
 *
 * How the contract is kept:
 *
 * - **Fencing.** Every write is one atomic commit checking the versionstamps of the epoch key
 *   (which only `load` writes) and of the meta key (which every write rewrites). A changed epoch
 *   means a newer `load`: {@linkcode QueueFencedError}.
 * - **Load** reads the epoch and meta records, lists the flags, accepted, job and part keys, then commits
 *   the next epoch under checks on both. `list()` is consistent only within one batch, but every
 *   write rewrites the meta key, so an unchanged meta versionstamp at that commit proves nothing
 *   changed during the listing. A failed load therefore changes nothing, malformed state
 *   included. Only if a live writer changes the queue during three reads in a row does load fence
 *   first (commit the next epoch) and read afterwards; in that case a load that then fails has
 *   already fenced the previous owner.
 * - **Writes without reads.** The handle keeps each retained job's sequence, part count and flags
 *   in memory (built by `load`), and the meta check proves that memory still matches the store,
 *   so a batch of new jobs, accepts and confirms is exactly one atomic commit. If the check
 *   fails under an unchanged epoch (another handle wrote under it), the handle re-reads the queue
 *   and retries. Only a store repeating a retained MessageID reads (that job's payload).
 * - **Two mutations a job.** A job's own key is written once and deleted once; the rest is
 *   shared. An accept writes one `accepted` record for each run of consecutive sequences it
 *   accepts (a handshake's jobs are stored consecutively, so usually one), and a commit that
 *   completes jobs remembers them all in one `completed` record (below). A flags record remains
 *   only for a job confirmed before it was accepted.
 * - **Compaction.** A job both accepted and confirmed loses its job key (and its flags key, if
 *   any) in the same commit, and the last job of a run takes the run's record with it; its
 *   continuation parts (keyed by a sequence that is never reused) are deleted right after, and
 *   any a crash leaves behind are deleted by the next load.
 * - **Recent completions.** The same commit writes the MessageIDs and sequences of the jobs it
 *   compacts to one `completed` record (more only for very long MessageIDs), expiring after
 *   `completedRetention`, and deletes the oldest records while the rest still hold
 *   `completedWindow` jobs (default 2,000; `completed.ts`). `load` reports them
 *   (`recentlyCompleted`): a producer resubmitting a completed job after a restart gets its
 *   sequence back and the job does not run again. They are hints: an unreadable one is skipped.
 * - **Errors.** Backend errors, `TypeError: database is locked` included, are rethrown unchanged
 *   and are retriable. "Locked" means not applied; after any other failed commit, whose outcome
 *   is unknown, the handle re-reads the queue before its next write.
 *
 * Calls on one handle run one at a time, in call order.
 *
 * @module
 */

import type {
  CompletedMessage,
  DurableWorkQueue,
  LoadResult,
  QueueBatch,
  QueueBatchLimits,
  QueueBatchResult,
  QueueCallOptions,
  QueueEpoch,
  StoreRequest,
  StoreResult,
} from "../work_queue.ts";
import { QueueConflictError, QueueFencedError } from "../work_queue.ts";
import { durationOption, integerOption } from "../../core/options.ts";
import { isKvLockedError, KV_LIMITS, type KvKey, type KvLike, MeasuredAtomic } from "./port.ts";
import { KvQueueLayout } from "./layout.ts";
import {
  type CompletedEntry,
  decodeDone,
  decodeEpoch,
  encodeAccepted,
  encodeEpoch,
  encodeFlags,
  encodeJobText,
  encodeMeta,
} from "./codec.ts";
import { CompletedRing, type CompletedWrites } from "./completed.ts";
import { type BatchPlan, type KvJobInfo, planBatch, type PlannedStore } from "./plan.ts";
import { checkId, checkSeq, prepareBatch, prepareJob, type WriteInput } from "./input.ts";
import {
  checkStamps,
  readPayloads,
  readSnapshot,
  readStableSnapshot,
  type Snapshot,
  StaleReadError,
} from "./read.ts";

export type { KvAtomicLike, KvCheckLike, KvEntryLike, KvKey, KvKeyPart, KvLike } from "./port.ts";

/** Options of {@linkcode DenoKvWorkQueue}. */
export interface DenoKvWorkQueueOptions {
  /**
   * The key prefix of this queue: one prefix per flow. Nothing else may write under
   * `[...prefix, "epoch" | "meta" | "job" | "accepted" | "flags" | "part" | "completed" |
   * "done"]`. At most 1,024 encoded bytes. Default `["workpull"]`.
   */
  readonly prefix?: KvKey;
  /**
   * How many recently completed jobs to remember at least (in one record a commit; up to one
   * commit's more), so that a resubmission after a restart does not run again. A load reads
   * them all, so a larger window makes a restart slower. Default 2,000 (0..1,000,000; 0
   * disables).
   */
  readonly completedWindow?: number;
  /** How long a remembered completion is kept, ms. Default 86,400,000 (a day). */
  readonly completedRetention?: number;
}

/** What a handle knows under the epoch it writes with; valid while the meta key is unchanged. */
interface View {
  readonly epoch: number;
  readonly epochVs: string;
  metaVs: string | null;
  currentSeq: number;
  readonly jobs: Map<string, KvJobInfo>;
  /** Retained jobs in each accepted run, by the run's first sequence. */
  readonly ranges: Map<number, number>;
  /** The completed records. */
  readonly completed: CompletedRing;
  /** Continuation parts of compacted jobs, still to delete. */
  readonly orphans: KvKey[];
}

const OWNER = "DenoKvWorkQueue";
const OPTIMISTIC_LOADS = 3;
const ATTEMPTS = 3;
const noop = () => {};

/**
 * The defaults of `completedWindow` (completions remembered at least) and `completedRetention`
 * (ms before a completed record expires); the raw KV benchmark writes the same.
 */
export const COMPLETED_DEFAULTS = { window: 2_000, retention: 86_400_000 } as const;

/**
 * The Deno KV work queue. Its limits keep every commit inside one Deno KV atomic operation:
 * {@linkcode DenoKvWorkQueue.maxPayloadBytes} 640 KiB, {@linkcode DenoKvWorkQueue.maxMessageIdBytes}
 * 1 KiB, {@linkcode DenoKvWorkQueue.batchLimits} 480 operations and 641 KiB with the default
 * prefix. The KV handle stays the caller's to close.
 *
 * @example Store, accept and reload on an in-memory KV
 * ```ts
 * import { DenoKvWorkQueue } from "./queue.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const queue = new DenoKvWorkQueue(kv, { prefix: ["jobs"] });
 * const { epoch } = await queue.load();
 * await queue.commit(epoch, {
 *   store: { firstSeq: 1, jobs: [{ messageId: "a", payload: '"hello"' }] },
 *   accept: ["a"],
 * });
 * const { state } = await queue.load();
 * console.assert(state.unconfirmed[0].payload === '"hello"');
 * kv.close();
 * ```
 */
export class DenoKvWorkQueue implements DurableWorkQueue {
  /** The size of one {@linkcode DenoKvWorkQueue.commit}, derived from the prefix. */
  readonly batchLimits: QueueBatchLimits;
  /** The largest payload: 655,360 UTF-8 bytes (640 KiB). */
  readonly maxPayloadBytes: number;
  /** The largest MessageID: 1,024 UTF-8 bytes. */
  readonly maxMessageIdBytes: number;
  readonly #kv: KvLike;
  readonly #layout: KvQueueLayout;
  readonly #completedWindow: number;
  readonly #completedRetention: number;
  #view: View | undefined;
  #tail: Promise<unknown> = Promise.resolve();

  /** Wraps a KV handle; throws TypeError or RangeError naming a bad option. */
  constructor(kv: KvLike, options: DenoKvWorkQueueOptions = {}) {
    if (
      typeof kv !== "object" || kv === null || typeof kv.getMany !== "function" ||
      typeof kv.list !== "function" || typeof kv.atomic !== "function"
    ) {
      throw new TypeError("Cannot create the queue: kv must be a Deno.Kv (getMany, list, atomic)");
    }
    if (typeof options !== "object" || options === null) {
      throw new TypeError("Cannot create the queue: options must be an object");
    }
    this.#kv = kv;
    this.#layout = new KvQueueLayout(options.prefix ?? ["workpull"]);
    this.#completedWindow = integerOption(
      OWNER,
      "completedWindow",
      options.completedWindow,
      COMPLETED_DEFAULTS.window,
      0,
      1_000_000,
    );
    this.#completedRetention = durationOption(
      OWNER,
      "completedRetention",
      options.completedRetention,
      COMPLETED_DEFAULTS.retention,
      1,
      365 * 86_400_000,
    );
    this.batchLimits = this.#layout.batchLimits;
    this.maxPayloadBytes = this.#layout.maxPayloadBytes;
    this.maxMessageIdBytes = this.#layout.maxMessageIdBytes;
  }

  /** Snapshot the state and acquire writership under a new, greater epoch. */
  async load(options?: QueueCallOptions): Promise<LoadResult> {
    const signal = options?.signal;
    signal?.throwIfAborted();
    return await this.#serial(signal, () => this.#load(signal));
  }

  /** Store one job; the first write for a MessageID wins. */
  async store(
    epoch: QueueEpoch,
    request: StoreRequest,
    options?: QueueCallOptions,
  ): Promise<StoreResult> {
    const signal = options?.signal;
    signal?.throwIfAborted();
    const job = prepareJob(request.messageId, request.payload, this.#layout);
    const firstSeq = checkSeq(request.proposedSeq, "proposedSeq");
    const input = { firstSeq, store: [job], accept: [], confirm: [] };
    const { stored } = await this.#serial(signal, () => this.#write(epoch, input, signal));
    return stored[0];
  }

  /** Record that the producer removed the job from its recoverable source. */
  async accept(epoch: QueueEpoch, messageId: string, options?: QueueCallOptions): Promise<void> {
    const signal = options?.signal;
    signal?.throwIfAborted();
    const input = { firstSeq: 0, store: [], accept: [checkId(messageId)], confirm: [] };
    await this.#serial(signal, () => this.#write(epoch, input, signal));
  }

  /** Mark one job complete; a job both accepted and confirmed is compacted. */
  async confirmMessage(
    epoch: QueueEpoch,
    messageId: string,
    options?: QueueCallOptions,
  ): Promise<void> {
    const signal = options?.signal;
    signal?.throwIfAborted();
    const input = { firstSeq: 0, store: [], accept: [], confirm: [checkId(messageId)] };
    await this.#serial(signal, () => this.#write(epoch, input, signal));
  }

  /**
   * Apply stores, accepts and confirms in one atomic commit. Throws RangeError, applying
   * nothing, when the batch exceeds {@linkcode DenoKvWorkQueue.batchLimits}.
   */
  async commit(
    epoch: QueueEpoch,
    batch: QueueBatch,
    options?: QueueCallOptions,
  ): Promise<QueueBatchResult> {
    const signal = options?.signal;
    signal?.throwIfAborted();
    const input = prepareBatch(batch, this.#layout);
    return await this.#serial(signal, () => this.#write(epoch, input, signal));
  }

  /** Runs calls one at a time in call order; a call aborted while waiting never runs. */
  #serial<T>(signal: AbortSignal | undefined, task: () => Promise<T>): Promise<T> {
    const run = this.#tail.then(() => {
      signal?.throwIfAborted();
      return task();
    });
    this.#tail = run.then(noop, noop);
    return run;
  }

  async #load(signal: AbortSignal | undefined): Promise<LoadResult> {
    const { epochKey, metaKey } = this.#layout;
    for (let attempt = 1; attempt <= OPTIMISTIC_LOADS; attempt++) {
      const snapshot = await readSnapshot(this.#kv, this.#layout, { payloads: true });
      if (!snapshot) continue;
      signal?.throwIfAborted();
      const epoch = snapshot.epoch + 1;
      const result = await this.#kv.atomic()
        .check({ key: epochKey, versionstamp: snapshot.epochVs })
        .check({ key: metaKey, versionstamp: snapshot.metaVs })
        .set(epochKey, encodeEpoch(epoch))
        .commit();
      if (result.ok) return await this.#adopt(snapshot, epoch, result.versionstamp);
    }
    // A live writer kept changing the queue: fence it first, then read under the new epoch.
    signal?.throwIfAborted();
    const { epoch, versionstamp } = await this.#bumpEpoch();
    const snapshot = await readStableSnapshot(this.#kv, this.#layout, { payloads: true, epoch });
    return await this.#adopt(snapshot, epoch, versionstamp);
  }

  async #bumpEpoch(): Promise<{ epoch: number; versionstamp: string }> {
    const key = this.#layout.epochKey;
    for (let attempt = 1; attempt <= ATTEMPTS; attempt++) {
      const [entry] = await this.#kv.getMany([key]);
      const epoch = (entry.versionstamp === null ? 0 : decodeEpoch(entry.value)) + 1;
      const result = await this.#kv.atomic()
        .check({ key, versionstamp: entry.versionstamp })
        .set(key, encodeEpoch(epoch))
        .commit();
      if (result.ok) return { epoch, versionstamp: result.versionstamp };
    }
    throw new Error(`Cannot load the queue: other loads won the epoch ${ATTEMPTS} times in a row`);
  }

  async #adopt(snapshot: Snapshot, epoch: number, epochVs: string): Promise<LoadResult> {
    const { currentSeq, jobs, ranges, orphans, metaVs } = snapshot;
    const completed = new CompletedRing(snapshot.completed);
    const view: View = { epoch, epochVs, metaVs, currentSeq, jobs, ranges, completed, orphans };
    this.#view = view;
    await this.#collectGarbage(view);
    const recentlyCompleted = await this.#readCompleted(jobs, snapshot.completedJobs);
    return { epoch, state: { currentSeq, unconfirmed: snapshot.unconfirmed, recentlyCompleted } };
  }

  /**
   * The remembered completions (the completed records' jobs, and any format version 1 `done`
   * keys not yet expired), oldest first, without jobs that are retained again.
   */
  async #readCompleted(
    retained: ReadonlyMap<string, unknown>,
    remembered: readonly CompletedEntry[],
  ): Promise<CompletedMessage[]> {
    if (this.#completedWindow === 0) return [];
    const latest = new Map<string, number>();
    const note = (done: CompletedEntry) => {
      if (retained.has(done.messageId)) return;
      if ((latest.get(done.messageId) ?? 0) < done.seq) latest.set(done.messageId, done.seq);
    };
    const entries = this.#kv.list({ prefix: this.#layout.donePrefix }, {
      batchSize: KV_LIMITS.maxListBatch,
    });
    for await (const entry of entries) {
      try {
        note(decodeDone(entry.value));
      } catch {
        continue; // a hint only: an unreadable one is skipped
      }
    }
    for (const done of remembered) note(done);
    return [...latest].map(([messageId, seq]) => ({ messageId, seq })).sort((a, b) =>
      a.seq - b.seq
    );
  }

  async #write(
    epoch: QueueEpoch,
    input: WriteInput,
    signal: AbortSignal | undefined,
  ): Promise<QueueBatchResult> {
    if (!Number.isSafeInteger(epoch) || epoch <= 0) {
      throw new QueueFencedError(`Cannot write: epoch ${epoch} is not a writer epoch`);
    }
    for (let attempt = 1;; attempt++) {
      const view = await this.#viewFor(epoch);
      try {
        return await this.#writeOnce(view, input, signal);
      } catch (error) {
        if (!(error instanceof StaleReadError)) throw error;
        this.#view = undefined;
        if (attempt === ATTEMPTS) {
          await this.#viewFor(epoch); // throws QueueFencedError when that is the reason
          throw new Error(
            `Cannot write: the queue changed under epoch ${epoch} during ${attempt} attempts`,
          );
        }
      }
    }
  }

  /** The view for `epoch`, re-read from the store when this handle has none for it. */
  async #viewFor(epoch: number): Promise<View> {
    const view = this.#view;
    if (view?.epoch === epoch) return view;
    if (view !== undefined && epoch < view.epoch) {
      throw new QueueFencedError(`Cannot write: epoch ${epoch} is fenced (current ${view.epoch})`);
    }
    const snapshot = await readStableSnapshot(this.#kv, this.#layout, { payloads: false, epoch });
    const { currentSeq, jobs, ranges, metaVs } = snapshot;
    const epochVs = snapshot.epochVs!;
    const completed = new CompletedRing(snapshot.completed);
    const synced = { epoch, epochVs, metaVs, currentSeq, jobs, ranges, completed, orphans: [] };
    this.#view = synced;
    return synced;
  }

  async #writeOnce(
    view: View,
    input: WriteInput,
    signal: AbortSignal | undefined,
  ): Promise<QueueBatchResult> {
    const repeated = repeatedJobs(input.store, view.jobs);
    const storedPayloads = await readPayloads(this.#kv, this.#layout, view, repeated);
    let plan;
    try {
      const { currentSeq, jobs, ranges } = view;
      plan = planBatch({ ...input, currentSeq, jobs, ranges, storedPayloads });
    } catch (error) {
      // Decide a conflict only on a fresh view, so that fencing is reported first.
      if (error instanceof QueueConflictError && repeated.length === 0) await this.#verify(view);
      throw error;
    }
    if (plan.writes.length === 0 && plan.currentSeq === view.currentSeq) {
      if (repeated.length === 0) await this.#verify(view); // the read is the linearization point
      return { stored: plan.stored };
    }
    signal?.throwIfAborted();
    const { atomic, orphans, completed } = this.#encode(view, plan);
    view.metaVs = await this.#commit(atomic);
    if (completed) view.completed.apply(completed);
    view.currentSeq = plan.currentSeq;
    for (const [id, info] of plan.updates) {
      if (info) view.jobs.set(id, info);
      else view.jobs.delete(id);
    }
    for (const [first, held] of plan.ranges) {
      if (held === undefined) view.ranges.delete(first);
      else view.ranges.set(first, held);
    }
    view.orphans.push(...orphans);
    await this.#collectGarbage(view);
    return { stored: plan.stored };
  }

  /** Turns a plan into one atomic commit fenced on the view's epoch and meta versionstamps. */
  #encode(
    view: View,
    plan: BatchPlan,
  ): { atomic: MeasuredAtomic; orphans: KvKey[]; completed: CompletedWrites | undefined } {
    const layout = this.#layout;
    const sizes = layout.keySizes;
    const atomic = new MeasuredAtomic(this.#kv.atomic())
      .check(layout.epochKey, sizes.epoch, view.epochVs)
      .check(layout.metaKey, sizes.meta, view.metaVs);
    const orphans: KvKey[] = [];
    const remember = this.#completedWindow > 0;
    const done: CompletedEntry[] = [];
    for (const write of plan.writes) {
      if (write.kind === "create") {
        const { messageId, messageIdBytes, payload, payloadBytes } = write.job;
        const job = encodeJobText(messageId, messageIdBytes, payload, payloadBytes);
        atomic.set(layout.jobKey(write.seq), sizes.job, job.record);
        job.parts.forEach((part, i) =>
          atomic.set(layout.partKey(write.seq, i + 1), sizes.part, part)
        );
        if (write.flags) {
          atomic.set(layout.flagsKey(write.seq), sizes.flags, encodeFlags(write.flags));
        }
      } else if (write.kind === "flags") {
        atomic.set(layout.flagsKey(write.seq), sizes.flags, encodeFlags(write.flags));
      } else if (write.kind === "range") {
        atomic.set(layout.acceptedKey(write.first), sizes.accepted, encodeAccepted(write.last));
      } else if (write.kind === "unrange") {
        atomic.delete(layout.acceptedKey(write.first), sizes.accepted);
      } else {
        if (write.written) atomic.delete(layout.jobKey(write.seq), sizes.job);
        if (write.hadFlags) atomic.delete(layout.flagsKey(write.seq), sizes.flags);
        if (remember) done.push({ messageId: write.messageId, seq: write.seq });
        for (let n = 1; n <= write.parts; n++) orphans.push(layout.partKey(write.seq, n));
      }
    }
    let completed: CompletedWrites | undefined;
    if (done.length > 0) {
      completed = view.completed.plan(done, this.#completedWindow);
      for (const { n, value } of completed.sets) {
        atomic.set(layout.completedKey(n), sizes.completed, value, this.#completedRetention);
      }
      for (const n of completed.deletes) atomic.delete(layout.completedKey(n), sizes.completed);
    }
    atomic.set(layout.metaKey, sizes.meta, encodeMeta(plan.currentSeq));
    return { atomic, orphans, completed };
  }

  /** Commits; a failed check means a stale view or fencing, which the caller sorts out. */
  async #commit(atomic: MeasuredAtomic): Promise<string> {
    atomic.assertFits();
    let result;
    try {
      result = await atomic.commit();
    } catch (error) {
      // "database is locked" means not applied; any other failure may have been applied.
      if (!isKvLockedError(error)) this.#view = undefined;
      throw error;
    }
    if (!result.ok) throw new StaleReadError("a check failed");
    return result.versionstamp;
  }

  /** Throws StaleReadError unless the epoch and meta keys still match the view. */
  async #verify(view: View): Promise<void> {
    const { epochKey, metaKey } = this.#layout;
    const [epoch, meta] = await this.#kv.getMany([epochKey, metaKey]);
    checkStamps(view, epoch, meta);
  }

  /** Deletes one commit's worth of orphaned parts; on failure they wait for later or for load. */
  async #collectGarbage(view: View): Promise<void> {
    if (view.orphans.length === 0 || this.#view !== view) return;
    const { epochKey, keySizes, partsPerCollection } = this.#layout;
    const keys = view.orphans.splice(0, partsPerCollection);
    const atomic = new MeasuredAtomic(this.#kv.atomic()).check(
      epochKey,
      keySizes.epoch,
      view.epochVs,
    );
    for (const key of keys) atomic.delete(key, keySizes.part);
    try {
      const result = await atomic.commit();
      if (!result.ok) view.orphans.length = 0; // fenced: the next load finds them
    } catch {
      view.orphans.unshift(...keys);
    }
  }
}

/** The retained jobs that `store` repeats, each once, with their sequences. */
function repeatedJobs(
  store: readonly PlannedStore[],
  retained: ReadonlyMap<string, KvJobInfo>,
): (readonly [string, number])[] {
  const repeated: (readonly [string, number])[] = [];
  let seen: Set<string> | undefined;
  for (const { messageId } of store) {
    const info = retained.get(messageId);
    if (!info || seen?.has(messageId)) continue;
    (seen ??= new Set()).add(messageId);
    repeated.push([messageId, info.seq]);
  }
  return repeated;
}
