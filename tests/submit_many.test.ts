/**
 * `BufferedProducer.submitMany`: one promise for a batch of jobs, resolving with every receipt
 * once the last job is Stored; all-or-nothing validation; joins of waiting MessageIDs; and what a
 * close before the end does. In process, on a simulated clock, with real worker endpoints.
 */
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  connectInProcess,
  type Delivery,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { quiesce } from "./support/harness.ts";

async function setup(options: { maxBatch?: number; deliveryConfirmation?: boolean } = {}) {
  const clock = new SimulatedClock();
  const producer = new BufferedProducer<unknown>({ maxBatch: options.maxBatch });
  const controller = new WorkPullingController({
    name: "jobs",
    producer,
    clock,
    deliveryConfirmation: options.deliveryConfirmation,
  });
  await controller.start();
  const handled: Delivery<unknown>[] = [];
  const connect = (
    handler: (d: Delivery<unknown>) => unknown = (d) => void handled.push(d),
    window = 50,
  ) =>
    connectInProcess(
      controller,
      new WorkerEndpoint<unknown>({
        producer: "jobs",
        name: "w",
        clock,
        window,
        handler,
        ackDelay: 0,
      }),
    );
  return { clock, producer, controller, handled, connect };
}

describe("submitMany", () => {
  test("resolves with every receipt in order once the last is stored; the jobs run in order", async () => {
    const s = await setup({ maxBatch: 3 }); // the batch spans several Produced answers
    const payloads = Array.from({ length: 10 }, (_, n) => ({ n }));
    let settled = false;
    const batch = s.producer.submitMany(payloads).then((receipts) => {
      settled = true;
      return receipts;
    });
    await quiesce();
    assert.equal(settled, false, "nothing is stored before a worker asks");
    assert.equal(s.producer.buffered, 10);
    s.connect();
    const receipts = await batch;
    assert.equal(receipts.length, 10);
    assert.deepEqual(receipts.map((r) => r.seq), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert.equal(new Set(receipts.map((r) => r.messageId)).size, 10);
    await Promise.all(receipts.map((r) => r.accepted));
    await quiesce();
    assert.deepEqual(s.handled.map((d) => d.payload), payloads);
    assert.deepEqual(s.handled.map((d) => d.messageId), receipts.map((r) => r.messageId));
    assert.equal(s.producer.buffered, 0);
    assert.deepEqual(await s.producer.submitMany([]), []);
    await s.controller.close();
  });

  test("an invalid payload or MessageID refuses the whole batch, and nothing is submitted", async () => {
    const s = await setup();
    const cyclic: Record<string, unknown> = {};
    cyclic.self = cyclic;
    await assert.rejects(
      s.producer.submitMany([1, 2, cyclic, 4]),
      (e: Error) =>
        e instanceof TypeError && /job 2 of the batch.*not JSON-serializable/.test(e.message),
    );
    await assert.rejects(
      s.producer.submitMany([1, "x".repeat(s.controller.maxPayloadBytes + 1)]),
      (e: Error) => e instanceof RangeError && /job 1 of the batch/.test(e.message),
    );
    await assert.rejects(
      s.producer.submitMany([1, 2], { messageIds: ["a", " "] }),
      (e: Error) => e instanceof TypeError && /job 1 of the batch: messageId/.test(e.message),
    );
    await assert.rejects(
      s.producer.submitMany([1, 2], { messageIds: ["a"] }),
      /messageIds must be an array of 2 MessageIDs/,
    );
    await assert.rejects(
      s.producer.submitMany("12" as unknown as unknown[]),
      /payloads must be an array/,
    );
    assert.equal(s.producer.buffered, 0, "nothing waits from the refused batches");
    s.connect();
    const receipts = await s.producer.submitMany(["ok"], { messageIds: ["a"] });
    await quiesce();
    assert.deepEqual(s.handled.map((d) => [d.messageId, d.payload]), [["a", "ok"]]);
    assert.equal(receipts[0].seq, 1);
    await s.controller.close();
  });

  test("a MessageID waiting in the producer, or repeated in the batch, joins that job", async () => {
    const s = await setup();
    const single = s.producer.submit("first x", { messageId: "x" });
    const batch = s.producer.submitMany(["y", "second x", "second y"], {
      messageIds: ["y", "x", "y"],
    });
    const joinsBatch = s.producer.submit("third y", { messageId: "y" }); // waits in the batch
    assert.equal(s.producer.buffered, 2, "x and y wait once each");
    s.connect();
    const [x, receipts, y] = await Promise.all([single, batch, joinsBatch]);
    await quiesce();
    assert.deepEqual(s.handled.map((d) => [d.messageId, d.payload]), [["x", "first x"], [
      "y",
      "y",
    ]]);
    assert.deepEqual(receipts.map((r) => [r.messageId, r.seq]), [["y", 2], ["x", 1], ["y", 2]]);
    assert.equal(x.seq, 1);
    assert.equal(y.seq, 2);
    await s.controller.close();
  });

  test("with delivery confirmation, each receipt's `confirmed` resolves for its own job", async () => {
    const s = await setup({ deliveryConfirmation: true });
    s.connect();
    const receipts = await s.producer.submitMany(["a", "b", "c"]);
    const confirmed = await Promise.all(receipts.map((r) => r.confirmed!));
    assert.deepEqual(confirmed.map((c) => c.messageId), receipts.map((r) => r.messageId));
    assert.deepEqual(confirmed.map((c) => c.seq), [1, 2, 3]);
    await s.controller.close();
  });

  for (const named of [true, false]) {
    const label = named
      ? "with MessageIDs"
      : "with generated MessageIDs (the batch waits as texts)";
    test(`closing the producer rejects a batch not all stored; the stored jobs still run (${label})`, async () => {
      const s = await setup({ maxBatch: 2 });
      const releases: (() => void)[] = [];
      // A worker that takes 2 jobs and holds them: the controller stores only what it can grant.
      s.connect((d) => {
        s.handled.push(d);
        return new Promise<void>((resolve) => releases.push(resolve));
      }, 2);
      await quiesce();
      const ids = ["j0", "j1", "j2", "j3", "j4", "j5", "j6", "j7", "j8", "j9"];
      const payloads = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9];
      const batch = s.producer.submitMany(payloads, named ? { messageIds: ids } : undefined);
      await quiesce();
      const stored = 10 - s.producer.buffered;
      assert.ok(stored > 0 && stored < 10, `some jobs stored, not all (${stored})`);
      const reason = new Error("shutting down");
      s.producer.close(reason);
      await assert.rejects(batch, (e) => e === reason);
      assert.equal(s.producer.buffered, 0);
      // Every job stored before the close still runs, once, in order.
      while (releases.length > 0) {
        for (const release of releases.splice(0)) release();
        await quiesce();
      }
      assert.deepEqual(s.handled.map((d) => d.payload), payloads.slice(0, stored));
      if (named) assert.deepEqual(s.handled.map((d) => d.messageId), ids.slice(0, stored));
      await s.controller.close();
    });
  }
});
