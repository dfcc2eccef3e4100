/**
 * A map that remembers only its most recent `capacity` insertions (first in, first out).
 *
 * Eviction walks a ring of keys rather than a `Map`'s iteration order: after many deletions a
 * `Map` iterator has to skip every deleted slot, which made "delete the oldest" linear.
 *
 * @module
 */

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
export class RecentMap<K, V> {
  /** Each remembered key's ring slot; its value sits at the same slot of `#slotValues`. */
  readonly #slots = new Map<K, number>();
  readonly #ring: (K | undefined)[];
  readonly #slotValues: (V | undefined)[];
  #next = 0;

  /** Creates a map holding at most `capacity` entries (0 keeps nothing). */
  constructor(readonly capacity: number) {
    this.#ring = new Array(capacity);
    this.#slotValues = new Array(capacity);
  }

  /** The number of entries. */
  get size(): number {
    return this.#slots.size;
  }

  /** The value for `key`, if remembered. */
  get(key: K): V | undefined {
    const slot = this.#slots.get(key);
    return slot === undefined ? undefined : this.#slotValues[slot];
  }

  /** Whether `key` is remembered. */
  has(key: K): boolean {
    return this.#slots.has(key);
  }

  /** Remember `key`; it becomes the newest entry. */
  set(key: K, value: V): void {
    if (this.capacity === 0) return;
    const slot = this.#next;
    const evicted = this.#ring[slot];
    // A key set again lives at its newer slot: only its latest slot evicts it.
    if (evicted !== undefined && this.#slots.get(evicted) === slot) this.#slots.delete(evicted);
    this.#ring[slot] = key;
    this.#slotValues[slot] = value;
    this.#slots.set(key, slot);
    this.#next = slot + 1 === this.capacity ? 0 : slot + 1;
  }

  /** The entries, oldest first. */
  *[Symbol.iterator](): IterableIterator<[K, V]> {
    for (let i = 0; i < this.capacity; i++) {
      const slot = (this.#next + i) % this.capacity;
      const key = this.#ring[slot];
      if (key !== undefined && this.#slots.get(key) === slot) yield [key, this.#slotValues[slot]!];
    }
  }
}
