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

/** A lane whose units hold at most `maxOperations` operations and `maxBytes` bytes. */
function lane(maxOperations: number, maxBytes = 1 << 20): DurableLane {
  const queue = Object.assign(new MemoryWorkQueue(), {
    batchLimits: { maxOperations, maxBytes },
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

  test("a unit holds what fits its bytes exactly, counted as UTF-8", () => {
    const utf8 = (text: string) => new TextEncoder().encode(text).length;
    // MessageIDs of 1 to 4 bytes a character, and payloads with them: a unit stops at the first
    // job that does not fit, as an exact count of every byte says, wherever that falls.
    const random = (() => {
      let state = 7;
      return () => (state = (state * 1103515245 + 12345) % 2 ** 31) / 2 ** 31;
    })();
    const characters = ["a", "é", "✓", "🎉"];
    const text = () =>
      Array.from(
        { length: 1 + Math.floor(random() * 6) },
        () => characters[Math.floor(random() * characters.length)],
      ).join("");
    for (let round = 0; round < 200; round++) {
      const batch = Array.from({ length: 40 }, (_, i) => ({
        messageId: `${i}-${text()}`,
        payload: JSON.stringify(text()),
      }));
      const confirmations = Array.from({ length: 20 }, (_, i) => `c${i}${text()}`);
      const maxBytes = 40 + Math.floor(random() * 1200);
      // What fits, by exact counting: confirmations keep up to half the operations (20 here).
      const l = lane(100, maxBytes);
      l.confirm(confirmations);
      l.store(batch, 0);
      const unit = l.next()!;
      let left = maxBytes;
      let stored = 0;
      for (const job of batch) {
        const bytes = utf8(job.messageId) + utf8(job.payload);
        if (stored > 0 && (bytes > left || stored === 80)) break;
        left -= bytes;
        stored += 1;
      }
      let confirmed = 0;
      for (const id of confirmations) {
        if (utf8(id) > left) break;
        left -= utf8(id);
        confirmed += 1;
      }
      assert.equal(unit.store?.jobs.length, stored, `round ${round}: stored`);
      assert.deepEqual(unit.confirm, confirmations.slice(0, confirmed), `round ${round}`);
    }
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
