/**
 * A job the reload holds (accepted, unconfirmed) that the producer also resubmits (it had not
 * marked it when the process died), confirmed by a worker while the resubmission's handshake is
 * in flight: it must run once and the controller must keep running. In-process and
 * deterministic; `durable_crash.test.ts` shows the same with real processes ("accepted" point).
 * And a `BufferedProducer` job resubmitted after its receipt, before it was accepted, when the
 * session changes.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  connectInProcess,
  MemoryWorkQueue,
  type ReliableDeliveryFailedEvent,
  type Stored,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { ManualProducer, quiesce, ScriptedWorker } from "./support/harness.ts";
import { waitFor, within } from "./support/waiting.ts";

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

describe("a job resubmitted after its receipt while a new session starts", () => {
  // Stored, not yet accepted, when the session changes: BufferedProducer sends it again first,
  // and the resubmission waits behind it. One answer with both repeated its MessageID, and the
  // controller failed ("Produced repeats a MessageID"), again after every respawn.
  test("the controller keeps running, the receipt names the job's sequence, it runs once", async () => {
    const queue = new MemoryWorkQueue();
    const producer = new BufferedProducer<string>();
    const controller = new WorkPullingController({ name: "p", producer, queue });
    const failures: ReliableDeliveryFailedEvent[] = [];
    controller.addEventListener("delivery-failed", (event) => failures.push(event));
    await controller.start();
    const ran: string[] = [];
    connectInProcess(
      controller,
      new WorkerEndpoint<string>({
        producer: "p",
        name: "w",
        handler: (delivery) => void ran.push(`${delivery.messageId}:${delivery.payload}`),
      }),
    );
    const first = await producer.submit("a", { messageId: "x" });
    const again = producer.submit("b", { messageId: "x" });
    await controller.respawn(); // a durable failure's restart changes the session the same way
    assert.equal((await within(again, "the resubmission's receipt")).seq, first.seq);
    await waitFor(() => controller.stats().totals.confirmed >= 1, "x confirmed");
    assert.deepEqual(failures.map((f) => [f.stage, (f.error as Error).message]), []);
    assert.equal(controller.state, "running");
    assert.deepEqual(ran, ["x:a"], "run once, as first submitted");
    assert.equal(controller.stats().pending, 0);
    await controller.close();
  });
});
