/**
 * `IdTable`, `hasRepeats` and `RecentMap` against a native `Map` reference: seeded random
 * operations (growth, shrinking, deletion inside clusters, clearing), with the tables' own hash
 * and with crafted hashes that all collide, which must move a table onto a native map and keep
 * every answer right.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { hashId, hashIds, hasRepeats, IdTable, MAX_PROBE, murmur3 } from "../src/core/id_table.ts";
import { RecentMap } from "../src/core/recent_map.ts";
import { prng } from "./support/waiting.ts";

/** Run `steps` random operations on a table and a reference map, comparing every answer. */
function compare(seed: number, steps: number, keySpace: number, hashOf: (key: string) => number) {
  const random = prng(seed);
  const table = new IdTable<number>();
  const reference = new Map<string, number>();
  for (let step = 0; step < steps; step++) {
    const key = `k${Math.floor(random() * keySpace)}`;
    const hash = hashOf(key);
    const roll = random();
    if (roll < 0.45) {
      table.set(key, step, hash);
      reference.set(key, step);
    } else if (roll < 0.75) {
      assert.equal(table.delete(key, hash), reference.delete(key), `delete ${key} at ${step}`);
    } else if (roll < 0.9995) {
      assert.equal(table.get(key, hash), reference.get(key), `get ${key} at ${step}`);
      assert.equal(table.has(key, hash), reference.has(key), `has ${key} at ${step}`);
    } else {
      table.clear();
      reference.clear();
    }
    assert.equal(table.size, reference.size, `size at ${step}`);
  }
  assert.deepEqual(new Map(table), reference);
  return table;
}

test("IdTable answers as a Map does under random sets, deletes and clears", () => {
  for (const seed of [1, 2, 3]) compare(seed, 40_000, 3_000, hashId);
});

test("IdTable grows to many entries and shrinks back as they go", () => {
  const table = new IdTable<number>();
  const keys = Array.from({ length: 50_000 }, (_, i) => `job-${i}`);
  keys.forEach((key, i) => table.set(key, i));
  assert.equal(table.size, keys.length);
  keys.forEach((key, i) => assert.equal(table.get(key), i));
  for (const key of keys.slice(0, 49_990)) assert.ok(table.delete(key));
  assert.equal(table.size, 10);
  for (const key of keys.slice(49_990)) assert.ok(table.has(key));
  assert.equal(table.get("job-0"), undefined);
});

test("colliding keys move an IdTable onto a native map, and every answer stays right", () => {
  // Every key with the same hash: the probe passes MAX_PROBE once that many keys are in.
  const table = compare(7, 20_000, MAX_PROBE * 4, () => 12345);
  table.set("late", 1, 12345);
  assert.equal(table.get("late", 12345), 1);
  // Few colliding keys stay on the table's own hashing and answer right too.
  compare(8, 5_000, MAX_PROBE / 2, () => -1);
});

test("an IdTable's copy has the same entries, made room for or spilled, and is its own", () => {
  for (const hashOf of [hashId, () => 12345]) {
    const table = new IdTable<number>(1_000); // room for 1,000 before it grows
    const reference = new Map<string, number>();
    for (let i = 0; i < 600; i++) {
      table.set(`k${i}`, i, hashOf(`k${i}`));
      reference.set(`k${i}`, i);
    }
    const copy = table.copy();
    assert.deepEqual(new Map(copy), reference);
    copy.set("new", -1, hashOf("new"));
    copy.delete("k0", hashOf("k0"));
    table.set("k1", 100, hashOf("k1"));
    assert.deepEqual([table.get("new", hashOf("new")), table.get("k0", hashOf("k0"))], [
      undefined,
      0,
    ]);
    assert.deepEqual([copy.get("new", hashOf("new")), copy.has("k0", hashOf("k0"))], [-1, false]);
    assert.equal(copy.get("k1", hashOf("k1")), 1);
    assert.deepEqual([table.size, copy.size], [600, 600]);
  }
});

