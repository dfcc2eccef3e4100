/**
 * A handshake message carried by column (`EncodedBatch`, `StoredBatch`) whose plain form, the
 * `jobs` array every other reader expects, is made only when someone reads it.
 *
 * `jobs` is an own enumerable property, unlike a class getter, so that a spread,
 * `structuredClone` (a port forwarded to another thread) and `JSON.stringify` all copy it. Every
 * batch shares one getter: with a closure a batch, `controller_cpu.ts` ran a quarter slower on
 * Deno.
 *
 * @module
 */

/** Set in the class below, which reads its private field. */
let JOBS: PropertyDescriptor;

/**
 * The session and token of a batch by column, and its `jobs` made on first use by `plainJobs`.
 *
 * @example
 * ```ts
 * import { ColumnBatch } from "./column_batch.ts";
 * class Squares extends ColumnBatch<number> {
 *   readonly #count: number;
 *   constructor(count: number) {
 *     super("s1", "t1");
 *     this.#count = count;
 *   }
 *   protected plainJobs(): readonly number[] {
 *     return Array.from({ length: this.#count }, (_, i) => i * i);
 *   }
 * }
 * console.assert(JSON.stringify(new Squares(3)) === '{"session":"s1","token":"t1","jobs":[0,1,4]}');
 * ```
 */
export abstract class ColumnBatch<Job> {
  /** The controller session the batch belongs to. */
  readonly session: string;
  /** The grant's token. */
  readonly token: string;
  #jobs: readonly Job[] | undefined;
  /** The batch's jobs as a plain message has them (made on first use). */
  declare readonly jobs: readonly Job[];

  /** Sets the session and token and defines `jobs`. */
  constructor(session: string, token: string) {
    this.session = session;
    this.token = token;
    Object.defineProperty(this, "jobs", JOBS);
  }

  /** The plain jobs, made from the columns (called once). */
  protected abstract plainJobs(): readonly Job[];

  /** The plain form: session, token and jobs. */
  toJSON(): { session: string; token: string; jobs: readonly Job[] } {
    return { session: this.session, token: this.token, jobs: this.jobs };
  }

  static {
    JOBS = {
      enumerable: true,
      get(this: ColumnBatch<unknown>) {
        this.#jobs ??= this.plainJobs();
        return this.#jobs;
      },
    };
  }
}
