/**
 * A map that remembers only its most recent `capacity` insertions (first in, first out).
 *
 * Eviction walks a ring of keys rather than a `Map`'s iteration order: after many deletions a
 * `Map` iterator has to skip every deleted slot, which made "delete the oldest" linear. Keys are
 * strings (MessageIDs) in an {@linkcode IdTable}; every method takes the key's `hashId` as an
 * optional last argument, for a caller that has it already.
 *
 * @module
 */

import { hashId, IdTable } from "./id_table.ts";

/**
 * A bounded first-in-first-out map.
 *
 * @example
 * ```ts
 * import { RecentMap } from "./recent_map.ts";
 * const recent = new RecentMap<string, number>(2);
 * recent.set("a", 1);
 * recent.set("b", 2);
 * recent.set("c", 3); // evicts "a"
 * console.assert(!recent.has("a") && recent.get("c") === 3);
 * console.assert([...recent].map(([key]) => key).join() === "b,c");
 * ```
 */
export class RecentMap<K extends string, V> {
  /** Each remembered key's ring slot; its value sits at the same slot of `#slotValues`. */
  readonly #slots = new IdTable<number>();
  readonly #ring: (K | undefined)[];
  readonly #slotValues: (V | undefined)[];
  /** Each ring key's hash, so that evicting it hashes nothing. */
  readonly #ringHashes: Int32Array;
  #next = 0;

  /** Creates a map holding at most `capacity` entries (0 keeps nothing). */
  constructor(readonly capacity: number) {
    this.#ring = new Array(capacity);
    this.#slotValues = new Array(capacity);
    this.#ringHashes = new Int32Array(capacity);
  }

  /** The number of entries. */
  get size(): number {
    return this.#slots.size;
  }

  /** The value for `key`, if remembered. */
  get(key: K, hash: number = hashId(key)): V | undefined {
    const slot = this.#slots.get(key, hash);
    return slot === undefined ? undefined : this.#slotValues[slot];
  }

  /** Whether `key` is remembered. */
  has(key: K, hash: number = hashId(key)): boolean {
    return this.#slots.has(key, hash);
  }

  /** Forget `key`. */
  delete(key: K, hash: number = hashId(key)): boolean {
    return this.#slots.delete(key, hash); // its ring slot is now stale and skipped
  }

  /** Remember `key`; it becomes the newest entry. */
  set(key: K, value: V, hash: number = hashId(key)): void {
    if (this.capacity === 0) return;
    const slot = this.#next;
    const evicted = this.#ring[slot];
    // A key set again lives at its newer slot: only its latest slot evicts it.
    if (evicted !== undefined) {
      const evictedHash = this.#ringHashes[slot];
      if (this.#slots.get(evicted, evictedHash) === slot) this.#slots.delete(evicted, evictedHash);
    }
    this.#ring[slot] = key;
    this.#ringHashes[slot] = hash;
    this.#slotValues[slot] = value;
    this.#slots.set(key, slot, hash);
    this.#next = slot + 1 === this.capacity ? 0 : slot + 1;
  }

  /** The entries, oldest first. */
  *[Symbol.iterator](): IterableIterator<[K, V]> {
    for (let i = 0; i < this.capacity; i++) {
      const slot = (this.#next + i) % this.capacity;
      const key = this.#ring[slot];
      if (key !== undefined && this.#slots.get(key, this.#ringHashes[slot]) === slot) {
        yield [key, this.#slotValues[slot]!];
      }
    }
  }
}
