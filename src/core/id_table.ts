/**
 * A hash table keyed by strings (MessageIDs), for the tables every job passes through.
 *
 * Why not a `Map`: an engine hashes a string the first time it is used as a key, and that first
 * hash is dear — about 0.5 µs in the V8 of Deno 2.9 whatever the length (a call out of the
 * generated code), about as much in JavaScriptCore — while every job brings a fresh MessageID
 * that the controller looks up in several tables. Here the hash is computed in JavaScript, and
 * a caller that uses one key in several tables computes it once ({@linkcode hashId}) and passes
 * it along.
 *
 * Open addressing with linear probing at a load of at most 1/2; deletion shifts the rest of the
 * cluster back (no tombstones), and a large table shrinks when it is mostly empty.
 *
 * Keys can come from the network (a producer names its MessageIDs), so the hash is seeded per
 * process, and a table whose probe ever runs longer than {@linkcode MAX_PROBE} slots — random
 * keys practically never do — moves its entries into a native `Map` for good: crafted keys cost
 * an attacker the fast path, never the controller's time.
 *
 * @module
 */

/** The longest probe before a table gives up on its own hashing (see the module text). */
export const MAX_PROBE = 128;
const MIN_CAPACITY = 16;
// A table that fills and empties with every batch (the jobs at the workers) must not reallocate
// every time: only a table grown past this many slots gives memory back.
const SHRINK_ABOVE = 4096;
const FLOODED = -0x7fffffff;

// A per-process seed: collisions cannot be prepared offline.
const SEED = (crypto.getRandomValues(new Uint32Array(1))[0] | 0) || 0x2545f491;

// MurmurHash3's multipliers.
const C1 = 0xcc9e2d51 | 0;
const C2 = 0x1b873593;

// What the latest murmur3Ascii or murmur3Bytes saw: a character JSON escapes, or (murmur3Ascii)
// one beyond ASCII, when the hash it returned is not the key's.
const ESCAPES = 1;
const NOT_ASCII = 2;
let seen = 0;

// The characters of the jobs frame's NEEDS_ESCAPE (protocol/codec.ts) that ASCII has: change both
// together. (The other ones, surrogates, are not ASCII.) Indexed by a character or a UTF-8 byte.
const ESCAPE = new Uint8Array(256);
for (let c = 0; c < 0x20; c++) ESCAPE[c] = ESCAPES;
ESCAPE[0x22] = ESCAPES;
ESCAPE[0x5c] = ESCAPES;

// The UTF-8 bytes of a key (or of a batch's keys one after another) go here; it grows to the
// largest batch, up to SCRATCH_LIMIT characters (a larger batch is hashed key by key).
let scratch = new Uint8Array(4096);
let scratchLength = 0;
const SCRATCH_LIMIT = 1 << 20;
const encoder = new TextEncoder();
// Whether hashIds encodes a batch's keys before hashing, measured per engine: Deno's V8 reads a
// string's characters at about 2.5 ns each, more than the hashing, and a byte array much faster (a
// batch of UUIDs: 54 ns a key against 97 by characters). Node 22's V8 joins the batch's keys
// slowly (74 ns a key against 15 on Deno, with a scavenge every few hundred batches), which cost
// its controller more than the characters did; JavaScriptCore (Bun) reads characters as fast as
// bytes (36 ns a key against 50 encoded). Both read characters.
const ENCODE_BATCHES = globalThis.navigator?.userAgent?.startsWith("Deno/") === true;

/**
 * The hash of `key` that {@linkcode IdTable} uses: compute it once for a key used in several
 * tables. It is MurmurHash3 (x86, 32 bits) of the key's UTF-8 bytes with the process's seed: four
 * bytes a step, where reading the key's characters one by one costs more than the hashing.
 *
 * @example
 * ```ts
 * import { hashId } from "./id_table.ts";
 * console.assert(hashId("job-1") === hashId("job-1"));
 * ```
 */
export function hashId(key: string): number {
  return murmur3(key, SEED);
}

/**
 * MurmurHash3 (x86, 32 bits) of `key`'s UTF-8 bytes (a lone surrogate as U+FFFD, as
 * `TextEncoder` writes it) with `seed`. An ASCII key is read as it is; any other is encoded first.
 *
 * @example
 * ```ts
 * import { murmur3 } from "./id_table.ts";
 * console.assert(murmur3("hello", 0) >>> 0 === 0x248bfa47);
 * ```
 */
export function murmur3(key: string, seed: number): number {
  const h = murmur3Ascii(key, seed);
  return seen & NOT_ASCII ? murmur3Bytes(utf8(key), 0, scratchLength, seed) : h;
}

