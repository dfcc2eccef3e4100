/**
 * The in-memory reference implementation of {@linkcode DurableWorkQueue}: the contract in its
 * plainest form, used by tests and as the model adapters are checked against. It survives a
 * controller restart inside one process, never a process crash.
 *
 * @module
 */

import { IdTable } from "../core/id_table.ts";
import { RecentMap } from "../core/recent_map.ts";
import { checkBatch, checkStoredJob } from "./batch_checks.ts";
import {
  type CompletedMessage,
  type DurableWorkQueue,
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
} from "./work_queue.ts";

interface Entry {
  readonly seq: number;
  readonly payload: string;
  accepted: boolean;
  confirmed: boolean;
}

/**
 * A process-local {@linkcode DurableWorkQueue}. Every call completes atomically (JavaScript runs
 * it to the end before any other call starts), so all calls are linearizable. A job is compacted
 * as soon as it is both accepted and confirmed; its MessageID then counts as new, and the last
 * `completedWindow` (default 10,000) compacted jobs are reported by `load` as recently completed.
 *
 * @example Store, accept, reload
 * ```ts
 * import { MemoryWorkQueue } from "../../mod.ts";
 *
 * const queue = new MemoryWorkQueue();
 * const { epoch } = await queue.load();
 * await queue.store(epoch, { messageId: "a", proposedSeq: 1, payload: '"hello"' });
 * await queue.accept(epoch, "a");
 * const { state } = await queue.load();
 * console.assert(state.unconfirmed[0].messageId === "a");
 * ```
 */
export class MemoryWorkQueue implements DurableWorkQueue {
  /** Large enough to never be the bottleneck, small enough to keep a commit bounded. */
  readonly batchLimits: QueueBatchLimits = { maxOperations: 10_000, maxBytes: 64 * 1024 * 1024 };
  #epoch = 0;
  #currentSeq = 0;
  readonly #entries = new IdTable<Entry>();
  readonly #completed: RecentMap<string, number>;

  /** Creates an empty queue remembering the last `completedWindow` completions (0 disables). */
  constructor(options: { readonly completedWindow?: number } = {}) {
    this.#completed = new RecentMap(options.completedWindow ?? 10_000);
  }

  /** The number of retained (not yet compacted) jobs; for tests and diagnostics. */
  get size(): number {
    return this.#entries.size;
  }

  /** Snapshot and acquire writership under a new epoch. */
  load(options?: QueueCallOptions): Promise<LoadResult> {
    return this.#run(options, () => {
      const unconfirmed: UnconfirmedMessage[] = [];
      for (const [messageId, entry] of this.#entries) {
        if (entry.accepted && !entry.confirmed) {
          unconfirmed.push({ messageId, seq: entry.seq, payload: entry.payload });
        }
      }
      unconfirmed.sort((a, b) => a.seq - b.seq);
      const recentlyCompleted: CompletedMessage[] = [];
      for (const [messageId, seq] of this.#completed) recentlyCompleted.push({ messageId, seq });
      this.#epoch += 1;
      const state = { currentSeq: this.#currentSeq, unconfirmed, recentlyCompleted };
      return { epoch: this.#epoch, state };
    });
  }

  /** Store one job; the first write for a MessageID wins. */
  store(
    epoch: QueueEpoch,
    request: StoreRequest,
    options?: QueueCallOptions,
  ): Promise<StoreResult> {
    return this.#run(options, () => {
      this.#fence(epoch);
      checkStoredJob(request.messageId, request.payload);
      const existing = this.#entries.get(request.messageId);
      if (existing) return { seq: existing.seq, alreadyStored: true, payload: existing.payload };
      if (request.proposedSeq !== this.#currentSeq + 1) {
        throw new QueueConflictError(
          `Cannot store ${request.messageId}: proposed sequence ${request.proposedSeq} is not ${
            this.#currentSeq + 1
          }`,
        );
      }
      return this.#append(request.messageId, request.payload);
    });
  }

  /** Record that the producer removed the job from its own source. */
  accept(epoch: QueueEpoch, messageId: string, options?: QueueCallOptions): Promise<void> {
    return this.#run(options, () => {
      this.#fence(epoch);
      this.#mark(messageId, "accepted");
    });
  }

  /** Mark one job complete. */
  confirmMessage(epoch: QueueEpoch, messageId: string, options?: QueueCallOptions): Promise<void> {
    return this.#run(options, () => {
      this.#fence(epoch);
      this.#mark(messageId, "confirmed");
    });
  }

  /** Apply stores, accepts and confirms all-or-nothing. */
  commit(
    epoch: QueueEpoch,
    batch: QueueBatch,
    options?: QueueCallOptions,
  ): Promise<QueueBatchResult> {
    return this.#run(options, () => {
      this.#fence(epoch);
      // Validate everything first so that a failure applies nothing.
      const jobs = batch.store?.jobs ?? [];
      checkBatch(batch, this.#currentSeq + 1, (id) => this.#entries.has(id));
      const stored = jobs.map((job) => {
        const existing = this.#entries.get(job.messageId);
        return existing
          ? { seq: existing.seq, alreadyStored: true, payload: existing.payload }
          : this.#append(job.messageId, job.payload);
      });
      // Set every flag first and compact once at the end, so a MessageID repeated in the batch
      // is still known when its second mark applies.
      const touched = [...(batch.accept ?? []), ...(batch.confirm ?? [])];
      for (const id of batch.accept ?? []) this.#entries.get(id)!.accepted = true;
      for (const id of batch.confirm ?? []) {
        const entry = this.#entries.get(id);
        if (entry) entry.confirmed = true; // gone already: a repeat, a no-op
      }
      for (const id of touched) this.#compact(id);
      return { stored };
    });
  }

  #append(messageId: string, payload: string): StoreResult {
    this.#currentSeq += 1;
    this.#entries.set(messageId, {
      seq: this.#currentSeq,
      payload,
      accepted: false,
      confirmed: false,
    });
    return { seq: this.#currentSeq, alreadyStored: false, payload };
  }

  #mark(messageId: string, flag: "accepted" | "confirmed"): void {
    const entry = this.#entries.get(messageId);
    if (!entry && flag === "confirmed") return; // confirmed and compacted already: a no-op
    if (!entry) throw new QueueConflictError(`Cannot mark ${messageId} ${flag}: unknown MessageID`);
    entry[flag] = true;
    this.#compact(messageId);
  }

  /** Drop a job that is both accepted and confirmed: its MessageID then counts as new. */
  #compact(messageId: string): void {
    const entry = this.#entries.get(messageId);
    if (!entry?.accepted || !entry.confirmed) return;
    this.#entries.delete(messageId);
    if (this.#completed.capacity > 0) this.#completed.set(messageId, entry.seq);
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
