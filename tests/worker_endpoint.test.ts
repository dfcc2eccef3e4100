import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { type Delivery, type HandlerErrorEvent, WorkerEndpoint } from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { quiesce, ScriptedController } from "./support/harness.ts";

interface Gate {
  release(): void;
}

/** A worker whose handler completes only when the test releases it. */
function gatedWorker(options: { window?: number; resendInterval?: number } = {}) {
  const clock = new SimulatedClock();
  const started: Delivery<string>[] = [];
  const gates: Gate[] = [];
  const worker = new WorkerEndpoint<string>({
    producer: "jobs",
    name: "w",
    clock,
    ...options,
    handler: (delivery) =>
      new Promise<void>((resolve) => {
        started.push(delivery);
        gates.push({ release: resolve });
      }),
  });
  const controller = new ScriptedController(worker);
  const releaseNext = async () => {
    gates.shift()!.release();
    await quiesce();
  };
  return { clock, worker, controller, started, releaseNext };
}

describe("worker endpoint sub-flow", () => {
  test("registers, adopts the binding and grants its window", () => {
    const { controller } = gatedWorker({ window: 6 });
    const registration = controller.registration;
    assert.equal(registration.producer, "jobs");
    assert.equal(registration.worker, "w");
    controller.registered("s1", "b1", 1);
    assert.deepEqual(controller.ofType("request"), [
      {
        type: "request",
        session: "s1",
        nonce: registration.nonce,
        confirmed: 0,
        upTo: 6,
        resend: true,
      },
    ]);
  });

  test("delivers one job at a time in sequence order, tops up at half the window, acks when drained", async () => {
    const { controller, started, releaseNext } = gatedWorker({ window: 6 });
    controller.registered();
    controller.jobs(1, ["j1", "j2", "j3"]);
    await quiesce();
    assert.deepEqual(started.map((d) => d.messageId), ["j1"], "one in flight");
    await releaseNext();
    await releaseNext();
    assert.deepEqual(started.map((d) => [d.seq, d.messageId]), [[1, "j1"], [2, "j2"], [3, "j3"]]);
    await releaseNext(); // confirmed 3: 6 - 3 <= 3, a top-up request
    const requests = controller.ofType("request");
    assert.deepEqual(requests.at(-1), {
      ...requests.at(-1)!,
      confirmed: 3,
      upTo: 9,
      resend: false,
    });
    controller.jobs(4, ["j4"]);
    await quiesce();
    await releaseNext(); // drained, 9 - 4 > 3: an ack
    assert.deepEqual(controller.ofType("ack").at(-1), {
      ...controller.ofType("ack").at(-1)!,
      confirmed: 4,
    });
  });

  test("buffers jobs out of order and delivers them once the gap closes", async () => {
    const { controller, started, releaseNext } = gatedWorker({ window: 6 });
    controller.registered();
    controller.jobs(2, ["j2"]);
    await quiesce();
    assert.equal(started.length, 0);
    assert.equal(controller.ofType("request").at(-1)?.resend, true, "a gap request");
    controller.jobs(1, ["j1"]);
    await quiesce();
    await releaseNext();
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j2"]);
  });

  test("drops jobs beyond its demand and re-acknowledges duplicates", async () => {
    const { controller, started, releaseNext } = gatedWorker({ window: 2 });
    controller.registered();
    controller.jobs(1, ["j1", "j2", "j3"]); // j3 is beyond upTo = 2
    await quiesce();
    await releaseNext();
    await releaseNext();
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j2"]);
    const acksBefore = controller.ofType("ack").length + controller.ofType("request").length;
    controller.jobs(1, ["j1"]); // a duplicate below the expected sequence
    await quiesce();
    assert.equal(
      controller.ofType("ack").length + controller.ofType("request").length,
      acksBefore + 1,
    );
    assert.equal(started.length, 2);
  });

  test("never runs the handler twice for a job it is still processing, however long it takes", async () => {
    // The reference re-told the in-flight delivery on every resend tick.
    const { controller, started, clock, releaseNext } = gatedWorker({ resendInterval: 100 });
    controller.registered();
    controller.jobs(1, ["slow"]);
    await quiesce();
    for (let i = 0; i < 50; i++) {
      await clock.advanceAsync(100);
      // The controller answers re-registrations and resends, as it would.
      const last = controller.sent.at(-1);
      if (last?.type === "register") controller.registered();
      if (last?.type === "request" && last.resend) controller.jobs(1, ["slow"]);
    }
    assert.equal(started.length, 1);
    await releaseNext();
    assert.equal(
      controller.ofType("ack").at(-1)?.confirmed ?? controller.ofType("request").at(-1)?.confirmed,
      1,
    );
  });

  test("a rejected handler is retried on this worker after the resend interval, and reported", async () => {
    const clock = new SimulatedClock();
    let calls = 0;
    const worker = new WorkerEndpoint<string>({
      producer: "jobs",
      name: "w",
      clock,
      resendInterval: 1000,
      handler: () => {
        calls++;
        if (calls < 3) throw new Error(`attempt ${calls} failed`);
      },
    });
    const errors: number[] = [];
    worker.addEventListener("handler-error", (e: HandlerErrorEvent) => errors.push(e.attempt));
    const controller = new ScriptedController(worker);
    controller.registered();
    controller.jobs(1, ["j1"]);
    await quiesce();
    assert.equal(calls, 1);
    await clock.advanceAsync(1000);
    await quiesce();
    assert.equal(calls, 2);
    await clock.advanceAsync(1000);
    await quiesce();
    assert.equal(calls, 3);
    assert.deepEqual(errors, [1, 2]);
    const confirmed = [...controller.ofType("ack"), ...controller.ofType("request")].map((f) =>
      f.confirmed
    );
    assert.ok(confirmed.includes(1));
  });

  test("a job whose binding ended while running is not confirmed, and is not rerun if it returns", async () => {
    const { controller, started, releaseNext } = gatedWorker({ window: 4 });
    controller.registered("s1", "b1");
    controller.jobs(1, ["j1", "j2"]);
    await quiesce();
    // The controller ended the binding (and requeued j1, j2); the worker re-registers.
    controller.send({ type: "reset", session: "s2" });
    controller.registered("s2", "b2", 1);
    controller.jobs(1, ["j1", "j3"], "s2"); // j1 came back to this worker
    await quiesce();
    assert.equal(started.length, 1, "the new sub-flow waits for the running handler");
    await releaseNext(); // j1 (old binding) finishes
    assert.deepEqual(
      controller.ofType("ack").map((a) => a.session),
      [],
      "nothing confirmed for s1",
    );
    // j1 under s2 is confirmed from memory, without a second run; j3 runs.
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j3"]);
    await releaseNext();
    const confirmations = [...controller.ofType("ack"), ...controller.ofType("request")]
      .filter((f) => f.session === "s2").map((f) => f.confirmed);
    assert.equal(Math.max(...confirmations), 2);
  });

  test("is heard at least once per tick, and re-registers when the controller is quiet", async () => {
    const { controller, clock } = gatedWorker({ resendInterval: 1000 });
    controller.registered(); // the worker answers with a request
    let before = controller.sent.length;
    await clock.advanceAsync(1000); // it sent something during this interval: no heartbeat
    assert.equal(controller.sent.length, before);
    controller.jobs(1000, ["beyond-demand"]); // controller traffic the worker does not answer
    before = controller.sent.length;
    await clock.advanceAsync(1000); // sent nothing this interval: a heartbeat ack
    assert.deepEqual(controller.sent.slice(before).map((f) => f.type), ["ack"]);
    before = controller.sent.length;
    await clock.advanceAsync(1000); // no controller traffic since the last tick: re-register
    assert.deepEqual(controller.sent.slice(before).map((f) => f.type), ["register"]);
  });

  test("with silenceIntervals it closes a link the controller stopped answering", async () => {
    const clock = new SimulatedClock();
    const worker = new WorkerEndpoint({
      producer: "jobs",
      name: "w",
      clock,
      resendInterval: 1000,
      silenceIntervals: 3,
      handler: () => {},
    });
    const controller = new ScriptedController(worker);
    controller.registered();
    await clock.advanceAsync(3000);
    const before = controller.closedWith;
    await clock.advanceAsync(1000);
    assert.equal(before, undefined);
    assert.equal(controller.closedWith?.code, 4001);
  });

  test("close() closes the link, aborts the delivery signal and waits for the running handler", async () => {
    const { worker, controller, started, releaseNext } = gatedWorker();
    controller.registered();
    controller.jobs(1, ["j1"]);
    await quiesce();
    let closed = false;
    const closing = worker.close().then(() => (closed = true));
    await quiesce();
    assert.equal(controller.closedWith?.code, 1000);
    assert.equal(started[0].signal.aborted, true);
    assert.equal(closed, false);
    await releaseNext();
    await closing;
    assert.equal(closed, true);
  });
});
