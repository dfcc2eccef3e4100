import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  type FrameRejectedEvent,
  WorkerEndpoint,
  type WorkerUnboundEvent,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { connectTapped, ManualProducer, quiesce, ScriptedWorker } from "./support/harness.ts";

function setup() {
  const clock = new SimulatedClock();
  const producer = new ManualProducer();
  const controller = new WorkPullingController({ name: "jobs", producer, clock });
  const rejected: string[] = [];
  const unbound: string[] = [];
  controller.addEventListener("frame-rejected", (e: FrameRejectedEvent) => rejected.push(e.reason));
  controller.addEventListener(
    "worker-unbound",
    (e: WorkerUnboundEvent) => unbound.push(`${e.worker}:${e.reason}`),
  );
  return { clock, producer, controller, rejected, unbound };
}

const job = (messageId: string) => ({ messageId, payload: messageId });

describe("registration", () => {
  test("a new incarnation replaces the old binding, whose jobs requeue into the new sub-flow", async () => {
    const { producer, controller, unbound } = setup();
    await controller.start();
    const old = new ScriptedWorker(controller, "a", "inc-1");
    old.register();
    old.request(0, 5);
    producer.produce([job("j1"), job("j2")]);
    const fresh = new ScriptedWorker(controller, "a", "inc-2");
    fresh.register();
    assert.deepEqual(unbound, ["a:replaced"]);
    assert.notEqual(fresh.binding, old.binding);
    const ack = fresh.received.find((frame) => frame.type === "registered");
    assert.equal(ack?.type === "registered" && ack.nextSeq, 1, "a fresh sequence space");
    fresh.request(0, 5);
    assert.deepEqual(fresh.jobs().map((j) => [j.seq, j.id]), [[1, "j1"], [2, "j2"]]);
    // Frames from the replaced incarnation's link no longer count.
    old.ack(2);
    assert.equal(controller.stats().workers[0].inFlight, 2);
    await controller.close();
  });

  test("a replaced incarnation can never bind again", async () => {
    const { controller, rejected } = setup();
    await controller.start();
    new ScriptedWorker(controller, "a", "inc-1").register();
    new ScriptedWorker(controller, "a", "inc-2").register();
    const zombie = new ScriptedWorker(controller, "a", "inc-1");
    zombie.register();
    assert.deepEqual(rejected, ["stale-incarnation"]);
    assert.equal(zombie.received.length, 0, "no ack for a stale incarnation");
    assert.equal(controller.stats().workers[0].incarnation, "inc-2");
    await controller.close();
  });

  test("a registration naming another producer is dropped and changes nothing", async () => {
    const { producer, controller, rejected } = setup();
    await controller.start();
    const w = new ScriptedWorker(controller, "a");
    w.register(undefined, "other-producer");
    assert.deepEqual(rejected, ["wrong-producer"]);
    assert.equal(w.received.length, 0);
    assert.equal(controller.stats().workers.length, 0);
    assert.equal(producer.requests.length, 0);
    await controller.close();
  });

  test("a link authenticated as one worker cannot register as another", async () => {
    const { controller, rejected } = setup();
    await controller.start();
    const w = new ScriptedWorker(controller, "b", "inc", { worker: "a" });
    w.register();
    assert.deepEqual(rejected, ["identity-mismatch"]);
    assert.equal(w.closedWith?.code, 1008);
    assert.equal(controller.stats().workers.length, 0);
    const numbered = new ScriptedWorker(controller, "a#2", "inc", { worker: "a" });
    numbered.register();
    assert.equal(controller.stats().workers.length, 1, "a#2 belongs to a");
    await controller.close();
  });

  test("re-registration of the same incarnation keeps the sub-flow", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const w = new ScriptedWorker(controller, "a");
    w.register();
    w.request(0, 5);
    producer.produce([job("j1"), job("j2")]);
    w.ack(1);
    const binding = w.binding;
    w.register(); // fresh nonce
    const last = w.received[w.received.length - 1];
    assert.equal(last.type === "registered" && last.nextSeq, 2);
    assert.equal(w.binding, binding);
    w.request(1, 6);
    producer.produce([job("j3")]);
    assert.deepEqual(w.jobs().map((j) => j.seq), [1, 2, 3]);
    await controller.close();
  });

  test("frames with a stale nonce or session are dropped silently", async () => {
    const { producer, controller, unbound } = setup();
    await controller.start();
    const w = new ScriptedWorker(controller, "a");
    w.register("n1");
    w.request(0, 5);
    producer.produce([job("j1")]);
    w.register("n2");
    w.send({ type: "ack", session: w.session, nonce: "n1", confirmed: 1 });
    w.send({ type: "ack", session: "old-session", nonce: "n2", confirmed: 1 });
    assert.equal(controller.stats().workers[0].inFlight, 1);
    assert.deepEqual(unbound, []);
    await controller.close();
  });
});

describe("closed controller", () => {
  test("a link attached after close is closed at once with 1001", async () => {
    const { controller } = setup();
    await controller.start();
    await controller.close();
    const late = new ScriptedWorker(controller, "late");
    assert.equal(late.closedWith?.code, 1001);
  });
});

