import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  connectInProcess,
  type ControllerRestartedEvent,
  MemoryWorkQueue,
  QueueConflictError,
  QueueFencedError,
  type ReliableDeliveryFailedEvent,
  WorkerEndpoint,
  WorkPullingController,
  type WorkPullingControllerOptions,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { FaultyQueue } from "./support/faulty_queue.ts";
import { ManualProducer, quiesce, ScriptedWorker } from "./support/harness.ts";

/** A controller with a buffered producer and `workers` in-process workers recording what they ran. */
async function durableSystem(
  queue: FaultyQueue | MemoryWorkQueue,
  options: Partial<WorkPullingControllerOptions> & { workers?: number; window?: number } = {},
) {
  const clock = new SimulatedClock();
  const producer = new BufferedProducer<number>();
  const controller = new WorkPullingController({
    name: "jobs",
    producer,
    clock,
    queue,
    deliveryConfirmation: true,
    ...options,
  });
  const failures: ReliableDeliveryFailedEvent[] = [];
  const restarts: ControllerRestartedEvent[] = [];
  controller.addEventListener(
    "delivery-failed",
    (e: ReliableDeliveryFailedEvent) => failures.push(e),
  );
  controller.addEventListener("restarted", (e: ControllerRestartedEvent) => restarts.push(e));
  await controller.start();
  const handled: string[] = [];
  const workers = Array.from({ length: options.workers ?? 1 }, (_, i) => {
    const worker = new WorkerEndpoint<number>({
      producer: "jobs",
      name: `w${i}`,
      clock,
      window: options.window ?? 10,
      ackDelay: 0, // each confirmation at once: these tests follow the lane, not ack batching
      handler: (d) => void handled.push(d.messageId),
    });
    connectInProcess(controller, worker);
    return worker;
  });
  await quiesce();
  /** Let the lane, the links and the retries run in simulated time. */
  const run = async (ms = 0) => {
    for (let i = 0; i < 10; i++) await quiesce();
    if (ms > 0) await clock.advanceAsync(ms);
    for (let i = 0; i < 10; i++) await quiesce();
  };
  return { clock, producer, controller, failures, restarts, handled, workers, run };
}

