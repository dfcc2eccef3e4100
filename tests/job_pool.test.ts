/** The controller's pool keeps the size of its payloads through every way a job enters or leaves. */

import { test } from "node:test";
import assert from "node:assert/strict";
import { JobPool } from "../src/controller/job_pool.ts";
import type { Job } from "../src/controller/binding.ts";

const job = (messageId: string, payload: string): Job =>
  ({ messageId, hash: 0, storeSeq: 1, payload }) as Job;

test("the pool counts its payloads' characters as jobs enter, leave, requeue and are removed", () => {
  const pool = new JobPool();
  const [a, b, c] = [job("a", "1"), job("b", '"two"'), job("c", "[1,2,3]")];
  pool.pushBack(a);
  pool.pushBack(b);
  pool.pushFront(c); // requeued: dispatched first
  assert.deepEqual([pool.length, pool.chars], [3, 13]);
  assert.equal(pool.shift(), c);
  assert.deepEqual([pool.length, pool.chars], [2, 6]);
  assert.equal(pool.remove(c), false, "not in the pool any more");
  assert.equal(pool.remove(b), true);
  assert.deepEqual([pool.length, pool.chars], [1, 1]);
  pool.clear();
  assert.deepEqual([pool.length, pool.chars, pool.shift()], [0, 0, undefined]);
});
