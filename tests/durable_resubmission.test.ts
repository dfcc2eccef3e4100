/**
 * A job the reload holds (accepted, unconfirmed) that the producer also resubmits (it had not
 * marked it when the process died), confirmed by a worker while the resubmission's handshake is
 * in flight: it must run once and the controller must keep running. In-process and
 * deterministic; `durable_crash.test.ts` shows the same with real processes ("accepted" point).
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  MemoryWorkQueue,
  type ReliableDeliveryFailedEvent,
  type Stored,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { ManualProducer, quiesce, ScriptedWorker } from "./support/harness.ts";

async function settle(): Promise<void> {
  for (let i = 0; i < 5; i++) await quiesce();
}

/** "x" accepted by a dead controller; a new one reloads and dispatches it; the producer resubmits it. */
async function reloadAndResubmit(ackAtOnce: boolean) {
  const queue = new MemoryWorkQueue();
  const { epoch } = await queue.load();
  await queue.store(epoch, { messageId: "x", proposedSeq: 1, payload: '"x"' });
  await queue.accept(epoch, "x");
  const producer = new ManualProducer();
  if (ackAtOnce) {
    // Like BufferedProducer and the example file producer: StoredAck from inside onStored.
    const onStored = producer.onStored.bind(producer);
    producer.onStored = (stored: Stored) => {
      onStored(stored);
      producer.port.storedAck({ session: stored.session, token: stored.token });
    };
  }
  const controller = new WorkPullingController({
    name: "jobs",
    producer,
    clock: new SimulatedClock(),
    queue,
  });
  const failures: ReliableDeliveryFailedEvent[] = [];
  controller.addEventListener("delivery-failed", (e: ReliableDeliveryFailedEvent) => {
    failures.push(e);
  });
  await controller.start();
  const worker = new ScriptedWorker(controller, "w");
  worker.register();
  worker.request(0, 10);
  await quiesce();
  assert.deepEqual(worker.jobIds(), ["x"], "the reload dispatched x");
  const { session, token } = producer.lastRequest;
  producer.port.produced({ session, token, jobs: [{ messageId: "x", payload: "x" }] });
  return { queue, producer, controller, failures, worker, session, token };
}

describe("a reloaded job that the producer also resubmits", () => {
  test("confirmed between Stored and StoredAck: no Accept of a compacted job, no failure", async () => {
    const s = await reloadAndResubmit(false);
    await settle();
    assert.deepEqual(s.producer.stored.at(-1)?.jobs, [{ messageId: "x", seq: 1 }]);
    s.worker.ack(1); // the confirmation compacts x in the queue
    await settle();
    s.producer.port.storedAck({ session: s.session, token: s.token });
    await settle();
    assert.deepEqual(s.failures.map((f) => [f.stage, (f.error as Error).name]), []);
    assert.equal(s.controller.state, "running");
    assert.deepEqual(s.worker.jobIds(), ["x"], "dispatched once");
    assert.equal(s.queue.size, 0);
    await s.controller.close();
  });

  test("confirmed while its Store runs: it does not re-enter the pool", async () => {
    const s = await reloadAndResubmit(true);
    s.worker.ack(1); // arrives while the resubmission's Store is in flight
    await settle();
    assert.deepEqual(s.producer.stored.at(-1)?.jobs, [{ messageId: "x", seq: 1 }]);
    assert.deepEqual(s.worker.jobIds(), ["x"], "dispatched once");
    assert.deepEqual(s.failures.map((f) => [f.stage, (f.error as Error).name]), []);
    assert.equal(s.queue.size, 0);
    await s.controller.close();
  });
});