/** MurmurHash3 of an ASCII `key` read by characters; sets `seen`. */
function murmur3Ascii(key: string, seed: number): number {
  const n = key.length;
  let flags = 0;
  let h = seed;
  let i = 0;
  for (; i + 3 < n; i += 4) {
    const a = key.charCodeAt(i);
    const b = key.charCodeAt(i + 1);
    const c = key.charCodeAt(i + 2);
    const d = key.charCodeAt(i + 3);
    if ((a | b | c | d) > 0x7f) {
      seen = NOT_ASCII;
      return 0;
    }
    flags |= ESCAPE[a] | ESCAPE[b] | ESCAPE[c] | ESCAPE[d];
    h = mixBlock(h, a | (b << 8) | (c << 16) | (d << 24));
  }
  let tail = 0;
  for (let shift = 0; i < n; i++, shift += 8) {
    const a = key.charCodeAt(i);
    if (a > 0x7f) {
      seen = NOT_ASCII;
      return 0;
    }
    flags |= ESCAPE[a];
    tail |= a << shift;
  }
  seen = flags;
  return finish(h, tail, n);
}

/**
 * MurmurHash3 (x86, 32 bits) of `bytes[start, end)` with `seed`; sets `seen` to whether an ASCII
 * byte there needs escaping in JSON.
 */
function murmur3Bytes(bytes: Uint8Array, start: number, end: number, seed: number): number {
  let flags = 0;
  let h = seed;
  let p = start;
  for (; p + 3 < end; p += 4) {
    const a = bytes[p];
    const b = bytes[p + 1];
    const c = bytes[p + 2];
    const d = bytes[p + 3];
    flags |= ESCAPE[a] | ESCAPE[b] | ESCAPE[c] | ESCAPE[d];
    h = mixBlock(h, a | (b << 8) | (c << 16) | (d << 24));
  }
  let tail = 0;
  for (let shift = 0; p < end; p++, shift += 8) {
    flags |= ESCAPE[bytes[p]];
    tail |= bytes[p] << shift;
  }
  seen = flags;
  return finish(h, tail, end - start);
}

/** Murmur's step: mix the block of four bytes `k` into `h`. */
function mixBlock(h: number, k: number): number {
  k = Math.imul(k, C1);
  k = Math.imul((k << 15) | (k >>> 17), C2);
  h ^= k;
  return (Math.imul((h << 13) | (h >>> 19), 5) + 0xe6546b64) | 0;
}

/** Murmur's last (partial) block, the length, and the final mix. */
function finish(h: number, tail: number, length: number): number {
  if (length & 3) {
    const k = Math.imul(tail, C1);
    h ^= Math.imul((k << 15) | (k >>> 17), C2);
  }
  return mixDown(h ^ length);
}

/** `text`'s UTF-8 bytes in `scratch[0, scratchLength)`. */
function utf8(text: string): Uint8Array {
  if (scratch.length < text.length * 3) scratch = new Uint8Array(text.length * 3);
  scratchLength = encoder.encodeInto(text, scratch).written;
  return scratch;
}

/**
 * {@linkcode hashId} of every key of `keys`, written to `hashes` by position; whether every key
 * can go into a JSON string as it is (no quotation mark, backslash, control character or
 * surrogate), which spares the jobs frame a regular expression a job. Both in one pass: on Deno
 * over the bytes of the batch's keys encoded together (one `TextEncoder` call; see
 * `ENCODE_BATCHES`), elsewhere over their characters.
 *
 * @example
 * ```ts
 * import { hashId, hashIds } from "./id_table.ts";
 * const hashes = new Int32Array(2);
 * console.assert(hashIds(["job-1", "job-2"], hashes) && hashes[1] === hashId("job-2"));
 * console.assert(!hashIds(['say "hi"'], new Int32Array(1)));
 * ```
 */
export function hashIds(keys: readonly string[], hashes: Int32Array): boolean {
  if (!ENCODE_BATCHES) return hashEach(keys, hashes);
  const joined = keys.join("");
  const n = joined.length;
  if (n > SCRATCH_LIMIT) return hashEach(keys, hashes);
  if (scratch.length < n) scratch = new Uint8Array(n);
  const { read, written } = encoder.encodeInto(joined, scratch);
  // Not ASCII throughout: the bytes are not the characters (and may not have fit).
  if (read !== n || written !== n) return hashEach(keys, hashes);
  let escapes = 0;
  for (let k = 0, p = 0; k < keys.length; k++) {
    const end = p + keys[k].length;
    hashes[k] = murmur3Bytes(scratch, p, end, SEED);
    escapes |= seen;
    p = end;
  }
  return escapes === 0;
}

