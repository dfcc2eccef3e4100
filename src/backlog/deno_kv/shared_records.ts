/**
 * Which jobs a shared KV record still speaks for. The job store's journal writes one record for
 * the tries a commit starts and one for the jobs a commit finishes; a job leaves its record when
 * it is written again (or forgotten), and the record is deleted once no job is left in it.
 *
 * @module
 */

/**
 * The jobs each record (by its number) still holds, and the records none is left in, for the
 * next commit to delete.
 *
 * @example
 * ```ts
 * import { SharedRecords } from "./shared_records.ts";
 *
 * const records = new SharedRecords();
 * records.hold(1, ["a", "b"]);
 * records.leave("a");
 * records.leave("b");
 * console.assert(records.takeSpent()[0] === 1);
 * ```
 */
export class SharedRecords {
  /** The record each job is in. */
  readonly #recordOf = new Map<string, number>();
  /** The jobs still in each record. */
  readonly #jobsIn = new Map<number, Set<string>>();
  /** Records no job is left in. */
  #spent: number[] = [];

  /** Record `record` holds `ids` (an empty list makes it spent at once). */
  hold(record: number, ids: Iterable<string>): void {
    const jobs = new Set(ids);
    if (jobs.size === 0) return void this.#spent.push(record);
    this.#jobsIn.set(record, jobs);
    for (const id of jobs) this.#recordOf.set(id, record);
  }

  /** Whether `id` is in a record. */
  has(id: string): boolean {
    return this.#recordOf.has(id);
  }

  /** `id` leaves its record, if it is in one (true then); the last to leave makes it spent. */
  leave(id: string): boolean {
    const record = this.#recordOf.get(id);
    if (record === undefined) return false;
    this.#recordOf.delete(id);
    const jobs = this.#jobsIn.get(record)!;
    jobs.delete(id);
    if (jobs.size === 0) {
      this.#jobsIn.delete(record);
      this.#spent.push(record);
    }
    return true;
  }

  /** The spent records since the last call, for a commit to delete. */
  takeSpent(): number[] {
    const spent = this.#spent;
    this.#spent = [];
    return spent;
  }

  /** Forget everything (a load or re-read fills it again). */
  clear(): void {
    this.#recordOf.clear();
    this.#jobsIn.clear();
    this.#spent = [];
  }
}
