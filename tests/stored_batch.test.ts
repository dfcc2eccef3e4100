/**
 * `StoredBatch`, the controller's `Stored` by column: its copies carry the plain form, and
 * `BufferedProducer` gives the same receipts whether `Stored` comes by column or as plain jobs
 * (a port that forwards the controller's messages through a copy).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import * as v from "valibot";
import { BufferedProducer, type Produced, type ProducerPort } from "../mod.ts";
import { StoredBatch } from "../src/protocol/stored_batch.ts";
import { StoredSchema } from "../src/protocol/schemas.ts";

test("a StoredBatch is an ordinary Stored to anyone else, also copied", () => {
  const stored = new StoredBatch("s", "t", ["a", "b"], [7, 9]);
  const plain = {
    session: "s",
    token: "t",
    jobs: [{ messageId: "a", seq: 7 }, { messageId: "b", seq: 9 }],
  };
  assert.deepEqual(stored.jobs, plain.jobs);
  assert.equal(stored.jobs, stored.jobs, "made once");
  for (const copy of [JSON.parse(JSON.stringify(stored)), structuredClone(stored), { ...stored }]) {
    assert.deepEqual(copy, plain);
    assert.ok(v.safeParse(StoredSchema, copy).success);
  }
  assert.throws(() => new StoredBatch("s", "t", ["a"], [1, 2]), RangeError);
});

/** A producer attached to a port that records its answers and acknowledgements. */
function attached() {
  const produced: Produced[] = [];
  const acks: unknown[] = [];
  const port: ProducerPort = {
    produced: (message) => void produced.push(message),
    storedAck: (message) => void acks.push(message),
    maxPayloadBytes: 1 << 20,
    deliveryConfirmation: false,
  };
  const producer = new BufferedProducer<number>();
  producer.attach(port);
  return { producer, produced, acks };
}

for (const form of ["by column", "as plain jobs"] as const) {
  test(`BufferedProducer settles its receipts from a Stored ${form}`, async () => {
    const { producer, produced, acks } = attached();
    const receipts = producer.submitMany([1, 2, 3], { messageIds: ["x", "y", "z"] });
    producer.onRequestNext({ session: "s", token: "t1", maxJobs: 10 });
    assert.equal(produced.length, 1);
    const answer = produced[0];
    assert.ok("jobs" in answer);
    const ids = answer.jobs.map((job) => job.messageId);
    assert.deepEqual(ids, ["x", "y", "z"]);
    const stored = new StoredBatch("s", "t1", ids, [4, 5, 6]);
    producer.onStored(form === "by column" ? stored : structuredClone(stored));
    assert.deepEqual(acks, [{ session: "s", token: "t1" }]);
    assert.deepEqual(
      (await receipts).map(({ messageId, seq }) => [messageId, seq]),
      [["x", 4], ["y", 5], ["z", 6]],
    );
    assert.equal(producer.buffered, 0);
  });
}
