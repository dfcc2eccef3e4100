/**
 * The controller's `Stored`, by column: the batch's MessageIDs (the very array of the handshake)
 * and their store sequences. A producer that knows it (`BufferedProducer`) reads the columns; any
 * other sees an ordinary `Stored`: `jobs` is made on first use, as an own enumerable property, so
 * a spread, `structuredClone` and `JSON.stringify` all give that plain form. It spares the
 * controller an object a job on every handshake.
 *
 * @module
 */

/** The descriptor of every batch's own `jobs` (set in the class, which reads its fields). */
let JOBS: PropertyDescriptor;

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
export class StoredBatch {
  /** The controller session. */
  readonly session: string;
  /** The grant's token. */
  readonly token: string;
  readonly #ids: readonly string[];
  readonly #seqs: readonly number[];
  #jobs: readonly { readonly messageId: string; readonly seq: number }[] | undefined;
  /** In the order they were produced (made on first use). */
  declare readonly jobs: readonly { readonly messageId: string; readonly seq: number }[];

  /** `ids[i]` was stored under `seqs[i]`; neither array may change afterwards. */
  constructor(session: string, token: string, ids: readonly string[], seqs: readonly number[]) {
    if (ids.length !== seqs.length) {
      throw new RangeError("Cannot create StoredBatch: one sequence per MessageID");
    }
    this.session = session;
    this.token = token;
    this.#ids = ids;
    this.#seqs = seqs;
    // Own and enumerable, unlike a class getter, so that copies of the batch carry its jobs. One
    // getter for every batch: with a closure each, controller_cpu ran a quarter slower on Deno.
    Object.defineProperty(this, "jobs", JOBS);
  }

  /** The MessageIDs, in order. */
  get ids(): readonly string[] {
    return this.#ids;
  }

  /** The store sequences, in the order of `ids`. */
  get seqs(): readonly number[] {
    return this.#seqs;
  }

  #plainJobs(): readonly { readonly messageId: string; readonly seq: number }[] {
    this.#jobs ??= this.#ids.map((messageId, i) => ({ messageId, seq: this.#seqs[i] }));
    return this.#jobs;
  }

  static {
    JOBS = {
      enumerable: true,
      get(this: StoredBatch) {
        return this.#plainJobs();
      },
    };
  }
}
