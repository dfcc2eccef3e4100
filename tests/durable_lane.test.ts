/**
 * The durable lane's units: how a handshake's Store or Accept and the queued confirmations share
 * one backend transaction (pure: the lane is built over a queue with small batch limits and never
 * executed).
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { DurableLane } from "../src/controller/durable_lane.ts";
import { MemoryWorkQueue } from "../mod.ts";
import { SimulatedClock } from "../testing.ts";

/** A lane whose units hold at most `maxOperations` operations. */
function lane(maxOperations: number): DurableLane {
  const queue = Object.assign(new MemoryWorkQueue(), {
    batchLimits: { maxOperations, maxBytes: 1 << 20 },
  });
  return new DurableLane(queue, { attempts: 1, backoff: 1, timeout: 1000 }, new SimulatedClock());
}

const jobs = (count: number, from = 0) =>
  Array.from({ length: count }, (_, i) => ({ messageId: `j${from + i}`, payload: "1" }));
const ids = (count: number, prefix: string) =>
  Array.from({ length: count }, (_, i) => `${prefix}${i}`);

describe("durable lane units", () => {
  test("without confirmations a Store fills the unit", () => {
    const l = lane(10);
    l.store(jobs(25), 0);
    const unit = l.next()!;
    assert.equal(unit.store?.jobs.length, 10);
    assert.deepEqual(unit.confirm, []);
  });

  test("waiting confirmations keep half of the unit from a large Store", () => {
    const l = lane(10);
    l.confirm(ids(30, "c"));
    l.store(jobs(25), 0);
    const unit = l.next()!;
    assert.equal(unit.store?.jobs.length, 5);
    assert.deepEqual(unit.confirm, ids(5, "c"));
  });

  test("a few waiting confirmations keep only their share, and an Accept gets the rest", () => {
    const l = lane(10);
    l.confirm(["c0", "c1"]);
    l.accept(ids(25, "a"));
    const unit = l.next()!;
    assert.deepEqual(unit.accept, ids(8, "a"));
    assert.deepEqual(unit.confirm, ["c0", "c1"]);
  });

  test("a unit of one operation still moves the handshake", () => {
    const l = lane(1);
    l.confirm(["c0"]);
    l.store(jobs(3), 0);
    const unit = l.next()!;
    assert.equal(unit.store?.jobs.length, 1);
    assert.deepEqual(unit.confirm, []);
  });
});
