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
 * ```
 */
export class RecentMap<K, V> {
  readonly #values = new Map<K, { value: V; slot: number }>();
  readonly #ring: (K | undefined)[];
  #next = 0;

  /** Creates a map holding at most `capacity` entries (0 keeps nothing). */
  constructor(readonly capacity: number) {
    this.#ring = new Array(capacity);
  }

  /** The number of entries. */
  get size(): number {
    return this.#values.size;
  }

  /** The value for `key`, if remembered. */
  get(key: K): V | undefined {
    return this.#values.get(key)?.value;
  }

  /** Whether `key` is remembered. */
  has(key: K): boolean {
    return this.#values.has(key);
  }

  /** Remember `key`; it becomes the newest entry. */
  set(key: K, value: V): void {
    if (this.capacity === 0) return;
    const slot = this.#next;
    const evicted = this.#ring[slot];
    if (evicted !== undefined && this.#values.get(evicted)?.slot === slot) {
      this.#values.delete(evicted);
    }
    this.#ring[slot] = key;
    this.#values.set(key, { value, slot });
    this.#next = (slot + 1) % this.capacity;
  }
}