/** {@linkcode hashIds} key by key, reading characters. */
function hashEach(keys: readonly string[], hashes: Int32Array): boolean {
  let escapes = 0;
  for (let k = 0; k < keys.length; k++) {
    const key = keys[k];
    hashes[k] = murmur3Ascii(key, SEED);
    if (seen & NOT_ASCII) {
      hashes[k] = murmur3Bytes(utf8(key), 0, scratchLength, SEED);
      for (let i = 0; i < key.length; i++) {
        const c = key.charCodeAt(i);
        // NEEDS_ESCAPE's characters (protocol/codec.ts) beyond ASCII: the surrogates.
        if (c < 0x80 ? ESCAPE[c] : (c & 0xf800) === 0xd800) escapes = ESCAPES;
      }
    } else escapes |= seen;
  }
  return escapes === 0;
}

/** Mix the high bits down: the tables index with the low ones (Murmur's final mix). */
function mixDown(h: number): number {
  h ^= h >>> 16;
  h = Math.imul(h, 0x85ebca6b);
  h ^= h >>> 13;
  h = Math.imul(h, 0xc2b2ae35);
  return h ^ (h >>> 16);
}

/**
 * A string-keyed hash table; every method takes the key's {@linkcode hashId} as an optional
 * last argument.
 *
 * @example
 * ```ts
 * import { hashId, IdTable } from "./id_table.ts";
 * const owned = new IdTable<number>();
 * const id = crypto.randomUUID();
 * const hash = hashId(id);
 * owned.set(id, 7, hash);
 * console.assert(owned.get(id, hash) === 7 && owned.size === 1);
 * console.assert(owned.delete(id) && !owned.has(id, hash));
 * ```
 */
export class IdTable<V> {
  #keys: (string | undefined)[] = [];
  #values: (V | undefined)[] = [];
  #hashes = new Int32Array(0);
  #mask = 0;
  #size = 0;
  /** Set once a probe ran too long: from then on the table is this map. */
  #map: Map<string, V> | undefined;

  /** An empty table, with room for `entries` before it grows. */
  constructor(entries = 0) {
    let capacity = MIN_CAPACITY;
    while (capacity < entries * 2) capacity *= 2;
    this.#allocate(capacity);
  }

  /** The number of entries. */
  get size(): number {
    return this.#map ? this.#map.size : this.#size;
  }