test("hasRepeats finds a repeated key, also among colliding hashes", () => {
  const random = prng(11);
  for (let round = 0; round < 200; round++) {
    const keys = Array.from({ length: 1 + Math.floor(random() * 300) }, () => crypto.randomUUID());
    const repeat = random() < 0.5;
    if (repeat && keys.length > 1) keys[Math.floor(random() * keys.length)] = keys[0];
    const expected = new Set(keys).size !== keys.length;
    assert.equal(hasRepeats(keys, Int32Array.from(keys, hashId)), expected);
    assert.equal(hasRepeats(keys, new Int32Array(keys.length)), expected); // all collide
  }
});

/** Random sets, gets and deletes on a RecentMap of `capacity`, checked against a model. */
function compareRecent(seed: number, capacity: number, hashOf: (key: string) => number) {
  const random = prng(seed);
  const recent = new RecentMap<string, number>(capacity);
  const lastSets: string[] = []; // the last `capacity` sets, oldest first
  const latest = new Map<string, number>(); // each key's value, until it is deleted
  for (let step = 0; step < 20_000; step++) {
    const key = `m${Math.floor(random() * 400)}`;
    if (random() < 0.1) {
      assert.equal(recent.delete(key, hashOf(key)), lastSets.includes(key) && latest.has(key));
      latest.delete(key);
      continue;
    }
    recent.set(key, step, hashOf(key));
    lastSets.push(key);
    if (lastSets.length > capacity) lastSets.shift();
    latest.set(key, step);
    // Remembered: a key set among the last `capacity` sets and not deleted since.
    for (const probe of [key, `m${Math.floor(random() * 400)}`]) {
      const expected = lastSets.includes(probe) ? latest.get(probe) : undefined;
      assert.equal(recent.get(probe, hashOf(probe)), expected, `${probe} at ${step}`);
      assert.equal(recent.has(probe, hashOf(probe)), expected !== undefined);
    }
  }
  const remembered = lastSets.filter((key, i) =>
    latest.has(key) && lastSets.indexOf(key, i + 1) < 0
  );
  assert.equal(recent.size, remembered.length);
  assert.deepEqual([...recent].map(([key]) => key), remembered, "oldest first");
}

test("hashIds hashes as hashId does, and says whether JSON takes every key as it is", () => {
  const random = prng(7);
  const keys = Array.from({ length: 500 }, (_, i) => i % 2 ? crypto.randomUUID() : `k${random()}`);
  const hashes = new Int32Array(keys.length);
  assert.equal(hashIds(keys, hashes), true);
  keys.forEach((key, i) => assert.equal(hashes[i], hashId(key), key));
  // Every UTF-16 unit: a key called plain must be written by JSON.stringify unchanged; every
  // other unit that JSON.stringify keeps is plain too, except surrogates (checked, to be safe).
  for (let unit = 0; unit <= 0xffff; unit++) {
    const key = `a${String.fromCharCode(unit)}b`;
    const plain = hashIds(["plain", key], new Int32Array(2));
    const unchanged = JSON.stringify(key) === `"${key}"`;
    const surrogate = unit >= 0xd800 && unit <= 0xdfff;
    assert.equal(plain, unchanged && !surrogate, `unit ${unit.toString(16)}`);
  }
  assert.equal(hashIds([], new Int32Array(0)), true);
});

test("hashId is MurmurHash3 (x86, 32 bits) of the key's UTF-8 bytes", () => {
  // Published test vectors: every tail length, seeds 0 and others, and a key beyond ASCII.
  const vectors: [string, number, number][] = [
    ["", 0, 0],
    ["", 1, 0x514e28b7],
    ["a", 0x9747b28c, 0x7fa09ea6],
    ["ab", 0x9747b28c, 0x74875592],
    ["abc", 0, 0xb3dd93fa],
    ["aaaa", 0x9747b28c, 0x5a97808a],
    ["hello", 0, 0x248bfa47],
    ["Hello, world!", 1234, 0xfaf6cdb3],
    ["Hello, world!", 0x9747b28c, 0x24884cba],
    ["The quick brown fox jumps over the lazy dog", 0x9747b28c, 0x2fa826cd],
    ["ππππππππ", 0x9747b28c, 0xd58063c1],
  ];
  for (const [key, seed, expected] of vectors) {
    assert.equal(murmur3(key, seed) >>> 0, expected, `${JSON.stringify(key)} seed ${seed}`);
  }
  // A key beyond ASCII hashes as its UTF-8 bytes wherever its first such character stands (the
  // key is read as ASCII until then): in the first block, a later one, or the tail.
  for (const key of ["πabcdefg", "abcdπefg", "abcdefgπ", "abcdefghπ", "a😀", "\ud800lone"]) {
    const expected = referenceMurmur3(new TextEncoder().encode(key), 0x9747b28c);
    assert.equal(murmur3(key, 0x9747b28c) >>> 0, expected, JSON.stringify(key));
  }
  assert.notEqual(hashId("aπ"), hashId("πa"));
});

