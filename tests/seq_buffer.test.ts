/**
 * `SeqBuffer`, the worker endpoint's jobs by sequence number, against a native `Map` reference:
 * seeded random operations as an endpoint makes them (sequences within a window that slides on,
 * out of order, repeated, deleted, cleared), every answer compared; and what happens when two
 * sequences share a slot (the lower one keeps it).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { SeqBuffer } from "../src/worker/seq_buffer.ts";
import { prng } from "./support/waiting.ts";

test("answers as a Map would for sequences within its window", () => {
  for (const [seed, window] of [[1, 1], [2, 7], [3, 100], [4, 64]]) {
    const random = prng(seed);
    const buffer = new SeqBuffer<string>(window);
    const reference = new Map<number, string>();
    let expected = 1 + Math.floor(random() * 1e9); // sequences need not start small
    for (let step = 0; step < 20_000; step++) {
      const seq = expected + Math.floor(random() * window);
      const roll = random();
      if (roll < 0.5) {
        assert.equal(buffer.set(seq, `j${seq}@${step}`), true);
        reference.set(seq, `j${seq}@${step}`);
      } else if (roll < 0.8) {
        assert.equal(buffer.delete(seq), reference.delete(seq), `delete ${seq}`);
      } else if (roll < 0.98) {
        // The window slides on: the expected job is taken out.
        assert.equal(buffer.get(expected), reference.get(expected));
        buffer.delete(expected);
        reference.delete(expected);
        expected += 1;
      } else {
        buffer.clear();
        reference.clear();
      }
      assert.equal(buffer.size, reference.size, `size after step ${step}`);
      const probe = expected + Math.floor(random() * window);
      assert.equal(buffer.has(probe), reference.has(probe));
      assert.equal(buffer.get(probe), reference.get(probe));
    }
  }
});

test("two sequences of one slot: the lower keeps it, a higher one gives way", () => {
  const buffer = new SeqBuffer<string>(4);
  assert.equal(buffer.set(5, "a"), true);
  assert.equal(buffer.set(9, "b"), false, "9 shares 5's slot and is higher: refused");
  assert.equal(buffer.get(5), "a");
  assert.equal(buffer.has(9), false);
  assert.equal(buffer.size, 1);

  assert.equal(buffer.set(13, "c"), false);
  assert.equal(buffer.set(1, "d"), true, "1 is lower than 5: 5 is dropped for it");
  assert.equal(buffer.has(5), false);
  assert.equal(buffer.get(1), "d");
  assert.equal(buffer.size, 1);
  assert.equal(buffer.delete(5), false, "5 is no longer held");

  assert.equal(buffer.set(1, "e"), true, "the same sequence again replaces its job");
  assert.equal(buffer.get(1), "e");
  assert.equal(buffer.size, 1);
  assert.equal(buffer.delete(1), true);
  assert.equal(buffer.size, 0);
  assert.equal(buffer.get(1), undefined);
});