  /** The value for `key`, if any. */
  get(key: string, hash: number = hashId(key)): V | undefined {
    if (this.#map) return this.#map.get(key);
    const slot = this.#find(key, hash);
    if (slot >= 0) return this.#values[slot];
    if (slot === FLOODED) return this.#spill().get(key);
    return undefined;
  }

  /** Whether `key` has an entry. */
  has(key: string, hash: number = hashId(key)): boolean {
    if (this.#map) return this.#map.has(key);
    const slot = this.#find(key, hash);
    if (slot === FLOODED) return this.#spill().has(key);
    return slot >= 0;
  }

  /** Set the value for `key`. */
  set(key: string, value: V, hash: number = hashId(key)): this {
    if (this.#map) {
      this.#map.set(key, value);
      return this;
    }
    let slot = this.#find(key, hash);
    if (slot >= 0) {
      this.#values[slot] = value;
      return this;
    }
    if (slot === FLOODED) {
      this.#spill().set(key, value);
      return this;
    }
    if ((this.#size + 1) * 2 > this.#keys.length) {
      this.#rehash(this.#keys.length * 2);
      slot = this.#map ? FLOODED : this.#find(key, hash);
      if (slot === FLOODED) {
        (this.#map ?? this.#spill()).set(key, value);
        return this;
      }
    }
    slot = ~slot;
    this.#keys[slot] = key;
    this.#values[slot] = value;
    this.#hashes[slot] = hash;
    this.#size += 1;
    return this;
  }

  /** Remove `key`'s entry; whether there was one. */
  delete(key: string, hash: number = hashId(key)): boolean {
    if (this.#map) return this.#map.delete(key);
    let slot = this.#find(key, hash);
    if (slot === FLOODED) return this.#spill().delete(key);
    if (slot < 0) return false;
    // Shift back every later entry of the cluster that may sit at or before the freed slot.
    const keys = this.#keys;
    const values = this.#values;
    const hashes = this.#hashes;
    const mask = this.#mask;
    for (let next = (slot + 1) & mask; keys[next] !== undefined; next = (next + 1) & mask) {
      const home = hashes[next] & mask;
      if (((next - home) & mask) >= ((next - slot) & mask)) {
        keys[slot] = keys[next];
        values[slot] = values[next];
        hashes[slot] = hashes[next];
        slot = next;
      }
    }
    keys[slot] = undefined;
    values[slot] = undefined;
    this.#size -= 1;
    if (this.#size * 8 < keys.length && keys.length > SHRINK_ABOVE) {
      this.#rehash(keys.length / 2);
    }
    return true;
  }

  /** A table with the same entries (their hashes are copied, not computed again). */
  copy(): IdTable<V> {
    const copy = new IdTable<V>();
    if (this.#map) copy.#map = new Map(this.#map);
    copy.#keys = this.#keys.slice();
    copy.#values = this.#values.slice();
    copy.#hashes = this.#hashes.slice();
    copy.#mask = this.#mask;
    copy.#size = this.#size;
    return copy;
  }

  /** Remove every entry. */
  clear(): void {
    if (this.#map) this.#map.clear();
    else this.#allocate(MIN_CAPACITY);
  }

  /** The entries, in no particular order. */
  *[Symbol.iterator](): IterableIterator<[string, V]> {
    if (this.#map) {
      yield* this.#map;
      return;
    }
    const keys = this.#keys.slice();
    const values = this.#values.slice();
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      if (key !== undefined) yield [key, values[i] as V];
    }
  }

  /** `key`'s slot (≥ 0), the complement of the free slot where it would go, or FLOODED. */
  #find(key: string, hash: number): number {
    const keys = this.#keys;
    const hashes = this.#hashes;
    const mask = this.#mask;
    let slot = hash & mask;
    for (let probes = 0;; probes++) {
      const found = keys[slot];
      if (found === undefined) return ~slot;
      if (hashes[slot] === hash && found === key) return slot;
      if (probes === MAX_PROBE) return FLOODED;
      slot = (slot + 1) & mask;
    }
  }

  #allocate(capacity: number): void {
    this.#keys = new Array(capacity).fill(undefined);
    this.#values = new Array(capacity).fill(undefined);
    this.#hashes = new Int32Array(capacity);
    this.#mask = capacity - 1;
    this.#size = 0;
  }

  #rehash(capacity: number): void {
    const keys = this.#keys;
    const values = this.#values;
    const hashes = this.#hashes;
    this.#allocate(Math.max(MIN_CAPACITY, capacity));
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      if (key === undefined) continue;
      const slot = this.#find(key, hashes[i]);
      if (slot === FLOODED) {
        // Rehashing cannot break up colliding keys: keep them all in a native map.
        this.#keys = keys;
        this.#values = values;
        this.#spill();
        return;
      }
      this.#keys[~slot] = key;
      this.#values[~slot] = values[i];
      this.#hashes[~slot] = hashes[i];
      this.#size += 1;
    }
  }

  /** Give up on this table's hashing: move every entry into a native map. */
  #spill(): Map<string, V> {
    const map = new Map<string, V>();
    const keys = this.#keys;
    for (let i = 0; i < keys.length; i++) {
      const key = keys[i];
      if (key !== undefined) map.set(key, this.#values[i] as V);
    }
    this.#map = map;
    this.#allocate(0);
    return map;
  }
}

/**
 * Whether `keys` holds a key twice; `hashes[i]` is `hashId(keys[i])`. One pass over a table of
 * positions made for the call (no strings are hashed again).
 *
 * @example
 * ```ts
 * import { hashId, hasRepeats } from "./id_table.ts";
 * const keys = ["a", "b", "a"];
 * console.assert(hasRepeats(keys, Int32Array.from(keys, hashId)));
 * console.assert(!hasRepeats(["a", "b"], Int32Array.from(["a", "b"], hashId)));
 * ```
 */
export function hasRepeats(keys: readonly string[], hashes: Int32Array): boolean {
  let capacity = MIN_CAPACITY;
  while (capacity < keys.length * 2) capacity *= 2;
  const mask = capacity - 1;
  const positions = new Int32Array(capacity); // position + 1; 0 is free
  for (let i = 0; i < keys.length; i++) {
    const hash = hashes[i];
    let slot = hash & mask;
    for (let probes = 0;; probes++) {
      const at = positions[slot];
      if (at === 0) {
        positions[slot] = i + 1;
        break;
      }
      if (hashes[at - 1] === hash && keys[at - 1] === keys[i]) return true;
      if (probes === MAX_PROBE) return new Set(keys).size !== keys.length; // crafted keys
      slot = (slot + 1) & mask;
    }
  }
  return false;
}