describe("durable lane", () => {
  test("stores and accepts before the next credit, and confirms each job", async () => {
    const queue = new FaultyQueue({ batching: false });
    const s = await durableSystem(queue);
    const receipts = await Promise.all(
      ["a", "b"].map((id, n) => s.producer.submit(n, { messageId: id })),
    );
    await s.run();
    assert.deepEqual(receipts.map((r) => [r.messageId, r.seq]), [["a", 1], ["b", 2]]);
    assert.deepEqual(s.handled, ["a", "b"]);
    // Submitted in one turn, "a" and "b" answered the open grant together: both are stored,
    // then both accepted, before the next credit. Confirmations ride along with the next operation.
    assert.deepEqual(queue.calls, [
      "load",
      "store(a)",
      "store(b)",
      "accept(a)",
      "accept(b)",
      "confirm(a)",
      "confirm(b)",
    ]);
    assert.equal(queue.inner.size, 0, "accepted and confirmed jobs are compacted");
    await s.controller.close();
  });

  test("group commit: a Store or Accept carries the queued confirmations in one transaction", async () => {
    const queue = new FaultyQueue();
    const s = await durableSystem(queue, { workers: 2 });
    for (let round = 0; round < 5; round++) {
      // One job a turn: each answers a grant of its own while the earlier ones are confirmed.
      const receipts = [];
      for (const n of [1, 2, 3, 4]) {
        receipts.push(s.producer.submit(n, { messageId: `r${round}-${n}` }));
        await Promise.resolve();
      }
      await Promise.all(receipts);
      await s.run();
    }
    assert.equal(s.handled.length, 20);
    const commits = queue.calls.filter((c) => c.startsWith("commit"));
    const operations = 20 * 3;
    assert.ok(
      commits.length < operations * 0.7,
      `${commits.length} commits for ${operations} operations`,
    );
    const mixed = commits.filter((c) => {
      const [store, accept, confirm] = c.slice("commit(".length, -1).split("|");
      return (store !== "" || accept !== "") && confirm !== "";
    });
    assert.ok(mixed.length > 0, "a handshake step carried confirmations");
    assert.equal(queue.inner.size, 0);
    await s.controller.close();
  });

  test("a transient error is retried with backoff and nothing restarts", async () => {
    const queue = new FaultyQueue();
    const s = await durableSystem(queue, { queueRetryBackoff: 100 });
    queue.fail("commit", new Error("disk busy"), 2);
    const submitted = s.producer.submit(1, { messageId: "a" });
    await s.run(100);
    await s.run(200);
    const receipt = await submitted;
    assert.equal(receipt.seq, 1);
    await s.run();
    assert.deepEqual(s.handled, ["a"]);
    assert.equal(s.restarts.length, 0);
    assert.equal(s.failures.length, 0);
    await s.controller.close();
  });

  test("a hung backend call times out and is retried", async () => {
    const queue = new FaultyQueue();
    const s = await durableSystem(queue, { queueTimeout: 1000 });
    queue.hang("commit");
    const submitted = s.producer.submit(1, { messageId: "a" });
    await s.run(1000 + 100);
    assert.equal((await submitted).seq, 1);
    await s.run();
    assert.deepEqual(s.handled, ["a"]);
    await s.controller.close();
  });

  test("after a timed-out attempt whose write landed, the retried confirmations are no-ops", async () => {
    const queue = new FaultyQueue();
    const commit = queue.commit!;
    let lost = 0;
    (queue as { commit: typeof commit }).commit = async (epoch, batch, call) => {
      const result = await commit(epoch, batch, call);
      if (batch.confirm?.length && lost++ === 0) {
        // The write landed (the job is compacted) but its answer never arrives.
        return new Promise((_, reject) =>
          call?.signal?.addEventListener("abort", () => reject(call.signal!.reason), { once: true })
        );
      }
      return result;
    };
    const s = await durableSystem(queue, { queueTimeout: 1000 });
    await s.producer.submit(1, { messageId: "a" });
    await s.run();
    assert.deepEqual(s.handled, ["a"]);
    await s.run(1100);
    await s.producer.submit(2, { messageId: "b" });
    await s.run(2000);
    assert.deepEqual(s.handled, ["a", "b"]);
    assert.equal(
      s.failures.length,
      0,
      "no conflict for a repeated confirmation of a compacted job",
    );
    assert.equal(s.controller.state, "running");
    await s.controller.close();
  });

  test("exhausted retries restart the controller: new session, reload, re-dispatch, no failure event", async () => {
    const queue = new FaultyQueue();
    const s = await durableSystem(queue, { window: 2 });
    // job "a" is accepted and dispatched; the worker holds it.
    let release!: () => void;
    s.workers[0].close();
    const slow = new WorkerEndpoint<number>({
      producer: "jobs",
      name: "slow",
      clock: s.clock,
      ackDelay: 0,
      handler: (d) => new Promise<void>((r) => (s.handled.push(d.messageId), release = r)),
    });
    connectInProcess(s.controller, slow);
    await s.run();
    const receipt = await s.producer.submit(1, { messageId: "a" });
    await receipt.accepted;
    await s.run();
    assert.deepEqual(s.handled, ["a"]);
    const session = s.controller.session;
    // Its confirmation cannot be written: three attempts fail.
    queue.fail("commit", new Error("backend down"), 3);
    release();
    await s.run(100);
    await s.run(200);
    await s.run();
    assert.equal(s.restarts.length, 1);
    assert.equal(s.failures.length, 0);
    assert.notEqual(s.controller.session, session);
    assert.equal(s.controller.state, "running");
    // The reload re-dispatches "a" (its ConfirmMessage never landed); the worker remembers it ran
    // it and confirms without running it again; the producer hears the confirmation again.
    await s.run(2000);
    await s.run();
    assert.deepEqual(s.handled, ["a"]);
    assert.equal(queue.inner.size, 0);
    await s.controller.close();
  });

  test("a controller restart between Store and Accept loses nothing: the producer resubmits under the same MessageID", async () => {
    const queue2 = new FaultyQueue();
    const s2 = await durableSystem(queue2);
    let commits = 0;
    const commit = queue2.commit!;
    (queue2 as { commit: typeof commit }).commit = (epoch, batch, call) => {
      commits++;
      if (batch.accept?.length && commits < 6) return Promise.reject(new Error("accept fails"));
      return commit(epoch, batch, call);
    };
    const r2 = s2.producer.submit(7, { messageId: "job-7" });
    await s2.run(100);
    await s2.run(200);
    await s2.run();
    assert.equal(s2.restarts.length, 1, "the controller restarted after the accept failed 3 times");
    const stored = await r2;
    await s2.run(2000);
    await s2.run();
    assert.deepEqual(s2.handled, ["job-7"], "dispatched exactly once");
    assert.equal(stored.seq, 1, "the original store sequence");
    await stored.accepted;
    assert.equal(queue2.inner.size, 0);
    await s2.controller.close();
  });

  for (
    const [stage, operationOf] of [
      ["store", (q: FaultyQueue) => q.fail("commit", new QueueFencedError())],
      ["confirm", (q: FaultyQueue) => q.fail("confirmMessage", new QueueConflictError())],
    ] as const
  ) {
    test(`a terminal queue error on ${stage} publishes one failure and stops; the producer lives; respawn recovers`, async () => {
      const queue = new FaultyQueue({ batching: stage === "store" });
      const s = await durableSystem(queue);
      if (stage === "confirm") {
        await s.producer.submit(1, { messageId: "first" });
        await s.run();
        assert.deepEqual(s.handled, ["first"]);
        operationOf(queue);
        await s.producer.submit(2, { messageId: "second" });
      } else {
        operationOf(queue);
        s.producer.submit(1, { messageId: "first" });
      }
      await s.run();
      assert.equal(s.controller.state, "failed");
      assert.equal(s.failures.length, 1);
      assert.equal(s.failures[0].stage, stage);
      assert.ok(
        s.failures[0].error instanceof (stage === "store" ? QueueFencedError : QueueConflictError),
      );
      await s.run(5000);
      assert.equal(s.failures.length, 1);
      const later = s.producer.submit(3, { messageId: "later" }); // the producer still buffers
      await s.controller.respawn();
      await s.run(2000);
      await s.run();
      await later;
      assert.ok(s.handled.includes("later"));
      await s.controller.close();
    });
  }

  test("a failing load publishes exactly one failure event and start() rejects", async () => {
    const queue = new FaultyQueue();
    queue.fail("load", new Error("no database"), 10);
    const clock = new SimulatedClock();
    const controller = new WorkPullingController({
      name: "jobs",
      producer: new ManualProducer(),
      clock,
      queue,
    });
    const failures: ReliableDeliveryFailedEvent[] = [];
    controller.addEventListener(
      "delivery-failed",
      (e: ReliableDeliveryFailedEvent) => failures.push(e),
    );
    const started = controller.start().then(() => "started", (e: Error) => e.message);
    await clock.advanceAsync(100);
    await clock.advanceAsync(200);
    assert.equal(await started, "no database");
    assert.equal(failures.length, 1);
    assert.equal(failures[0].stage, "load");
    assert.deepEqual(queue.calls, ["load", "load", "load"]);
    await controller.close();
  });

  test("a reload re-dispatches accepted, unconfirmed jobs in store order; requeue writes nothing", async () => {
    const queue = new FaultyQueue();
    const clock = new SimulatedClock();
    const producer = new ManualProducer();
    const first = new WorkPullingController({ name: "jobs", producer, clock, queue });
    await first.start();
    const w = new ScriptedWorker(first, "w");
    w.register();
    w.request(0, 3);
    const { session, token } = producer.lastRequest;
    producer.port.produced({
      session,
      token,
      jobs: ["a", "b", "c"].map((id) => ({ messageId: id, payload: id })),
    });
    await quiesce();
    producer.port.storedAck({ session, token });
    await quiesce();
    assert.deepEqual(w.jobIds(), ["a", "b", "c"]);
    w.ack(1);
    await quiesce();
    const callsBefore = queue.calls.length;
    w.disconnect(); // requeue b, c
    await quiesce();
    assert.equal(queue.calls.length, callsBefore, "requeue writes nothing");
    // The process dies; a new controller loads the same queue and fences the first.
    const second = new WorkPullingController({
      name: "jobs",
      producer: new ManualProducer(),
      clock,
      queue,
    });
    await second.start();
    const w2 = new ScriptedWorker(second, "w2");
    w2.register();
    w2.request(0, 10);
    assert.deepEqual(w2.jobIds(), ["b", "c"]);
    await first.close();
    await second.close();
  });

  test("a queue that appends at the wrong sequence is a terminal conflict, not trusted", async () => {
    const inner = new MemoryWorkQueue();
    const queue = new FaultyQueue({ batching: false, inner });
    const store = queue.store.bind(queue);
    queue.store = async (epoch, request, call) => {
      const result = await store(epoch, request, call);
      return { ...result, seq: result.seq + 5 };
    };
    const s = await durableSystem(queue);
    s.producer.submit(1, { messageId: "a" });
    await s.run();
    assert.equal(s.failures.length, 1);
    assert.equal(s.failures[0].stage, "store");
    assert.ok(s.failures[0].error instanceof QueueConflictError);
    await s.controller.close();
  });
});

