import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  connectInProcess,
  type RequeuedEvent,
  WorkerEndpoint,
  type WorkerUnboundEvent,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { ManualProducer, quiesce, ScriptedWorker } from "./support/harness.ts";

function setup(
  options: { deliveryConfirmation?: boolean; reconnectGrace?: number; maxJobAge?: number } = {},
) {
  const clock = new SimulatedClock();
  const producer = new ManualProducer();
  const controller = new WorkPullingController({ name: "jobs", producer, clock, ...options });
  return { clock, producer, controller };
}

function jobs(...ids: string[]) {
  return ids.map((messageId) => ({ messageId, payload: { id: messageId } }));
}

describe("dispatch", () => {
  test("round-robin over three workers skips the one without demand", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const [a, b, c, d] = ["a", "b", "c", "d"].map((name) => new ScriptedWorker(controller, name));
    for (const worker of [a, b, c, d]) worker.register();
    a.request(0, 10);
    b.request(0, 10);
    c.request(0, 0); // registered, no demand
    d.request(0, 10);
    producer.produce(jobs("j1", "j2", "j3", "j4", "j5", "j6", "j7"));
    assert.deepEqual(a.jobIds(), ["j1", "j4", "j7"]);
    assert.deepEqual(b.jobIds(), ["j2", "j5"]);
    assert.deepEqual(c.jobIds(), []);
    assert.deepEqual(d.jobIds(), ["j3", "j6"]);
    // Each worker's sub-flow has its own contiguous sequences.
    assert.deepEqual(a.jobs().map((job) => job.seq), [1, 2, 3]);
    assert.deepEqual(d.jobs().map((job) => job.seq), [1, 2]);
    await controller.close();
  });

  test("MessageIDs that JSON escapes reach the worker exactly, beside batches of plain ones", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register();
    a.request(0, 10);
    // The first batch's MessageIDs go into the frame unchecked; the second's need escaping.
    const plain = ["p-1", "p-2"];
    const escaped = ['q"uote', "back\\slash", "tab\there", "p-3", "emoji-🙂"];
    producer.produce(jobs(...plain));
    producer.produce(jobs(...escaped));
    assert.deepEqual(a.jobIds(), [...plain, ...escaped]);
    assert.deepEqual(
      a.jobs().map((job) => job.payload),
      [...plain, ...escaped].map((id) => ({ id })),
    );
    await controller.close();
  });

  test("credit is pool-aware: no RequestNext without free worker demand", async () => {
    const { producer, controller } = setup();
    await controller.start();
    assert.equal(producer.requests.length, 0, "no workers: no credit");
    const a = new ScriptedWorker(controller, "a");
    a.register();
    assert.equal(producer.requests.length, 0, "registered without demand: no credit");
    a.request(0, 2);
    assert.equal(producer.requests.length, 1);
    assert.equal(producer.lastRequest.maxJobs, 2, "the grant is the free demand");
    producer.produce(jobs("j1", "j2"));
    assert.equal(producer.requests.length, 1, "demand used up: no new credit");
    assert.deepEqual(a.jobIds(), ["j1", "j2"]);
    a.request(1, 3); // confirms j1, grants one more
    assert.equal(producer.requests.length, 2);
    assert.equal(producer.lastRequest.maxJobs, 1);
    await controller.close();
  });

  test("a grant open when every worker leaves is still stored and waits in the pool", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register();
    a.request(0, 5);
    a.disconnect();
    producer.produce(jobs("j1"));
    assert.equal(controller.stats().pending, 1);
    const b = new ScriptedWorker(controller, "b");
    b.register();
    b.request(0, 5);
    assert.deepEqual(b.jobIds(), ["j1"]);
    await controller.close();
  });

  test("a slow worker pulls less than a fast one", async () => {
    const clock = new SimulatedClock();
    const producer = new BufferedProducer<number>();
    const controller = new WorkPullingController({ name: "jobs", producer, clock });
    await controller.start();
    const done = { fast: 0, slow: 0 };
    const slowGate: (() => void)[] = [];
    const fast = new WorkerEndpoint<number>({
      producer: "jobs",
      name: "fast",
      window: 4,
      clock,
      handler: () => void done.fast++,
    });
    const slow = new WorkerEndpoint<number>({
      producer: "jobs",
      name: "slow",
      window: 4,
      clock,
      handler: () => new Promise<void>((resolve) => slowGate.push(() => (done.slow++, resolve()))),
    });
    connectInProcess(controller, fast);
    connectInProcess(controller, slow);
    await quiesce();
    const receipts = Array.from({ length: 100 }, (_, n) => producer.submit(n));
    // The slow worker finishes one job per round; the fast one drains everything it gets.
    for (let round = 0; round < 30 && done.fast + done.slow < 100; round++) {
      await quiesce();
      slowGate.shift()?.();
    }
    while (done.fast + done.slow < 100) {
      slowGate.shift()?.();
      await quiesce();
    }
    await Promise.all(receipts);
    assert.equal(done.fast + done.slow, 100);
    assert.ok(done.fast > 3 * done.slow, `fast ${done.fast} vs slow ${done.slow}`);
    await controller.close();
  });
});

