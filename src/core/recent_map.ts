/**
 * A map that remembers only its most recent `capacity` insertions (first in, first out).
 *
 * Entries live in a ring in the order they were set; eviction walks the ring rather than a
 * `Map`'s iteration order (after many deletions a `Map` iterator has to skip every deleted slot,
 * which made "delete the oldest" linear). Keys are strings (MessageIDs) hashed with
 * {@linkcode hashId}; every method takes the key's hash as an optional last argument, for a caller
 * that has it already.
 *
 * The index from key to ring slot is one `Int32Array` of (hash, ring slot + 1) pairs, open
 * addressing with linear probing at a load of at most 1/2, grown (rebuilt from the ring) as the
 * entries come, so that a large window costs memory only once it fills. A probe reads
 * one pair (one cache line) per step and compares a key string only when the hashes match; an
 * eviction finds its entry by ring slot and compares no string at all. The controller sets an
 * entry for every job it completes in a window of 10,000: with a general `IdTable` (three arrays,
 * its keys compared on every hit) this map was the largest single cost per job.
 *
 * As in {@linkcode IdTable}, a probe longer than {@linkcode MAX_PROBE} slots (crafted keys; random
 * ones practically never) moves the index into a native `Map` for good.
 *
 * @module
 */

import { hashId, MAX_PROBE } from "./id_table.ts";

/** The index's first size, in pairs; it doubles whenever it is half full. */
const MIN_PAIRS = 16;

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
  /** The keys in the order they were set; undefined where a slot is free or its key went. */
  readonly #ring: (K | undefined)[];
  readonly #ringValues: (V | undefined)[];
  readonly #ringHashes: Int32Array;
  /** Pairs (hash, ring slot + 1); a pair with ring slot + 1 = 0 is free. */
  #index = new Int32Array(2 * MIN_PAIRS);
  #mask = MIN_PAIRS - 1;
  /** Set once a probe ran too long: from then on the index is this map (key → ring slot). */
  #map: Map<K, number> | undefined;
  #size = 0;
  #next = 0;

  /** Creates a map holding at most `capacity` entries (0 keeps nothing). */
  constructor(readonly capacity: number) {
    this.#ring = new Array(capacity);
    this.#ringValues = new Array(capacity);
    this.#ringHashes = new Int32Array(capacity);
  }

  /** The number of entries. */
  get size(): number {
    return this.#size;
  }

  /** The value for `key`, if remembered. */
  get(key: K, hash: number = hashId(key)): V | undefined {
    const slot = this.#slotOf(key, hash);
    return slot < 0 ? undefined : this.#ringValues[slot];
  }

  /** Whether `key` is remembered. */
  has(key: K, hash: number = hashId(key)): boolean {
    return this.#slotOf(key, hash) >= 0;
  }

  /** Forget `key`. */
  delete(key: K, hash: number = hashId(key)): boolean {
    const slot = this.#slotOf(key, hash);
    if (slot < 0) return false;
    this.#forget(slot);
    return true;
  }

  /** Remember `key`; it becomes the newest entry. */
  set(key: K, value: V, hash: number = hashId(key)): void {
    if (this.capacity === 0) return;
    const slot = this.#next;
    if (this.#ring[slot] !== undefined) this.#forget(slot); // the oldest goes
    const previous = this.#slotOf(key, hash);
    if (previous >= 0) this.#forget(previous); // a key set again lives at its newer slot
    this.#ring[slot] = key;
    this.#ringValues[slot] = value;
    this.#ringHashes[slot] = hash;
    this.#size += 1;
    this.#next = slot + 1 === this.capacity ? 0 : slot + 1;
    if (this.#map) {
      this.#map.set(key, slot);
      return;
    }
    if (this.#size * 2 > this.#mask + 1) {
      this.#rebuild(2 * (this.#mask + 1)); // places this entry too
      return;
    }
    this.#place(hash, slot);
  }

  /** The entries, oldest first. */
  *[Symbol.iterator](): IterableIterator<[K, V]> {
    for (let i = 0; i < this.capacity; i++) {
      const slot = (this.#next + i) % this.capacity;
      const key = this.#ring[slot];
      if (key !== undefined) yield [key, this.#ringValues[slot]!];
    }
  }

  /** `key`'s ring slot, or -1. */
  #slotOf(key: K, hash: number): number {
    if (this.#map) return this.#map.get(key) ?? -1;
    if (this.capacity === 0) return -1;
    const index = this.#index;
    const mask = this.#mask;
    let at = hash & mask;
    for (let probes = 0;; probes++) {
      const slot = index[2 * at + 1] - 1;
      if (slot < 0) return -1;
      if (index[2 * at] === hash && this.#ring[slot] === key) return slot;
      if (probes === MAX_PROBE) return this.#flood().get(key) ?? -1;
      at = (at + 1) & mask;
    }
  }

  /** Empty ring slot `slot` (which holds an entry) and drop its pair from the index. */
  #forget(slot: number): void {
    const key = this.#ring[slot]!;
    this.#ring[slot] = undefined;
    this.#ringValues[slot] = undefined;
    this.#size -= 1;
    if (this.#map) {
      this.#map.delete(key);
      return;
    }
    const index = this.#index;
    const mask = this.#mask;
    let at = this.#ringHashes[slot] & mask;
    for (let probes = 0; index[2 * at + 1] !== slot + 1; probes++) {
      // Every remembered slot has its pair: a bug must not turn into an endless loop.
      if (probes > mask) throw new Error(`RecentMap: ring slot ${slot} has no index entry`);
      at = (at + 1) & mask;
    }
    // Shift back every later pair of the cluster that may sit at or before the freed one.
    for (let next = (at + 1) & mask; index[2 * next + 1] !== 0; next = (next + 1) & mask) {
      const home = index[2 * next] & mask;
      if (((next - home) & mask) >= ((next - at) & mask)) {
        index[2 * at] = index[2 * next];
        index[2 * at + 1] = index[2 * next + 1];
        at = next;
      }
    }
    index[2 * at] = 0;
    index[2 * at + 1] = 0;
  }

  /** Put ring slot `slot`'s pair in the index (which has a free pair). */
  #place(hash: number, slot: number): void {
    const index = this.#index;
    const mask = this.#mask;
    let at = hash & mask;
    while (index[2 * at + 1] !== 0) at = (at + 1) & mask;
    index[2 * at] = hash;
    index[2 * at + 1] = slot + 1;
  }

  /** A new index of `pairs` pairs (a power of two) with every remembered slot in it. */
  #rebuild(pairs: number): void {
    this.#index = new Int32Array(2 * pairs);
    this.#mask = pairs - 1;
    for (let slot = 0; slot < this.capacity; slot++) {
      if (this.#ring[slot] !== undefined) this.#place(this.#ringHashes[slot], slot);
    }
  }

  /** Give up on the index's hashing: map every remembered key to its ring slot natively. */
  #flood(): Map<K, number> {
    const map = new Map<K, number>();
    for (let slot = 0; slot < this.capacity; slot++) {
      const key = this.#ring[slot];
      if (key !== undefined) map.set(key, slot);
    }
    this.#map = map;
    this.#index = new Int32Array(0);
    return map;
  }
}