describe("lookahead", () => {
  /** A controller on `queue` with one worker (window 2) whose jobs run until released. */
  async function busySystem(
    queue: MemoryWorkQueue,
    options: Partial<WorkPullingControllerOptions> = {},
  ) {
    const clock = new SimulatedClock();
    const producer = new BufferedProducer<unknown>();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      clock,
      queue,
      ...options,
    });
    await controller.start();
    const running: string[] = [];
    const gates: (() => void)[] = [];
    const connect = () => {
      const worker = new WorkerEndpoint<unknown>({
        producer: "jobs",
        name: "w",
        clock,
        window: 2,
        handler: (d) =>
          new Promise<void>((resolve) => {
            running.push(d.messageId);
            gates.push(resolve);
          }),
      });
      connectInProcess(controller, worker);
      return worker;
    };
    /** Close `worker`, letting the jobs it holds finish. */
    const release = async (worker: WorkerEndpoint<unknown>) => {
      let closed = false;
      const closing = worker.close().then(() => (closed = true));
      while (!closed) {
        while (gates.length > 0) gates.shift()!();
        await quiesce();
      }
      await closing;
    };
    return { clock, producer, controller, running, gates, connect, release };
  }

  test("with a queue, the pool takes up to maxBatch jobs beyond the workers' demand, none without a worker", async () => {
    const queue = new MemoryWorkQueue();
    const s = await busySystem(queue);
    const receipts = Array.from({ length: 2_000 }, (_, n) => s.producer.submit(n));
    await quiesce();
    assert.equal(s.controller.stats().totals.accepted, 0, "no worker: the producer keeps its jobs");
    const worker = s.connect();
    for (let i = 0; i < 20; i++) await quiesce();
    assert.equal(s.running.length, 1, "the worker runs one job and holds its window of 2");
    assert.equal(
      s.controller.stats().pending,
      1_000,
      "the default lookahead (maxBatch) waits in the pool",
    );
    assert.equal(s.controller.stats().totals.accepted, 1_002);
    assert.equal(s.producer.buffered, 998);
    await s.release(worker);
    const { accepted, confirmed } = s.controller.stats().totals;
    await s.controller.close();
    // Taken-ahead jobs are durable: the next controller reloads them as accepted, unconfirmed work.
    const reloaded = await queue.load();
    assert.ok(accepted - confirmed >= 1_000);
    assert.equal(reloaded.state.unconfirmed.length, accepted - confirmed);
    void Promise.allSettled(receipts);
  });

  test("the pool refills as the workers take from it, and every job runs once", async () => {
    const s = await busySystem(new MemoryWorkQueue(), { lookahead: 5 });
    const receipts = Array.from(
      { length: 40 },
      (_, n) => s.producer.submit(n, { messageId: `j${n}` }),
    );
    const worker = s.connect();
    for (let i = 0; i < 20; i++) await quiesce();
    assert.equal(s.controller.stats().pending, 5);
    while (s.running.length < 40) {
      s.gates.shift()?.();
      for (let i = 0; i < 5; i++) await quiesce();
      assert.ok(s.controller.stats().pending <= 5, "never more than the lookahead waits");
    }
    await s.release(worker);
    await Promise.all(receipts);
    assert.deepEqual(s.running, Array.from({ length: 40 }, (_, n) => `j${n}`));
    await s.controller.close();
  });

  test("lookahead 0 keeps the reference credit: nothing waits in the pool while workers are busy", async () => {
    const s = await busySystem(new MemoryWorkQueue(), { lookahead: 0 });
    const receipts = Array.from({ length: 10 }, (_, n) => s.producer.submit(n));
    const worker = s.connect();
    for (let i = 0; i < 20; i++) await quiesce();
    assert.equal(s.running.length, 1);
    assert.equal(s.controller.stats().pending, 0);
    assert.equal(s.controller.stats().totals.accepted, 2);
    await s.release(worker);
    await s.controller.close();
    void Promise.allSettled(receipts);
  });

  test("large jobs are taken ahead only up to lookaheadBytes of payloads", async () => {
    const s = await busySystem(new MemoryWorkQueue(), { lookaheadBytes: 10_000 });
    const payload = "x".repeat(998); // 1,000 characters of JSON text
    const receipts = Array.from({ length: 100 }, () => s.producer.submit(payload));
    const worker = s.connect();
    for (let i = 0; i < 20; i++) await quiesce();
    assert.equal(s.running.length, 1);
    assert.equal(s.controller.stats().pending, 10, "10,000 characters of payloads wait");
    assert.equal(s.controller.stats().totals.accepted, 12);
    await s.release(worker);
    await s.controller.close();
    void Promise.allSettled(receipts);
  });

  test("without a queue the default is 0", async () => {
    const clock = new SimulatedClock();
    const producer = new ManualProducer();
    const controller = new WorkPullingController({ name: "jobs", producer, clock });
    await controller.start();
    const a = new ScriptedWorker(controller, "a");
    a.register();
    a.request(0, 2);
    assert.equal(producer.lastRequest.maxJobs, 2, "the grant is the free demand");
    await controller.close();
  });
});
