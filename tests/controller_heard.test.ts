// Feature `heard`: a frame the controller has nothing else to answer gets a `heard` frame, so a
// worker whose TCP stack holds its next frame for an acknowledgment (Nagle's algorithm, left on by
// Deno's WebSocket client) is not kept waiting for the controller's delayed ACK.
import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { WorkPullingController } from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { ManualProducer, ScriptedWorker } from "./support/harness.ts";

function setup() {
  const clock = new SimulatedClock();
  const producer = new ManualProducer();
  const controller = new WorkPullingController({ name: "jobs", producer, clock });
  return { clock, producer, controller };
}

const job = (messageId: string) => ({ messageId, payload: messageId });
const types = (worker: ScriptedWorker) => worker.received.map((frame) => frame.type);

/** A worker with feature heard holding `count` jobs, once the tick its first heard began is over. */
function busyWorker({ clock, producer, controller }: ReturnType<typeof setup>, count: number) {
  const worker = new ScriptedWorker(controller, "a");
  worker.register(undefined, "jobs", undefined, ["heard"]);
  worker.request(0, count); // heard at once (the pool is empty), and a tick starts
  producer.produce(Array.from({ length: count }, (_, i) => job(`j${i + 1}`)));
  clock.advance(0); // the tick ends with nothing owed
  return worker;
}

describe("feature heard", () => {
  test("is agreed when the worker names it, and only then", async () => {
    const { controller } = setup();
    await controller.start();
    const named = new ScriptedWorker(controller, "a");
    named.register(undefined, "jobs", undefined, ["heard"]);
    const registered = named.received[0];
    assert.deepEqual(registered.type === "registered" && registered.features, ["heard"]);
    const silent = new ScriptedWorker(controller, "b");
    silent.register();
    silent.request(0, 5);
    silent.ack(0);
    assert.deepEqual(types(silent), ["registered"], "a worker without the feature gets no heard");
    await controller.close();
  });

  test("a request the pool cannot fill is heard at once; one it fills is answered by its jobs", async () => {
    const { producer, controller } = setup();
    await controller.start();
    const worker = new ScriptedWorker(controller, "a");
    worker.register(undefined, "jobs", undefined, ["heard"]);
    worker.request(0, 2); // nothing to send yet
    assert.deepEqual(types(worker), ["registered", "heard"]);
    producer.produce([job("j1"), job("j2")]);
    assert.deepEqual(types(worker), ["registered", "heard", "jobs"]);
    await controller.close();
  });

  test("frames within one tick share one heard; the tick's end answers them", async () => {
    const flow = setup();
    const { clock, controller } = flow;
    await controller.start();
    const worker = busyWorker(flow, 3);
    const before = worker.received.length;
    worker.ack(1); // heard at once
    worker.ack(2); // held back until the tick ends
    worker.ack(3);
    assert.deepEqual(types(worker).slice(before), ["heard"]);
    clock.advance(0);
    assert.deepEqual(types(worker).slice(before), ["heard", "heard"], "one more for both");
    clock.advance(0);
    assert.deepEqual(types(worker).slice(before), ["heard", "heard"], "nothing owed: no more");
    assert.equal(clock.pendingTimers, 1, "only the worker's liveness timer is left");
    worker.ack(3);
    assert.deepEqual(types(worker).slice(before), ["heard", "heard", "heard"], "heard at once");
    await controller.close();
    assert.equal(clock.pendingTimers, 0, "closing cancels the tick");
  });

  test("a frame sent meanwhile answers: no heard for a link the controller wrote to", async () => {
    const flow = setup();
    const { clock, producer, controller } = flow;
    await controller.start();
    const worker = busyWorker(flow, 1);
    worker.ack(1); // heard at once, and a tick starts
    const before = worker.received.length;
    worker.request(1, 2); // owed until the tick ends...
    producer.produce([job("j2")]); // ...but its jobs frame answers it
    clock.advance(0);
    assert.deepEqual(types(worker).slice(before), ["jobs"]);
    await controller.close();
  });

  test("a link that closed is owed nothing", async () => {
    const flow = setup();
    const { clock, controller } = flow;
    await controller.start();
    const worker = busyWorker(flow, 1);
    worker.ack(1);
    worker.ack(1); // held back for the tick
    const before = worker.received.length;
    worker.disconnect();
    clock.advance(0);
    assert.equal(worker.received.length, before);
    await controller.close();
  });
});
