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
    assert.equal(zombie.closedWith?.code, 4004, "its link is closed: registering again is futile");
    assert.equal(controller.stats().workers[0].incarnation, "inc-2");
    await controller.close();
  });

  test("a replaced incarnation's link is closed with 4002", async () => {
    const { controller } = setup();
    await controller.start();
    const old = new ScriptedWorker(controller, "a", "inc-1");
    old.register();
    new ScriptedWorker(controller, "a", "inc-2").register();
    assert.equal(old.closedWith?.code, 4002);
    await controller.close();
  });

  test("a registration naming another producer is refused and changes nothing", async () => {
    const { producer, controller, rejected } = setup();
    await controller.start();
    const w = new ScriptedWorker(controller, "a");
    w.register(undefined, "other-producer");
    assert.deepEqual(rejected, ["wrong-producer"]);
    assert.equal(w.received.length, 0, "a worker without features gets no refused frame");
    assert.equal(w.closedWith?.code, 4004);
    assert.equal(controller.stats().workers.length, 0);
    assert.equal(producer.requests.length, 0);
    await controller.close();
  });

  test("a worker that understands refusals is told why, and whether retrying can help", async () => {
    // Defect: a refused registration got no answer, so a worker following the protocol retried
    // forever.
    const { controller } = setup();
    await controller.start();
    const features = ["refused", "unbound", "release", "some-future-feature"];
    const first = new ScriptedWorker(controller, "a", "inc-1");
    first.register("n1", "jobs", "inc-1", features);
    const registered = first.received[0];
    assert.deepEqual(
      registered.type === "registered" && registered.features,
      ["refused", "unbound", "release"],
      "the controller answers with the features it knows",
    );
    new ScriptedWorker(controller, "a", "inc-2").register();
    const zombie = new ScriptedWorker(controller, "a", "inc-1");
    zombie.register("n2", "jobs", "inc-1", features);
    assert.deepEqual(zombie.received, [{
      type: "refused",
      nonce: "n2",
      reason: "stale-incarnation",
      retry: false,
      detail: 'a newer start of "a" registered; incarnation inc-1 is replaced',
    }]);
    assert.equal(zombie.closedWith?.code, 4004);
    const lost = new ScriptedWorker(controller, "b");
    lost.register("n3", "emails", undefined, features);
    assert.deepEqual(
      lost.received.map((f) => f.type === "refused" && [f.reason, f.retry]),
      [["wrong-producer", false]],
    );
    await controller.close();
  });

  test("release hands back the jobs not started at once; the binding takes no new job", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register(undefined, "jobs", undefined, ["release"]);
    a.request(0, 5);
    producer.produce(["j1", "j2", "j3", "j4"].map(job));
    a.release(1, 2); // j1 done, j2 running; j3 and j4 go back
    const b = new ScriptedWorker(controller, "b");
    b.register();
    b.request(0, 5);
    assert.deepEqual(b.jobIds(), ["j3", "j4"], "requeued at once, in order");
    a.request(2, 10); // a draining binding asks for more: it gets nothing new
    producer.produce(["j5"].map(job));
    assert.deepEqual(a.jobIds(), ["j1", "j2", "j3", "j4"]);
    assert.deepEqual(b.jobIds(), ["j3", "j4", "j5"]);
    assert.equal(controller.stats().workers.find((w) => w.worker === "a")?.inFlight, 0);
    await controller.close();
  });

  test("a release outside the binding's range ends the binding", async () => {
    const { producer, controller, unbound } = setup();
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register();
    a.request(0, 5);
    producer.produce(["j1", "j2"].map(job));
    a.release(0, 3); // sequence 3 was never sent
    assert.deepEqual(unbound, ["a:illegal-demand"]);
    await controller.close();
  });

  test("a worker whose binding ends while its link stays open is told so", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register(undefined, "jobs", undefined, ["unbound"]);
    a.request(0, 5);
    producer.produce(["j1"].map(job));
    a.ack(7); // never sent: illegal
    assert.deepEqual(a.received.at(-1), {
      type: "unbound",
      session: a.session,
      binding: a.binding,
      reason: "illegal-confirmation",
    });
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