describe("byte budget", () => {
  test("a worker holding maxInFlightBytes of unconfirmed payload gets no more until it confirms", async () => {
    const clock = new SimulatedClock();
    const producer = new ManualProducer();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      clock,
      maxInFlightBytes: 2500,
    });
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register();
    a.request(0, 10);
    const big = (id: string) => ({ messageId: id, payload: "x".repeat(998) }); // 1000 chars of JSON
    producer.produce(["j1", "j2", "j3", "j4", "j5"].map(big));
    assert.deepEqual(a.jobIds(), ["j1", "j2", "j3"], "stops once 2500 is reached");
    assert.equal(controller.stats().pending, 2);
    a.ack(2);
    assert.deepEqual(a.jobIds(), ["j1", "j2", "j3", "j4", "j5"]);
    await controller.close();
  });
});

describe("requeue", () => {
  test("a lost worker's unconfirmed jobs go to the head of the pool and complete elsewhere under fresh sequences", async () => {
    const { producer, controller } = setup({ deliveryConfirmation: true });
    await controller.start();
    const events: string[] = [];
    controller.addEventListener(
      "requeued",
      (e: RequeuedEvent) => events.push(`requeued ${e.messageIds}`),
    );
    controller.addEventListener(
      "worker-unbound",
      (e: WorkerUnboundEvent) => events.push(`unbound ${e.worker} ${e.reason} ${e.requeued}`),
    );
    const a = new ScriptedWorker(controller, "a");
    const b = new ScriptedWorker(controller, "b");
    a.register();
    b.register();
    a.request(0, 3);
    producer.produce(jobs("j1", "j2", "j3"));
    a.ack(1); // j1 done at a; j2, j3 unconfirmed
    b.request(0, 1);
    producer.produce(jobs("j4"));
    assert.deepEqual(b.jobIds(), ["j4"]);
    a.disconnect();
    assert.deepEqual(events, ["unbound a disconnected 2", "requeued j2,j3"]);
    // j2 and j3 wait at the head, ahead of later work, and b takes them in order.
    producer.port; // (no new credit: pool not empty)
    b.request(1, 4);
    assert.deepEqual(b.jobs().map((job) => [job.seq, job.id]), [[1, "j4"], [2, "j2"], [3, "j3"]]);
    const redelivered = b.jobs().find((job) => job.id === "j2")!;
    assert.deepEqual(redelivered.payload, { id: "j2" }, "original payload");
    b.ack(3);
    assert.deepEqual(
      producer.confirmed.map((c) => [c.messageId, c.seq]),
      [["j1", 1], ["j4", 4], ["j2", 2], ["j3", 3]],
      "DeliveryConfirmed carries the store sequence",
    );
    await controller.close();
  });

  test("round-robin stays fair when a binding is removed", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const workers = ["a", "b", "c", "d"].map((name) => new ScriptedWorker(controller, name));
    for (const worker of workers) {
      worker.register();
      worker.request(0, 100);
    }
    const [a, b, c, d] = workers;
    producer.produce(jobs("j1", "j2")); // a, b; the cursor now points at c
    a.ack(1); // nothing of a's to requeue
    a.disconnect(); // removing a member before the cursor must not skip c
    producer.produce(jobs("j3", "j4", "j5"));
    assert.deepEqual(c.jobIds(), ["j3"]);
    assert.deepEqual(d.jobIds(), ["j4"]);
    assert.deepEqual(b.jobIds(), ["j2", "j5"]);
    await controller.close();
  });

  test("requeued jobs keep their order ahead of new work", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register();
    a.request(0, 2);
    producer.produce(jobs("j1", "j2"));
    const b = new ScriptedWorker(controller, "b");
    b.register();
    b.request(0, 1);
    producer.produce(jobs("j3"));
    a.disconnect();
    b.ack(1);
    const c = new ScriptedWorker(controller, "c");
    c.register();
    c.request(0, 10);
    assert.deepEqual(c.jobIds(), ["j1", "j2"]);
    await controller.close();
  });

  test("a reconnect within the grace period resumes the binding without redelivery to others", async () => {
    const { producer, controller, clock } = setup({ reconnectGrace: 1000 });
    await controller.start();
    const a1 = new ScriptedWorker(controller, "a", "inc-a");
    a1.register();
    a1.request(0, 2);
    producer.produce(jobs("j1", "j2"));
    a1.disconnect();
    assert.equal(controller.stats().workers[0].connected, false);
    clock.advance(500);
    const a2 = new ScriptedWorker(controller, "a", "inc-a");
    a2.register();
    assert.equal(a2.binding, a1.binding, "same binding");
    a2.request(0, 2, true); // resend what is unconfirmed
    assert.deepEqual(a2.jobs().map((job) => [job.seq, job.id]), [[1, "j1"], [2, "j2"]]);
    clock.advance(2000);
    assert.equal(controller.stats().pending, 0, "nothing requeued after the grace expired");
    await controller.close();
  });

  test("after the grace period a disconnected binding ends and requeues", async () => {
    const { producer, controller, clock } = setup({ reconnectGrace: 1000 });
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register();
    a.request(0, 2);
    producer.produce(jobs("j1"));
    a.disconnect();
    clock.advance(999);
    assert.equal(controller.stats().pending, 0);
    clock.advance(2);
    assert.equal(controller.stats().pending, 1);
    await controller.close();
  });

  test("a silent worker's binding ends within the silence bound", async () => {
    const { producer, controller, clock } = setup();
    await controller.start();
    const reasons: string[] = [];
    controller.addEventListener(
      "worker-unbound",
      (e: WorkerUnboundEvent) => reasons.push(e.reason),
    );
    const a = new ScriptedWorker(controller, "a"); // declares resendInterval 2000
    a.register();
    a.request(0, 2);
    producer.produce(jobs("j1"));
    clock.advance(7000);
    a.ack(0); // still alive
    clock.advance(8000);
    assert.deepEqual(reasons, []);
    clock.advance(600); // 8 s (4 intervals) + one tick of slack since the last frame
    assert.deepEqual(reasons, ["silent"]);
    assert.equal(a.closedWith?.code, 4001);
    assert.equal(controller.stats().pending, 1);
    await controller.close();
  });

  test("a binding that holds jobs and confirms none for maxJobAge ends; a confirming one never", async () => {
    // Defect: a worker that heartbeats but never confirms kept its window of jobs forever.
    const { producer, controller, clock } = setup({ maxJobAge: 10_000 });
    await controller.start();
    const reasons: string[] = [];
    controller.addEventListener(
      "worker-unbound",
      (e: WorkerUnboundEvent) => reasons.push(`${e.worker}:${e.reason}:${e.requeued}`),
    );
    const hoarder = new ScriptedWorker(controller, "hoarder");
    const honest = new ScriptedWorker(controller, "honest");
    hoarder.register(undefined, "jobs", undefined, ["unbound"]);
    honest.register();
    hoarder.request(0, 3);
    producer.produce(jobs("j1", "j2", "j3"));
    honest.request(0, 1);
    producer.produce(jobs("j4"));
    for (let t = 0; t < 16; t++) {
      clock.advance(1000);
      hoarder.ack(0); // alive, and never confirming anything
      const received = honest.jobs().length;
      honest.request(received, received + 1); // confirms each job a second after it came
    }
    assert.deepEqual(reasons, ["hoarder:job-age:3"]);
    assert.equal(hoarder.received.at(-1)?.type, "unbound", "the hoarder is told");
    assert.deepEqual(honest.jobIds(), ["j4", "j1", "j2", "j3"], "the hoarded jobs moved on");
    await controller.close();
  });
});
