/**
 * The controller's `Stored`, by column: the batch's MessageIDs (the very array of the handshake)
 * and their store sequences. A producer that knows it (`BufferedProducer`) reads the columns; any
 * other sees an ordinary `Stored` (a `ColumnBatch`: `jobs` made on first use). It spares the
 * controller an object a job on every handshake.
 *
 * @module
 */

import { ColumnBatch } from "./column_batch.ts";

/** One stored job as a plain `Stored` lists it. */
export interface StoredJob {
  /** The job's MessageID. */
  readonly messageId: string;
  /** Its store sequence. */
  readonly seq: number;
}

/**
 * The jobs of a grant are stored, by column.
 *
 * @example
 * ```ts
 * import { StoredBatch } from "./stored_batch.ts";
 * const stored = new StoredBatch("s1", "t1", ["a", "b"], [7, 8]);
 * console.assert(stored.seqs[1] === 8 && stored.jobs[1].messageId === "b");
 * console.assert(JSON.stringify(stored) ===
 *   '{"session":"s1","token":"t1","jobs":[{"messageId":"a","seq":7},{"messageId":"b","seq":8}]}');
 * ```
 */
export class StoredBatch extends ColumnBatch<StoredJob> {
  readonly #ids: readonly string[];
  readonly #seqs: readonly number[];

  /** `ids[i]` was stored under `seqs[i]`; neither array may change afterwards. */
  constructor(session: string, token: string, ids: readonly string[], seqs: readonly number[]) {
    if (ids.length !== seqs.length) {
      throw new RangeError("Cannot create StoredBatch: one sequence per MessageID");
    }
    super(session, token);
    this.#ids = ids;
    this.#seqs = seqs;
  }

  /** The MessageIDs, in order. */
  get ids(): readonly string[] {
    return this.#ids;
  }

  /** The store sequences, in the order of `ids`. */
  get seqs(): readonly number[] {
    return this.#seqs;
  }

  /** Each MessageID with its sequence. */
  protected plainJobs(): readonly StoredJob[] {
    return this.#ids.map((messageId, i) => ({ messageId, seq: this.#seqs[i] }));
  }
}
