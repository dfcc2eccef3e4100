import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  type Delivery,
  type HandlerErrorEvent,
  RegistrationRefusedError,
  WorkerEndpoint,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { quiesce, ScriptedController } from "./support/harness.ts";

/** The default ack delay, ms. */
const ACK_DELAY = 5;

interface Gate {
  release(): void;
}

/**
 * A simulated clock whose time can also jump without firing any timer: what a process stopped
 * (SIGSTOP) and resumed, or an event loop blocked, sees.
 */
class FreezableClock extends SimulatedClock {
  #frozen = 0;

  override now(): number {
    return super.now() + this.#frozen;
  }

  /** `ms` pass while nothing runs. */
  freeze(ms: number): void {
    this.#frozen += ms;
  }
}

/** A worker whose handler completes only when the test releases it. */
function gatedWorker(
  options: {
    window?: number;
    resendInterval?: number;
    drainTimeout?: number;
    silenceIntervals?: number;
  } = {},
) {
  const clock = new FreezableClock();
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
  /** Let the oldest running handler resolve, and its confirmation go out (the ack delay). */
  const releaseNext = async () => {
    gates.shift()!.release();
    await quiesce();
    await clock.advanceAsync(ACK_DELAY);
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
    await clock.advanceAsync(ACK_DELAY);
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
      [...controller.ofType("ack"), ...controller.ofType("request")]
        .filter((f) => f.session === "s1" && f.confirmed > 0),
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

  test("a job completed under an earlier binding is confirmed without running again when it returns", async () => {
    const { controller, started, releaseNext } = gatedWorker({ window: 4 });
    controller.registered("s1", "b1");
    controller.jobs(1, ["j1"]);
    await quiesce();
    await releaseNext(); // j1 completes under b1; its confirmation is lost with the binding
    controller.registered("s1", "b2", 1); // a fresh sub-flow: j1 came back with j2
    controller.jobs(1, ["j1", "j2"]);
    await quiesce();
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j2"], "j1 ran once, j2 runs");
    await releaseNext();
    const confirmed = [...controller.ofType("ack"), ...controller.ofType("request")]
      .map((f) => f.confirmed);
    assert.equal(Math.max(...confirmed), 2, "both sequences of b2 are confirmed");
  });

  test("remembers only its recent completions: one older than 1,024 completions runs again", async () => {
    const clock = new SimulatedClock();
    const ran: string[] = [];
    const worker = new WorkerEndpoint<string>({
      producer: "jobs",
      name: "w",
      clock,
      window: 100,
      handler: (delivery) => void ran.push(delivery.messageId),
    });
    const controller = new ScriptedController(worker);
    controller.registered("s1", "b1");
    for (let seq = 1; seq <= 1100; seq += 100) {
      controller.jobs(seq, Array.from({ length: 100 }, (_, i) => `j${seq + i}`));
      await quiesce();
    }
    assert.equal(ran.length, 1100);
    controller.registered("s1", "b2", 1); // j1..j1100 completed under b1
    controller.jobs(1, ["j1100", "j76"]); // j1100 is recent; j76 is older than the last 1,024
    await quiesce();
    assert.deepEqual(ran.slice(1100), ["j76"]);
    // 1,024 more completions under b2: j1100 (b1) has left the memory too.
    for (let seq = 3; seq < 3 + 1024; seq += 32) {
      controller.jobs(seq, Array.from({ length: 32 }, (_, i) => `k${seq + i}`));
      await quiesce();
    }
    assert.equal(ran.length, 1100 + 1 + 1024);
    controller.jobs(1027, ["j1100"]);
    await quiesce();
    assert.equal(ran.at(-1), "j1100");
  });

  test("is heard at least once per tick, and re-registers when the controller is quiet", async () => {
    const { controller, clock } = gatedWorker({ resendInterval: 1000 });
    controller.registered(); // the worker answers with a request
    let before = controller.sent.length;
    await clock.advanceAsync(1000); // it sent something during this interval: no heartbeat
    assert.equal(controller.sent.length, before);
    controller.jobs(1000, ["beyond-demand"]); // controller traffic the worker does not answer
    before = controller.sent.length;
    // Sent nothing this interval: a heartbeat. Idle with open demand and no job all interval,
    // the heartbeat asks for a resend (a lost jobs frame cannot stall the worker).
    await clock.advanceAsync(1000);
    assert.deepEqual(
      controller.sent.slice(before).map((f) => [f.type, f.type === "request" && f.resend]),
      [["request", true]],
    );
    before = controller.sent.length;
    await clock.advanceAsync(1000); // no controller traffic since the last tick: re-register
    assert.deepEqual(controller.sent.slice(before).map((f) => f.type), ["register"]);
  });

  test("with silenceIntervals it closes a link the controller stopped answering", async () => {
    const { clock, controller } = gatedWorker({ resendInterval: 1000, silenceIntervals: 3 });
    controller.registered();
    await clock.advanceAsync(3000);
    const before = controller.closedWith;
    await clock.advanceAsync(1000);
    assert.equal(before, undefined);
    assert.equal(controller.closedWith?.code, 4001);
  });

  test("keeps no timer once its link is gone, and ticks again on the next link", async () => {
    // Defect: the tick re-armed itself after the link closed, so a process whose in-process
    // controller had closed never exited.
    const { clock, worker, controller } = gatedWorker({ resendInterval: 1000 });
    controller.registered();
    await clock.advanceAsync(1000);
    assert.ok(clock.pendingTimers > 0, "a live link ticks");
    controller.close();
    await clock.advanceAsync(1000);
    assert.equal(clock.pendingTimers, 0);
    const again = new ScriptedController(worker);
    assert.ok(clock.pendingTimers > 0, "a new link ticks again");
    await clock.advanceAsync(1000);
    assert.equal(again.ofType("register").length, 2, "re-registered on its tick");
  });

  test("close() drains: hands back buffered jobs at once, confirms the running one, then closes", async () => {
    // Defect: close() closed the link before the running handler finished and sent no final
    // ack, so finished work was requeued and run again elsewhere.
    const { worker, controller, started, releaseNext } = gatedWorker({ window: 10 });
    controller.registered("s1", "b1", 1, ["release"]);
    controller.jobs(1, ["j1", "j2", "j3", "j4", "j5"]);
    await quiesce();
    await releaseNext(); // j1 done
    await releaseNext(); // j2 done; j3 running, j4 and j5 buffered
    let closed = false;
    const closing = worker.close().then(() => (closed = true));
    await quiesce();
    assert.deepEqual(controller.ofType("release").at(-1), {
      type: "release",
      session: "s1",
      nonce: controller.registration.nonce,
      confirmed: 2,
      upTo: 3,
    }, "j4 and j5 go back at once; j3 is kept");
    assert.equal(controller.closedWith?.code, undefined, "the link stays open while j3 runs");
    assert.equal(started[2].signal.aborted, false);
    await releaseNext(); // j3 finishes
    await closing;
    assert.equal(closed, true);
    const last = controller.sent.at(-1)!;
    assert.deepEqual([last.type, "confirmed" in last && last.confirmed], ["ack", 3]);
    assert.equal(controller.closedWith?.code, 1000);
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j2", "j3"], "j4, j5 never start");
  });

  test("close() aborts a handler that outlives the drain time, and does not confirm it", async () => {
    const { worker, controller, started, clock } = gatedWorker({ drainTimeout: 1000 });
    controller.registered();
    controller.jobs(1, ["j1"]);
    await quiesce();
    const closing = worker.close();
    await clock.advanceAsync(1000);
    await closing;
    assert.equal(started[0].signal.aborted, true);
    assert.equal(controller.closedWith?.code, 1000);
    assert.equal(
      [...controller.ofType("ack"), ...controller.ofType("request")].some((f) => f.confirmed > 0),
      false,
    );
  });

  test("a worker without a live binding starts no buffered job", async () => {
    // Defect: while disconnected, or after close code 4001 told it its jobs were requeued, a
    // worker kept running its buffered jobs (most of a chaos soak's duplicates).
    const { worker, controller, started, releaseNext } = gatedWorker({ window: 10 });
    controller.registered("s1", "b1");
    controller.jobs(1, ["j1", "j2", "j3"]);
    await quiesce();
    controller.close(); // the link drops while j1 runs
    await releaseNext();
    assert.deepEqual(started.map((d) => d.messageId), ["j1"], "j2 and j3 were given to others");
    // Reconnected and the binding survived (a reconnect grace): it resumes where it was.
    const again = new ScriptedController(worker);
    again.registered("s1", "b1", 2);
    again.jobs(2, ["j2", "j3"]);
    await quiesce();
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j2"]);
    assert.equal(again.ofType("request")[0].confirmed, 1, "j1's completion reaches the controller");
  });

  test("after a reconnect to a new binding the old buffer is dropped", async () => {
    const { worker, controller, started, releaseNext } = gatedWorker({ window: 10 });
    controller.registered("s1", "b1");
    controller.jobs(1, ["j1", "j2", "j3"]);
    await quiesce();
    controller.close();
    await releaseNext();
    const again = new ScriptedController(worker);
    again.registered("s1", "b2", 1); // the binding ended: a fresh sub-flow
    again.jobs(1, ["j9"]);
    await quiesce();
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j9"]);
  });

  test("confirms a finished job within the ack delay even while its buffer holds jobs", async () => {
    // Defect: the ack waited for the buffer to drain or for the half-window top-up, so up to
    // window/2 finished jobs stayed unconfirmed (and ran again after a worker crash).
    const { controller, releaseNext } = gatedWorker({ window: 10 });
    controller.registered();
    controller.jobs(1, ["j1", "j2", "j3"]);
    await quiesce();
    await releaseNext(); // j1 finishes; j2 starts; j3 buffered
    assert.deepEqual(controller.ofType("ack").map((a) => a.confirmed), [1]);
    await releaseNext();
    assert.deepEqual(controller.ofType("ack").map((a) => a.confirmed), [1, 2]);
  });

  test("completions within the ack delay share one cumulative ack", async () => {
    const { clock, controller } = ackingWorker(100, 10);
    controller.registered();
    controller.jobs(1, ["j1", "j2", "j3", "j4", "j5"]);
    await quiesce();
    // All five finished at once: one ack when the delay is up, none before.
    assert.deepEqual(controller.ofType("ack").map((a) => a.confirmed), []);
    await clock.advanceAsync(9);
    assert.deepEqual(controller.ofType("ack").map((a) => a.confirmed), []);
    await clock.advanceAsync(1);
    assert.deepEqual(controller.ofType("ack").map((a) => a.confirmed), [5]);
    await clock.advanceAsync(10);
    assert.deepEqual(controller.ofType("ack").map((a) => a.confirmed), [5], "nothing left to ack");
  });

  test("a worker left idle after its top-up request waits the ack delay to confirm, and a request carries it first", async () => {
    // An ack sent right behind a request can wait for the request's TCP ACK (Nagle's algorithm in
    // Deno's WebSocket client) while the controller, short of demand, sends nothing: no ack then.
    const { clock, controller } = ackingWorker(4, 5);
    controller.registered();
    controller.jobs(1, ["j1", "j2", "j3"]);
    await quiesce();
    // After j2 at most half the window remained: a top-up request (confirmed 2). j3 emptied the
    // buffer: its ack waits.
    const topUps = () => controller.ofType("request").slice(1).map((r) => r.confirmed); // 1: demand
    assert.deepEqual(topUps(), [2]);
    assert.deepEqual(controller.ofType("ack"), []);
    controller.jobs(4, ["j4"]);
    await quiesce();
    // j4 brought the window down again: the request confirms j3 and j4; nothing is left to ack.
    assert.deepEqual(topUps(), [2, 4]);
    await clock.advanceAsync(5);
    assert.deepEqual(controller.ofType("ack"), []);
  });

  test("a job completed after a top-up request is acked the ack delay after that request", async () => {
    // The ack timer set before the request is kept (no timer per request), so when it fires it
    // waits out the rest of the delay after the request.
    const { clock, controller } = ackingWorker(4, 5);
    controller.registered();
    controller.jobs(1, ["j1"]); // 3 of 4 still granted: its ack waits (due at 5 ms)
    await quiesce();
    await clock.advanceAsync(3);
    controller.jobs(2, ["j2"]); // half the window left: a top-up request confirms j1 and j2
    await quiesce();
    controller.jobs(3, ["j3"]); // 3 of 6 still granted: its ack waits
    await quiesce();
    const topUps = () => controller.ofType("request").slice(1).map((r) => r.confirmed);
    assert.deepEqual(topUps(), [2]);
    await clock.advanceAsync(4); // 7 ms: 4 ms after the request
    assert.deepEqual(controller.ofType("ack"), []);
    await clock.advanceAsync(1); // 8 ms: the delay after the request is up
    assert.deepEqual(controller.ofType("ack").map((a) => a.confirmed), [3]);
    await clock.advanceAsync(10);
    assert.deepEqual(controller.ofType("ack").map((a) => a.confirmed), [3], "nothing left to ack");
  });

  test("a final refusal closes the endpoint with a typed error; a retriable one does not", () => {
    const { worker, controller } = gatedWorker();
    const refusals: RegistrationRefusedError[] = [];
    worker.addEventListener("refused", (event) => refusals.push(event.error));
    controller.send({
      type: "refused",
      nonce: controller.registration.nonce,
      reason: "already-bound",
      retry: true,
      detail: "try again",
    });
    assert.equal(refusals.length, 1);
    assert.equal(worker.closed, false, "a retriable refusal keeps the endpoint");
    refusals.length = 0;
    controller.send({
      type: "refused",
      nonce: "another-nonce",
      reason: "stale-incarnation",
      retry: false,
      detail: "old",
    });
    assert.equal(refusals.length, 0, "a refusal of another registration is ignored");
    controller.send({
      type: "refused",
      nonce: controller.registration.nonce,
      reason: "stale-incarnation",
      retry: false,
      detail: "a newer start of w registered",
    });
    assert.equal(refusals[0].reason, "stale-incarnation");
    assert.ok(refusals[0] instanceof RegistrationRefusedError);
    assert.equal(worker.closed, true);
    assert.equal(controller.closedWith?.code, 1000);
  });

  test("announces its features and leaves an ended binding when told", async () => {
    const { controller, started, releaseNext } = gatedWorker({ window: 10 });
    assert.deepEqual(controller.registration.features, [
      "refused",
      "unbound",
      "release",
      "outcomes",
      "heard",
    ]);
    controller.registered("s1", "b1", 1, ["unbound"]);
    controller.jobs(1, ["j1", "j2"]);
    await quiesce();
    const registrations = controller.ofType("register").length;
    controller.send({ type: "unbound", session: "s1", binding: "b1", reason: "illegal-demand" });
    assert.equal(started[0].signal.aborted, true, "the running job was given to another worker");
    assert.equal(controller.ofType("register").length, registrations + 1, "binds afresh");
    await releaseNext();
    assert.deepEqual(started.map((d) => d.messageId), ["j1"]);
  });
});