/** MurmurHash3 (x86, 32 bits) as its reference code writes it, over bytes: the test's oracle. */
function referenceMurmur3(bytes: Uint8Array, seed: number): number {
  const rotl = (x: number, r: number) => (x << r) | (x >>> (32 - r));
  const blocks = bytes.length >> 2;
  let h = seed | 0;
  for (let i = 0; i < blocks; i++) {
    const at = i * 4;
    let k = bytes[at] | (bytes[at + 1] << 8) | (bytes[at + 2] << 16) | (bytes[at + 3] << 24);
    k = Math.imul(rotl(Math.imul(k, 0xcc9e2d51), 15), 0x1b873593);
    h = (Math.imul(rotl(h ^ k, 13), 5) + 0xe6546b64) | 0;
  }
  let k = 0;
  for (let i = bytes.length - 1; i >= blocks * 4; i--) k = (k << 8) | bytes[i];
  if (bytes.length & 3) h ^= Math.imul(rotl(Math.imul(k, 0xcc9e2d51), 15), 0x1b873593);
  h ^= bytes.length;
  h = Math.imul(h ^ (h >>> 16), 0x85ebca6b);
  h = Math.imul(h ^ (h >>> 13), 0xc2b2ae35);
  return (h ^ (h >>> 16)) >>> 0;
}

test("hashIds agrees with hashId for a batch of any keys, encoded together or key by key", () => {
  const random = prng(11);
  const ascii = Array.from({ length: 300 }, (_, i) => "k".repeat(i % 9) + String(random()));
  const mixed = [...ascii.slice(0, 50), "ünïcode", "😀", "\ud800lone", "tab\there", "π"];
  for (const keys of [ascii, mixed, ["", "a", "ab", "abc", "abcd", "abcde"]]) {
    const hashes = new Int32Array(keys.length);
    hashIds(keys, hashes);
    keys.forEach((key, i) => assert.equal(hashes[i], hashId(key), JSON.stringify(key)));
  }
  // Whether every key is plain, with keys beyond ASCII in the batch (read key by key) or not.
  assert.equal(hashIds(["ünïcode", "plain"], new Int32Array(2)), true);
  assert.equal(hashIds(["ünïcode", 'a"quote'], new Int32Array(2)), false);
  assert.equal(hashIds(["ünïcode\\"], new Int32Array(1)), false);
  assert.equal(hashIds(["plain", "back\\slash"], new Int32Array(2)), false);
  // A batch larger than the encoding buffer's limit (2^20 characters) is hashed key by key.
  const large = Array.from({ length: 30_000 }, () => crypto.randomUUID());
  const hashes = new Int32Array(large.length);
  assert.equal(hashIds(large, hashes), true);
  for (let i = 0; i < large.length; i += 997) assert.equal(hashes[i], hashId(large[i]));
});

test("RecentMap keeps the newest entries, also when keys are set again", () => {
  compareRecent(5, 100, hashId);
  compareRecent(6, 1, hashId);
  // More slots than keys: every key is set again, never evicted.
  compareRecent(11, 1000, hashId);
  // Six keys a hash: live keys share hashes, and ring slots are reused by another key of the
  // same hash.
  compareRecent(12, 20, (key) => hashId(key) & 63);
  const empty = new RecentMap<string, number>(0);
  empty.set("a", 1);
  assert.equal(empty.size, 0);
  assert.equal(empty.get("a"), undefined);
});

test("colliding keys move a RecentMap's index onto a native map, and every answer stays right", () => {
  // 300 of 400 keys remembered, all with one hash: a probe passes MAX_PROBE.
  compareRecent(9, 300, () => 12345);
  // Few colliding keys stay on the map's own index.
  compareRecent(10, MAX_PROBE / 2, () => -1);
});
