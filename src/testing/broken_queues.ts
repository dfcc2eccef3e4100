/**
 * Deliberately broken work queues, each breaking exactly one rule of the contract. They exist to
 * prove that the conformance suite can fail: a suite that passes them would be worthless.
 *
 * @module
 */

import {
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
  type WorkQueueState,
} from "../queue/work_queue.ts";

/** The rule a {@linkcode BrokenWorkQueue} breaks. */
export type QueueFault =
  /** Writes under any epoch succeed: a stale owner keeps writing. */
  | "unfenced"
  /** A repeated store overwrites the payload instead of returning the first write. */
  | "last-write-wins"
  /** Each write yields between reading and writing: concurrent calls interleave. */
  | "racy"
  /** `load` returns its internal state object, so a caller's change sticks. */
  | "leaky-state"
  /** `commit` applies operations one by one and stops at the first error, half applied. */
  | "partial-batch";

/**
 * Every fault, for iterating.
 *
 * @example
 * ```ts
 * import { QUEUE_FAULTS } from "./broken_queues.ts";
 * console.assert(QUEUE_FAULTS.includes("racy"));
 * ```
 */
export const QUEUE_FAULTS: readonly QueueFault[] = [
  "unfenced",
  "last-write-wins",
  "racy",
  "leaky-state",
  "partial-batch",
];

interface Entry {
  readonly seq: number;
  readonly payload: string;
  readonly accepted: boolean;
  readonly confirmed: boolean;
}

/**
 * An in-memory work queue that is correct except for one {@linkcode QueueFault}.
 *
 * @example A stale epoch that should be fenced is not
 * ```ts
 * import { BrokenWorkQueue } from "./broken_queues.ts";
 *
 * const queue = new BrokenWorkQueue("unfenced");
 * const { epoch } = await queue.load();
 * await queue.load();
 * await queue.store(epoch, { messageId: "a", proposedSeq: 1, payload: "1" }); // no QueueFencedError
 * ```
 */
export class BrokenWorkQueue implements DurableWorkQueue {
  /** The broken rule. */
  readonly fault: QueueFault;
  /** Generous limits. */
  readonly batchLimits: QueueBatchLimits = { maxOperations: 1_000, maxBytes: 1 << 20 };
  #epoch = 0;
  #currentSeq = 0;
  readonly #entries = new Map<string, Entry>();
  #shared: WorkQueueState | undefined;

  /** Creates a queue with one fault. */
  constructor(fault: QueueFault) {
    this.fault = fault;
  }

  /** Snapshot and acquire writership. */
  async load(options?: QueueCallOptions): Promise<LoadResult> {
    options?.signal?.throwIfAborted();
    this.#epoch += 1;
    if (this.fault === "leaky-state" && this.#shared) {
      return { epoch: this.#epoch, state: this.#shared };
    }
    const unconfirmed = [...this.#entries]
      .filter(([, entry]) => entry.accepted && !entry.confirmed)
      .map(([messageId, entry]) => ({ messageId, seq: entry.seq, payload: entry.payload }))
      .sort((a, b) => a.seq - b.seq);
    const state = { currentSeq: this.#currentSeq, unconfirmed };
    if (this.fault === "leaky-state") this.#shared = state;
    return await Promise.resolve({ epoch: this.#epoch, state });
  }

  /** Store one job. */
  async store(
    epoch: QueueEpoch,
    request: StoreRequest,
    options?: QueueCallOptions,
  ): Promise<StoreResult> {
    options?.signal?.throwIfAborted();
    this.#fence(epoch);
    const { messageId, proposedSeq, payload } = request;
    const existing = this.#entries.get(messageId);
    if (existing && this.fault === "last-write-wins") {
      this.#put(messageId, { ...existing, payload });
      return { seq: existing.seq, alreadyStored: true, payload };
    }
    if (existing) return { seq: existing.seq, alreadyStored: true, payload: existing.payload };
    const next = this.#currentSeq + 1;
    if (this.fault === "racy") await Promise.resolve(); // lets other calls interleave
    if (proposedSeq !== next) {
      throw new QueueConflictError(
        `Cannot store ${messageId}: proposed ${proposedSeq}, next ${next}`,
      );
    }
    this.#currentSeq = next;
    this.#put(messageId, { seq: next, payload, accepted: false, confirmed: false });
    return { seq: next, alreadyStored: false, payload };
  }

  /** Accept one job. */
  async accept(epoch: QueueEpoch, messageId: string, options?: QueueCallOptions): Promise<void> {
    options?.signal?.throwIfAborted();
    this.#fence(epoch);
    await this.#mark(messageId, "accepted");
  }

  /** Confirm one job. */
  async confirmMessage(
    epoch: QueueEpoch,
    messageId: string,
    options?: QueueCallOptions,
  ): Promise<void> {
    options?.signal?.throwIfAborted();
    this.#fence(epoch);
    await this.#mark(messageId, "confirmed");
  }

  /** Apply a batch (all-or-nothing unless the fault is `partial-batch`). */
  async commit(
    epoch: QueueEpoch,
    batch: QueueBatch,
    options?: QueueCallOptions,
  ): Promise<QueueBatchResult> {
    options?.signal?.throwIfAborted();
    this.#fence(epoch);
    const jobs = [...(batch.store?.jobs ?? [])];
    const accept = [...(batch.accept ?? [])];
    const confirm = [...(batch.confirm ?? [])];
    if (this.fault !== "partial-batch") {
      const known = new Set([...this.#entries.keys(), ...jobs.map((job) => job.messageId)]);
      const fresh = jobs.some((job) => !this.#entries.has(job.messageId));
      if (fresh && batch.store!.firstSeq !== this.#currentSeq + 1) {
        throw new QueueConflictError(`Cannot store at ${batch.store!.firstSeq}`);
      }
      const unknown = accept.find((id) => !known.has(id));
      if (unknown !== undefined) throw new QueueConflictError(`Cannot mark ${unknown}: unknown`);
    }
    const stored: StoreResult[] = [];
    let seq = batch.store?.firstSeq ?? 0;
    for (const job of jobs) {
      const result = await this.store(epoch, { ...job, proposedSeq: seq });
      if (!result.alreadyStored) seq += 1;
      stored.push(result);
    }
    // Compaction waits for the end of the batch, so a repeated MessageID is a repeat.
    for (const id of accept) await this.#mark(id, "accepted", false);
    for (const id of confirm) await this.#mark(id, "confirmed", false);
    for (const [id, entry] of this.#entries) {
      if (entry.accepted && entry.confirmed) this.#put(id, undefined);
    }
    return { stored };
  }

  async #mark(messageId: string, flag: "accepted" | "confirmed", compact = true): Promise<void> {
    const entry = this.#entries.get(messageId);
    if (!entry && flag === "confirmed") return; // compacted already: a no-op
    if (!entry) throw new QueueConflictError(`Cannot mark ${messageId}: unknown MessageID`);
    if (this.fault === "racy") await Promise.resolve();
    const next = { ...entry, [flag]: true };
    this.#put(messageId, compact && next.accepted && next.confirmed ? undefined : next);
  }

  #put(messageId: string, entry: Entry | undefined): void {
    if (entry) this.#entries.set(messageId, entry);
    else this.#entries.delete(messageId);
    this.#shared = undefined;
  }

  #fence(epoch: QueueEpoch): void {
    if (this.fault === "unfenced") return;
    if (epoch === 0 || epoch !== this.#epoch) {
      throw new QueueFencedError(`Cannot write: epoch ${epoch} is fenced`);
    }
  }
}
