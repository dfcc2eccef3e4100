/**
 * `RunHeap` against a sorted reference: seeded random pushes and pops, with items that arrive in
 * order (the run), out of order (the heap) and mixed, and ties broken as the comparison says.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { RunHeap } from "../src/core/run_heap.ts";
import { prng } from "./support/waiting.ts";

interface Item {
  readonly key: number;
  readonly order: number;
}

const compare = (a: Item, b: Item) => a.key - b.key || a.order - b.order;

/** `steps` random operations; `inOrder` is the chance that a pushed key continues the run. */
function check(seed: number, steps: number, inOrder: number): void {
  const random = prng(seed);
  const queue = new RunHeap<Item>(compare);
  const reference: Item[] = [];
  let order = 0;
  let last = 0;
  for (let step = 0; step < steps; step++) {
    if (random() < 0.55) {
      const key = random() < inOrder ? last + Math.floor(random() * 3) : Math.floor(random() * 50);
      last = Math.max(last, key);
      const item = { key, order: order++ };
      queue.push(item);
      reference.push(item);
      reference.sort(compare);
    } else {
      assert.equal(queue.peek(), reference[0], `seed ${seed}, step ${step}: peek`);
      assert.equal(queue.pop(), reference.shift(), `seed ${seed}, step ${step}: pop`);
    }
    assert.equal(queue.size, reference.length);
  }
  const visited: Item[] = [];
  queue.forEach((item) => visited.push(item));
  assert.deepEqual(visited.sort(compare), reference, `seed ${seed}: forEach visits every item`);
  while (reference.length > 0) assert.equal(queue.pop(), reference.shift());
  assert.equal(queue.pop(), undefined);
  assert.equal(queue.peek(), undefined);
}

test("RunHeap pops what a sorted list would, for items in order, out of order and mixed", () => {
  for (let seed = 1; seed <= 30; seed++) {
    check(seed, 600, 1);
    check(seed, 600, 0);
    check(seed, 600, 0.8);
  }
});

test("RunHeap keeps equal keys in the order the comparison gives, and clears", () => {
  const queue = new RunHeap<Item>(compare);
  for (const [key, order] of [[1, 2], [1, 0], [0, 5], [1, 1], [2, 3], [0, 4]]) {
    queue.push({ key, order });
  }
  const popped: string[] = [];
  for (let item = queue.pop(); item; item = queue.pop()) popped.push(`${item.key}:${item.order}`);
  assert.deepEqual(popped, ["0:4", "0:5", "1:0", "1:1", "1:2", "2:3"]);
  queue.push({ key: 3, order: 0 });
  queue.push({ key: 1, order: 1 });
  queue.clear();
  assert.equal(queue.size, 0);
  assert.equal(queue.pop(), undefined);
});
