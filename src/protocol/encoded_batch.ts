/**
 * A `Produced` whose jobs are already checked and encoded, by column: the MessageIDs and the
 * payloads' JSON texts in two arrays. `BufferedProducer` checks every MessageID and encodes every
 * payload when a job is submitted; answering a grant with this instead of a plain `Produced`
 * spares an object and a `JsonText` a job, and the controller reads the columns as they are
 * instead of walking every job's fields again (on Bun that walk was a tenth of the controller's
 * time a job).
 *
 * Only code holding this module's factory can make one, so the controller can trust that the
 * texts are valid JSON and the MessageIDs valid ids (the producer checked both, against the
 * same rules as `ProducedSchema`). Anyone else reading it sees an ordinary batch `Produced` (a
 * `ColumnBatch`): `jobs` is made on first use, each payload decoded from its text.
 *
 * @module
 */

import { ColumnBatch } from "./column_batch.ts";
import type { ProducedJob } from "./schemas.ts";

const fromProducer = Symbol("EncodedBatch");

/**
 * Make an {@linkcode EncodedBatch}. The caller vouches that every id is a valid MessageID (a
 * non-blank string of at most `MAX_ID_LENGTH` units), that every text came from
 * `JSON.stringify`, and that it changes neither array afterwards (the controller still refuses
 * a batch that repeats a MessageID). Not exported from `mod.ts`.
 *
 * @example
 * ```ts
 * import { encodedBatch } from "./encoded_batch.ts";
 * const batch = encodedBatch("s1", "t1", ["a", "b"], ['{"n":1}', "2"]);
 * console.assert(batch.jobs[1].messageId === "b");
 * console.assert(JSON.stringify(batch) ===
 *   '{"session":"s1","token":"t1","jobs":[{"messageId":"a","payload":{"n":1}},{"messageId":"b","payload":2}]}');
 * ```
 */
export function encodedBatch(
  session: string,
  token: string,
  ids: readonly string[],
  texts: readonly string[],
): EncodedBatch {
  return new EncodedBatch(fromProducer, session, token, ids, texts);
}

/**
 * The jobs of a grant, checked and encoded by the producer, by column.
 *
 * @example
 * ```ts
 * import { EncodedBatch, encodedBatch } from "./encoded_batch.ts";
 * const batch: unknown = encodedBatch("s1", "t1", ["a"], ["1"]);
 * if (batch instanceof EncodedBatch) console.assert(batch.texts[0] === "1");
 * ```
 */
export class EncodedBatch extends ColumnBatch<ProducedJob> {
  readonly #ids: readonly string[];
  readonly #texts: readonly string[];

  /** Use {@linkcode encodedBatch}. */
  constructor(
    token: typeof fromProducer,
    session: string,
    grantToken: string,
    ids: readonly string[],
    texts: readonly string[],
  ) {
    if (token !== fromProducer) throw new TypeError("Cannot create EncodedBatch: use encodedBatch");
    if (ids.length !== texts.length) {
      throw new RangeError("Cannot create EncodedBatch: one text per MessageID");
    }
    super(session, grantToken);
    this.#ids = ids;
    this.#texts = texts;
  }

  /** The MessageIDs, in order. */
  get ids(): readonly string[] {
    return this.#ids;
  }

  /** The payloads' JSON texts, in the order of `ids`. */
  get texts(): readonly string[] {
    return this.#texts;
  }

  /** Each job with its payload decoded from its text. */
  protected plainJobs(): readonly ProducedJob[] {
    return this.#ids.map((messageId, i) => ({ messageId, payload: JSON.parse(this.#texts[i]) }));
  }
}
