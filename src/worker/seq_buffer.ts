/**
 * The jobs a worker endpoint holds ahead of the one it runs, by sequence number: a ring of
 * `capacity` slots, the job of sequence `seq` in slot `seq % capacity`.
 *
 * Why not a `Map` keyed by sequence: every job is added once and deleted once, so the map's hash
 * table fills with deleted entries and is rebuilt about every `capacity` jobs, and V8 links each
 * table it replaces to the new one (for iterators still on the old). Once one table of that chain
 * is in the old generation, each young collection keeps the next one alive, with the jobs it
 * held, and promotes it, until a full collection. In a worker process at full speed that kept
 * about 10 MB of dead jobs alive at every young collection, which paused 3.2 ms on average (up to
 * 20 ms) where it pauses 0.4–0.5 ms with this ring (`bench/tools/worker_gc.ts`; see
 * `bench/README.md`, "The worker's buffer: dead jobs kept alive").
 *
 * The buffer holds sequences from the one the endpoint expects next up to the demand it granted,
 * which its window bounds, so with `capacity` = the window no two share a slot. Should they (a
 * controller granting beyond the window), the lower sequence keeps the slot: the higher job is
 * dropped as if the buffer were full, and comes back when the endpoint asks for the gap.
 *
 * @module
 */

/**
 * Jobs by sequence number, at most `capacity` consecutive ones.
 *
 * @example
 * ```ts
 * import { SeqBuffer } from "./seq_buffer.ts";
 * const buffer = new SeqBuffer<string>(4);
 * buffer.set(7, "a");
 * buffer.set(8, "b");
 * console.assert(buffer.get(7) === "a" && buffer.size === 2);
 * buffer.delete(7);
 * console.assert(!buffer.has(7) && buffer.has(8));
 * ```
 */
export class SeqBuffer<T> {
  readonly #items: (T | undefined)[];
  readonly #seqs: number[];
  #size = 0;

  /** A buffer for `capacity` (at least 1) consecutive sequence numbers. */
  constructor(readonly capacity: number) {
    const slots = Math.max(1, Math.floor(capacity));
    this.#items = new Array<T | undefined>(slots).fill(undefined);
    this.#seqs = new Array<number>(slots).fill(-1);
  }

  /** Jobs held. */
  get size(): number {
    return this.#size;
  }

  /** Whether the job of `seq` is held. */
  has(seq: number): boolean {
    const slot = seq % this.#items.length;
    return this.#seqs[slot] === seq && this.#items[slot] !== undefined;
  }

  /** The job of `seq`, if held. */
  get(seq: number): T | undefined {
    const slot = seq % this.#items.length;
    return this.#seqs[slot] === seq ? this.#items[slot] : undefined;
  }

  /**
   * Hold `item` as the job of `seq`; false when a lower sequence holds its slot (see the module
   * text). A higher one is dropped for it.
   */
  set(seq: number, item: T): boolean {
    const slot = seq % this.#items.length;
    if (this.#items[slot] !== undefined) {
      if (this.#seqs[slot] < seq) return false;
      this.#size -= 1; // the same sequence again, or a higher one giving way
    }
    this.#items[slot] = item;
    this.#seqs[slot] = seq;
    this.#size += 1;
    return true;
  }

  /** Forget the job of `seq`; whether it was held. */
  delete(seq: number): boolean {
    const slot = seq % this.#items.length;
    if (this.#seqs[slot] !== seq || this.#items[slot] === undefined) return false;
    this.#items[slot] = undefined;
    this.#size -= 1;
    return true;
  }

  /** Forget every job. */
  clear(): void {
    if (this.#size === 0) return;
    this.#items.fill(undefined);
    this.#size = 0;
  }
}