describe("worker endpoint and feature heard", () => {
  test("a heard frame changes nothing: the link stays open and the jobs run on", async () => {
    const { controller, started, releaseNext } = gatedWorker({ window: 10 });
    controller.registered("s1", "b1", 1, ["heard"]);
    controller.jobs(1, ["j1", "j2"]);
    await quiesce();
    const sent = controller.sent.length;
    controller.send({ type: "heard" });
    await quiesce();
    assert.equal(controller.closedWith, undefined, "the link stays open");
    assert.equal(controller.sent.length, sent, "nothing is sent in reply");
    await releaseNext();
    await releaseNext();
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j2"]);
  });
});

describe("worker endpoint after a freeze (rule 7)", () => {
  test("a jobs frame read after the process was stopped starts nothing until a new registration is answered", async () => {
    const { clock, controller, started, releaseNext } = gatedWorker({ window: 6 });
    controller.registered("s1", "b1", 1);
    const firstNonce = controller.registration.nonce;
    clock.freeze(10_000); // stopped past the controller's silence bound, resumed
    controller.jobs(1, ["j1", "j2"]);
    await quiesce();
    assert.equal(started.length, 0, "no job started on a binding that may have ended");
    assert.notEqual(controller.registration.nonce, firstNonce, "registered again");
    controller.registered("s1", "b1", 1); // the binding survived
    await quiesce();
    assert.deepEqual(started.map((d) => d.messageId), ["j1"]);
    await releaseNext();
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j2"]);
  });

  test("after a job finishes through a freeze, the buffered ones wait for a new registration; a new session drops them", async () => {
    const { clock, controller, started, releaseNext } = gatedWorker({ window: 6 });
    controller.registered("s1", "b1", 1);
    controller.jobs(1, ["j1", "j2", "j3"]);
    await quiesce();
    assert.deepEqual(started.map((d) => d.messageId), ["j1"]);
    const registrations = controller.ofType("register").length;
    clock.freeze(10_000); // j1's handler ran through a long stop
    await releaseNext();
    assert.deepEqual(started.map((d) => d.messageId), ["j1"], "j2 waits");
    assert.equal(controller.ofType("register").length, registrations + 1);
    controller.registered("s2", "b7", 1); // the controller restarted meanwhile
    await quiesce();
    assert.deepEqual(started.map((d) => d.messageId), ["j1"], "the old session's jobs are dropped");
  });

  test("an endpoint whose event loop keeps running (its ticks go on) never counts as frozen", async () => {
    const { clock, controller, started, releaseNext } = gatedWorker({ window: 6 });
    controller.registered("s1", "b1", 1);
    controller.jobs(1, ["j1", "j2"]);
    await quiesce();
    await clock.advanceAsync(60_000); // j1 runs for a minute; ticks go on
    await releaseNext();
    assert.deepEqual(started.map((d) => d.messageId), ["j1", "j2"], "j2 starts at once");
  });
});

/** An endpoint with a no-op handler, `window` and `ackDelay` on a simulated clock, and its controller. */
function ackingWorker(window: number, ackDelay: number) {
  const clock = new SimulatedClock();
  const worker = new WorkerEndpoint<string>({
    producer: "jobs",
    name: "w",
    clock,
    window,
    ackDelay,
    handler: () => {},
  });
  return { clock, controller: new ScriptedController(worker) };
}
