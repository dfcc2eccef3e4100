/**
 * The recently completed jobs of the Deno KV work queue: a ring of `completed` records, one (or,
 * for very long MessageIDs, a few) per commit that compacts jobs, so that remembering a job costs
 * a share of one mutation instead of a key of its own.
 *
 * Records are numbered in commit order. After each commit the oldest records are deleted while
 * the rest still hold `completedWindow` jobs, so at least the last `completedWindow` completions
 * are remembered, and at most one commit's more. A commit deletes at most
 * {@linkcode MAX_COMPLETED_DELETES} records (a number `batchLimits` set aside, so that deletes
 * cost no mutations per job), and never one it wrote: a ring that is over its window (a smaller
 * `completedWindow` than before) shrinks over a few commits.
 *
 * @module
 */

import { utf8Length } from "../../core/utf8.ts";
import { COMPLETED_BOUNDS, type CompletedEntry, encodeCompleted, RECORD_BOUNDS } from "./codec.ts";
import { KV_LIMITS } from "./port.ts";
import { Deque } from "../../core/deque.ts";

/** One record of the ring: its number and how many jobs it holds. */
export interface CompletedRecordInfo {
  /** The record's number (its key's last part). */
  readonly n: number;
  /** The jobs it holds (1 for a record that cannot be read). */
  readonly count: number;
}

/** What one commit does to the ring. */
export interface CompletedWrites {
  /** Records to write, with the jobs each holds. */
  readonly sets: readonly {
    readonly n: number;
    readonly count: number;
    readonly value: Uint8Array;
  }[];
  /** Numbers of the oldest records to delete, oldest first. */
  readonly deletes: readonly number[];
}

/**
 * The most records one commit deletes. A commit usually writes one, so a ring within its window
 * deletes one or two a commit.
 */
export const MAX_COMPLETED_DELETES = 16;

/** The largest completed record: one KV value. */
export const MAX_COMPLETED_RECORD_BYTES: number = KV_LIMITS.maxValueBytes;

/**
 * The ring as a handle knows it: what is in the store while the handle's view is current.
 *
 * @example Remember three jobs in a ring of two
 * ```ts
 * import { CompletedRing } from "./completed.ts";
 *
 * const ring = new CompletedRing([{ n: 1, count: 2 }]);
 * const entries = [{ messageId: "a", seq: 3 }, { messageId: "b", seq: 4 }];
 * const writes = ring.plan(entries, 2);
 * console.assert(writes.sets[0].n === 2 && writes.deletes[0] === 1);
 * ring.apply(writes);
 * console.assert(ring.total === 2);
 * ```
 */
export class CompletedRing {
  readonly #records = new Deque<CompletedRecordInfo>();
  #total = 0;
  #next = 1;

  /** The ring of these records, oldest first (as listed: by number). */
  constructor(records: readonly CompletedRecordInfo[] = []) {
    for (const record of records) this.#add(record);
  }

  /** The jobs the records hold. */
  get total(): number {
    return this.#total;
  }

  /**
   * The records and deletes that remember `entries` (the jobs one commit compacts) within
   * `window`; changes nothing.
   */
  plan(entries: readonly CompletedEntry[], window: number): CompletedWrites {
    const sets: { n: number; count: number; value: Uint8Array }[] = [];
    let next = this.#next;
    let chunk: CompletedEntry[] = [];
    let idBytes: number[] = [];
    let size = COMPLETED_BOUNDS.fixed;
    const flush = () => {
      sets.push({ n: next++, count: chunk.length, value: encodeCompleted(chunk, idBytes) });
      chunk = [];
      idBytes = [];
      size = COMPLETED_BOUNDS.fixed;
    };
    for (const entry of entries) {
      const bytes = utf8Length(entry.messageId);
      if (size + bytes + COMPLETED_BOUNDS.perJob > MAX_COMPLETED_RECORD_BYTES) flush();
      chunk.push(entry);
      idBytes.push(bytes);
      size += bytes + COMPLETED_BOUNDS.perJob;
    }
    if (chunk.length > 0) flush();
    let total = this.#total + entries.length;
    const deletes: number[] = [];
    for (let i = 0; i < this.#records.length && deletes.length < MAX_COMPLETED_DELETES; i++) {
      const oldest = this.#records.at(i)!;
      if (total - oldest.count < window) break;
      total -= oldest.count;
      deletes.push(oldest.n);
    }
    return { sets, deletes };
  }

  /** Applies a plan once its commit is durable. */
  apply(writes: CompletedWrites): void {
    for (let i = 0; i < writes.deletes.length; i++) this.#total -= this.#records.shift()!.count;
    for (const { n, count } of writes.sets) this.#add({ n, count });
  }

  #add(record: CompletedRecordInfo): void {
    this.#records.pushBack(record);
    this.#total += record.count;
    this.#next = record.n + 1;
  }
}

/**
 * How many records one commit may write when it compacts jobs whose MessageIDs take `idBytes`
 * in all, `jobs` of them: what `batchLimits` reserve.
 *
 * @example
 * ```ts
 * import { maxCompletedRecords } from "./completed.ts";
 * console.assert(maxCompletedRecords(100, 1) === 1);
 * ```
 */
export function maxCompletedRecords(idBytes: number, jobs: number): number {
  // Each record but the last is filled to within one job (at most one MessageID) of full.
  const job = RECORD_BOUNDS.maxMessageIdBytes + COMPLETED_BOUNDS.perJob;
  const room = MAX_COMPLETED_RECORD_BYTES - COMPLETED_BOUNDS.fixed - job;
  return Math.ceil((idBytes + jobs * COMPLETED_BOUNDS.perJob) / room) + 1;
}