describe("violations end only the offending binding", () => {
  test("an illegal demand range ends that binding and requeues its jobs; others carry on", async () => {
    const { producer, controller, unbound } = setup();
    await controller.start();
    const bad = new ScriptedWorker(controller, "bad");
    const good = new ScriptedWorker(controller, "good");
    bad.register();
    good.register();
    bad.request(0, 1);
    producer.produce([job("j1")]);
    good.request(0, 1);
    producer.produce([job("j2")]);
    bad.request(5, 6); // confirms a sequence it never received
    assert.deepEqual(unbound, ["bad:illegal-demand"]);
    good.request(1, 3);
    assert.deepEqual(good.jobIds(), ["j2", "j1"], "the requeued job went to the survivor");
    assert.equal(controller.state, "running");
    await controller.close();
  });

  test("demand wider than the maximum window is illegal", async () => {
    const { controller, unbound } = setup();
    await controller.start();
    const w = new ScriptedWorker(controller, "a");
    w.register();
    w.request(0, 10_001);
    assert.deepEqual(unbound, ["a:illegal-demand"]);
    await controller.close();
  });

  test("an illegal confirmation ends that binding", async () => {
    const { producer, controller, unbound } = setup();
    await controller.start();
    const w = new ScriptedWorker(controller, "a");
    w.register();
    w.request(0, 1);
    producer.produce([job("j1")]);
    w.ack(7);
    assert.deepEqual(unbound, ["a:illegal-confirmation"]);
    assert.equal(controller.stats().pending, 1);
    await controller.close();
  });

  test("a malformed frame ends the binding and closes the link with a typed reason", async () => {
    const { controller, unbound, rejected } = setup();
    await controller.start();
    const w = new ScriptedWorker(controller, "a");
    w.register();
    w.sendRaw("{not json");
    assert.deepEqual(rejected, ["malformed-json"]);
    assert.deepEqual(unbound, ["a:malformed-frame"]);
    assert.equal(w.closedWith?.code, 1007);
    const w2 = new ScriptedWorker(controller, "b");
    w2.sendRaw(
      JSON.stringify({
        type: "request",
        session: "s",
        nonce: "n",
        confirmed: -1,
        upTo: 0,
        resend: false,
      }),
    );
    w2.sendRaw("x".repeat(70_000));
    assert.deepEqual(rejected, ["malformed-json", "invalid-frame"]);
    const w3 = new ScriptedWorker(controller, "c");
    w3.sendRaw("x".repeat(70_000));
    assert.equal(w3.closedWith?.code, 1009);
    const w4 = new ScriptedWorker(controller, "d");
    w4.register();
    w4.refuse(); // the edge refused an oversized frame before decoding it
    assert.deepEqual(rejected.slice(-1), ["too-large"]);
    assert.deepEqual(unbound.slice(-1), ["d:malformed-frame"]);
    assert.equal(w4.closedWith?.code, 1009);
    assert.equal(controller.state, "running");
    await controller.close();
  });

  test("a worker whose binding ended for a violation while connected adopts a fresh binding", async () => {
    // The reference shut such a worker out for good: the fresh binding started at sequence 0,
    // the worker kept its old confirmation, and every request was an illegal range again.
    const clock = new SimulatedClock();
    const producer = new BufferedProducer<number>();
    const controller = new WorkPullingController({ name: "jobs", producer, clock });
    await controller.start();
    const handled: number[] = [];
    const worker = new WorkerEndpoint<number>({
      producer: "jobs",
      name: "w",
      window: 4,
      clock,
      handler: (d) => void handled.push(d.payload),
    });
    let corruptNext = false;
    connectTapped(controller, worker, (frame) => {
      if (!corruptNext || !frame.includes('"request"')) return frame;
      corruptNext = false;
      const request = JSON.parse(frame);
      return JSON.stringify({
        ...request,
        confirmed: request.confirmed + 100,
        upTo: request.upTo + 100,
      });
    });
    await quiesce();
    await Promise.all([1, 2, 3].map((n) => producer.submit(n)));
    await quiesce();
    assert.deepEqual(handled, [1, 2, 3]);
    // The worker's next request is corrupted on the live link: the binding ends.
    const unbound: string[] = [];
    controller.addEventListener(
      "worker-unbound",
      (e: WorkerUnboundEvent) => unbound.push(e.reason),
    );
    corruptNext = true;
    await clock.advanceAsync(4000); // its ticks re-register, then request
    await quiesce();
    assert.deepEqual(unbound, ["illegal-demand"]);
    // The real worker re-registers on its next ticks and adopts the fresh binding.
    await clock.advanceAsync(4000);
    await quiesce();
    await producer.submit(4);
    await clock.advanceAsync(10);
    await quiesce();
    assert.deepEqual(handled, [1, 2, 3, 4]);
    assert.equal(controller.stats().workers.length, 1);
    await worker.close();
    await controller.close();
  });
});
