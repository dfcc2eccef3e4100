/**
 * The backlog of a job queue (in memory, simulated clock; one test on the real clock): jobs are
 * taken with no worker online, run when workers join, in priority order, never before they are
 * due; the backlog is bounded; a job's state is visible throughout; invalid batches change nothing.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BacklogFullError,
  connectInProcess,
  JobQueue,
  MemoryJobStore,
  type QueueBatch,
  WorkerEndpoint,
} from "../mod.ts";
import { BacklogProducer } from "../src/backlog/backlog_producer.ts";
import { planJob } from "../src/lifecycle/job_options.ts";
import { JobSystem } from "./support/job_harness.ts";
import { waitFor } from "./support/waiting.ts";

describe("backlog", () => {
  test("takes jobs while no worker is online; they run when one joins", async () => {
    const s = new JobSystem();
    await s.queue.start();
    const receipts = await s.queue.addMany(
      [1, 2, 3].map((n) => ({ payload: n, messageId: `j${n}` })),
    );
    assert.deepEqual(receipts.map((r) => [r.job.id, r.job.state, r.created]), [
      ["j1", "waiting", true],
      ["j2", "waiting", true],
      ["j3", "waiting", true],
    ]);
    await s.run(1000);
    assert.deepEqual(s.ran(), [], "no worker, nothing runs");
    s.worker("w1");
    await s.until(async () => (await s.state("j3")) === "completed", "j3 completed");
    assert.deepEqual(s.ran(), ["j1", "j2", "j3"]);
    await s.close();
  });

  test("a resubmission answers with the job's state and creates nothing", async () => {
    const s = new JobSystem();
    await s.queue.start();
    const first = await s.queue.add("x", { messageId: "same" });
    const again = await s.queue.add("y", { messageId: "same" });
    assert.equal(first.created, true);
    assert.equal(again.created, false);
    assert.equal(again.job.state, "waiting");
    s.worker("w1");
    await s.until(async () => (await s.state("same")) === "completed", "completed");
    const late = await s.queue.add("z", { messageId: "same" });
    assert.deepEqual([late.created, late.job.state], [false, "completed"]);
    await s.run(2000);
    assert.deepEqual(s.ran(), ["same"], "it ran once");
    await s.close();
  });

  test("higher priority first, FIFO within a priority", async () => {
    const s = new JobSystem();
    await s.queue.start();
    await s.queue.addMany([
      { payload: 0, messageId: "low-1", priority: -5 },
      { payload: 0, messageId: "mid-1" },
      { payload: 0, messageId: "high-1", priority: 7 },
      { payload: 0, messageId: "mid-2" },
      { payload: 0, messageId: "high-2", priority: 7 },
      { payload: 0, messageId: "low-2", priority: -5 },
    ]);
    s.worker("w1", () => {}, 1); // window 1: takes one job at a time, so order is visible
    await s.until(() => s.runs.length === 6, "six runs");
    assert.deepEqual(s.ran(), ["high-1", "high-2", "mid-1", "mid-2", "low-1", "low-2"]);
    await s.close();
  });

  test("a job added while the workers are busy overtakes lower priorities not yet running", async () => {
    const s = new JobSystem();
    await s.queue.start();
    await s.queue.addMany([1, 2, 3, 4].map((n) => ({ payload: n, messageId: `low-${n}` })));
    const gates: (() => void)[] = [];
    s.worker("w1", () => new Promise<void>((resolve) => gates.push(resolve)), 1);
    await s.until(() => s.runs.length === 1, "low-1 running");
    // The queue took only what the worker could run: the rest wait in the store, where a later
    // job's priority still counts (a controller lookahead would have taken them already).
    assert.equal(s.queue.controller.stats().pending, 0);
    await s.queue.add(0, { messageId: "high", priority: 5 });
    while (s.runs.length < 5) {
      gates.shift()?.();
      await s.run(1);
    }
    assert.deepEqual(s.ran(), ["low-1", "high", "low-2", "low-3", "low-4"]);
    gates.shift()?.();
    await s.close();
  });

  test("delayed jobs run at their due time, never before, and join their priority when due", async () => {
    const s = new JobSystem();
    await s.queue.start();
    const start = s.clock.now();
    await s.queue.addMany([
      { payload: 0, messageId: "later", delay: 5_000, priority: 9 },
      { payload: 0, messageId: "at", runAt: start + 2_000 },
      { payload: 0, messageId: "now" },
    ]);
    assert.equal((await s.queue.get("later"))?.state, "scheduled");
    assert.equal((await s.queue.get("at"))?.runAt, start + 2_000);
    s.worker("w1");
    await s.until(() => s.runs.length === 3, "three runs", 10_000);
    const at = Object.fromEntries(s.runs.map((run) => [run.messageId, run.at - start]));
    assert.ok(at.now <= 10, `"now" ran at ${at.now} ms`);
    assert.ok(at.at >= 2_000 && at.at <= 2_100, `"at" ran at ${at.at} ms`);
    assert.ok(at.later >= 5_000 && at.later <= 5_100, `"later" ran at ${at.later} ms`);
    await s.close();
  });

  test("on the real clock too, delayed jobs start after their due time, not 100 ms later", async () => {
    // The store's timer to the next due job, on the wall clock and real timers: nothing polls.
    const queue = new JobQueue({ name: "jobs", store: new MemoryJobStore() });
    await queue.start();
    const started = new Map<string, number>();
    const worker = new WorkerEndpoint<unknown>({
      producer: "jobs",
      name: "w1",
      handler: ({ messageId }) => void started.set(messageId, Date.now()),
    });
    const link = connectInProcess(queue.controller, worker);
    try {
      const receipts = await queue.addMany([
        { payload: 0, messageId: "d150", delay: 150 },
        { payload: 0, messageId: "d400", delay: 400 },
        { payload: 0, messageId: "at250", runAt: Date.now() + 250 },
      ]);
      await waitFor(() => started.size === 3, "three delayed jobs to start", 10_000);
      for (const { job } of receipts) {
        const late = started.get(job.id)! - job.runAt!;
        assert.ok(late >= 0, `${job.id} started ${-late} ms early`);
        assert.ok(late <= 100, `${job.id} started ${late} ms late`);
      }
    } finally {
      link.close();
      await worker.close();
      await queue.close();
    }
  });

  test("beyond maxBacklog a batch is refused whole; the backlog accepts again once it drains", async () => {
    const s = new JobSystem({ maxBacklog: 3 });
    await s.queue.start();
    await s.queue.addMany([{ payload: 1, messageId: "a" }, { payload: 2, messageId: "b" }]);
    await assert.rejects(
      s.queue.addMany([{ payload: 3, messageId: "c" }, { payload: 4, messageId: "d" }]),
      (error) => error instanceof BacklogFullError && error.limit === 3 && error.size === 2,
    );
    assert.equal(await s.queue.get("c"), undefined, "nothing of the refused batch was stored");
    const known = await s.queue.addMany([{ payload: 1, messageId: "a" }]);
    assert.equal(known[0].created, false, "known jobs add nothing and are not refused");
    s.worker("w1");
    await s.until(async () => (await s.state("b")) === "completed", "the backlog drained");
    const accepted = await s.queue.addMany([{ payload: 3, messageId: "c" }, {
      payload: 4,
      messageId: "d",
    }]);
    assert.deepEqual(accepted.map((r) => r.created), [true, true]);
    await s.close();
  });

  test("maxBacklog counts a MessageID repeated in a batch once", async () => {
    const s = new JobSystem({ maxBacklog: 3 });
    await s.queue.start();
    await s.queue.add(1, { messageId: "a" });
    // Four jobs, two new MessageIDs: the backlog goes to 3, its limit.
    const receipts = await s.queue.addMany(["b", "c", "b", "a"].map((id) => ({
      payload: id,
      messageId: id,
    })));
    assert.deepEqual(receipts.map((r) => [r.job.id, r.created]), [
      ["b", true],
      ["c", true],
      ["b", false],
      ["a", false],
    ]);
    await assert.rejects(
      s.queue.addMany(["d", "d"].map((id) => ({ payload: id, messageId: id }))),
      (error) => error instanceof BacklogFullError && error.size === 3 && error.adding === 1,
    );
    assert.equal(await s.queue.get("d"), undefined);
    await s.close();
  });

  test("a job's status through scheduled, waiting, active and completed", async () => {
    const s = new JobSystem();
    await s.queue.start();
    let release!: () => void;
    const start = s.clock.now();
    await s.queue.add({ x: 1 }, { messageId: "j", delay: 1000 });
    const states: string[] = [];
    s.queue.addEventListener("job", (event) => states.push(event.job.state));
    assert.deepEqual(await s.queue.get("j"), {
      id: "j",
      state: "scheduled",
      attempts: 0,
      priority: 0,
      enqueuedAt: start,
      runAt: start + 1000,
    });
    await s.run(999);
    assert.equal(await s.state("j"), "scheduled");
    await s.run(1);
    assert.equal(await s.state("j"), "waiting", "due, and no worker online");
    s.worker("w1", () => new Promise<void>((resolve) => (release = resolve)));
    await s.until(() => s.runs.length === 1, "started");
    const active = await s.queue.get("j");
    assert.deepEqual([active?.state, active?.attempts, active?.worker], ["active", 1, "w1"]);
    assert.equal(active?.startedAt, start + 1000);
    const releasedAt = s.clock.now();
    release();
    await s.until(async () => (await s.state("j")) === "completed", "completed");
    const done = await s.queue.get("j");
    assert.ok(done!.finishedAt! >= releasedAt && done!.finishedAt! <= s.clock.now());
    assert.equal(done?.worker, "w1");
    assert.deepEqual(states, ["active", "completed"]);
    await s.close();
  });

  test("an invalid batch is refused whole with an error naming the field", async () => {
    const s = new JobSystem();
    await s.queue.start();
    const cases: [unknown[], RegExp][] = [
      [[{ payload: 1 }, { payload: 2, priority: 1.5 }], /jobs\.1\.priority/],
      [[{ payload: 1, delay: -1 }], /jobs\.0\.delay/],
      [[{ payload: 1, delay: 10, runAt: 5 }], /jobs\.0\.runAt/],
      [[{ payload: 1 }, { payload: undefined }], /jobs\.1\.payload/],
      [[{ payload: 1, messageId: "" }], /jobs\.0\.messageId/],
      [[{ payload: 1, attempts: 0 }], /jobs\.0\.attempts/],
      [[{ payload: 1, backoff: { type: "linear", delay: 1 } }], /jobs\.0\.backoff\.type/],
      [[{ payload: 1, timeout: "soon" }], /jobs\.0\.timeout/],
    ];
    for (const [batch, field] of cases) {
      await assert.rejects(
        // deno-lint-ignore no-explicit-any
        s.queue.addMany(batch as any),
        (error: Error) => field.test(error.message),
        String(field),
      );
    }
    assert.deepEqual(s.queue.stats().backlog.waiting, 0, "nothing was stored");
    await s.close();
  });

  test("a job taken from the backlog needs no Accept: no commit carries one", async () => {
    const s = new JobSystem();
    const batches: QueueBatch[] = [];
    const commit = s.store.commit.bind(s.store);
    s.store.commit = (epoch, batch, options) => {
      batches.push(batch);
      return commit(epoch, batch, options);
    };
    await s.queue.start();
    await s.queue.addMany(Array.from({ length: 40 }, (_, n) => ({ payload: n })));
    s.worker("w1", () => {}, 10);
    await s.until(() => s.queue.controller.stats().totals.confirmed === 40, "40 confirmed");
    await s.until(() => s.queue.stats().backlog.active === 0, "every try stored");
    assert.equal(s.runs.length, 40);
    // Storing a job taken from the store's backlog accepted it in the same write: no commit
    // carries an Accept. Without `accepted` on the store results every stored batch would.
    assert.ok(batches.some((b) => b.store?.jobs.length), "jobs were stored");
    assert.deepEqual(batches.filter((b) => b.accept?.length), []);
    await s.close();
  });

  test("the backlog producer answers a grant in the same turn when the store is idle", async () => {
    const store = new MemoryJobStore();
    await store.load();
    await store.enqueue(["a", "b", "c"].map((id) => ({ id, payload: "1", plan: planJob({}, 0) })));
    const answers: string[][] = [];
    const producer = new BacklogProducer(store);
    producer.attach({
      produced: (message) =>
        answers.push("jobs" in message ? message.jobs.map((job) => job.messageId) : []),
      storedAck: () => {},
      maxPayloadBytes: 1024,
      deliveryConfirmation: false,
    });
    producer.onRequestNext({ session: "s1", token: "t1", maxJobs: 2 });
    assert.deepEqual(answers, [["a", "b"]], "answered before any await");
    const jobs = [{ messageId: "a", seq: 1 }, { messageId: "b", seq: 2 }];
    producer.onStored({ session: "s1", token: "t1", jobs });
    producer.onAccepted({ session: "s1", token: "t1" });
    // While another call runs, the grant waits its turn and is answered after it.
    const adding = store.enqueue([{ id: "d", payload: "1", plan: planJob({}, 0) }]);
    producer.onRequestNext({ session: "s1", token: "t2", maxJobs: 5 });
    assert.equal(answers.length, 1);
    await adding;
    await waitFor(() => answers.length === 2, "the second answer");
    assert.deepEqual(answers[1], ["c", "d"]);
  });

  test("a job taken from the backlog is stored accepted; one from elsewhere is not", async () => {
    const store = new MemoryJobStore();
    const { epoch } = await store.load();
    await store.enqueue([{ id: "a", payload: "1", plan: planJob({}, 0) }]);
    await store.take(10);
    const { stored } = await store.commit(epoch, {
      store: {
        firstSeq: 1,
        jobs: [{ messageId: "a", payload: "1" }, { messageId: "x", payload: "2" }],
      },
    });
    assert.deepEqual(stored.map((result) => result.accepted), [true, undefined]);
  });

  test("takeNow answers at once only when no other call is running or waiting", async () => {
    const store = new MemoryJobStore();
    await store.load();
    await store.enqueue([{ id: "a", payload: "1", plan: planJob({}, 0) }]);
    const adding = store.enqueue([{ id: "b", payload: "2", plan: planJob({}, 0) }]);
    assert.equal(store.takeNow(10), undefined, "an enqueue is still running");
    await adding;
    assert.deepEqual(store.takeNow(1)?.map((job) => job.messageId), ["a"]);
    assert.deepEqual((await store.take(10)).map((job) => job.messageId), ["b"]);
    assert.deepEqual(store.takeNow(10), [], "nothing is due");
  });
  test("a store tells its listener only the changes it follows", async () => {
    const store = new MemoryJobStore();
    const { epoch } = await store.load();
    const told: string[] = [];
    const followed = new Set(["b"]);
    store.listen({
      ready: () => {},
      changed: (job) => told.push(`${job.id}:${job.state}`),
      follows: (id) => followed.has(id),
    });
    await store.enqueue(["a", "b"].map((id) => ({ id, payload: "1", plan: planJob({}, 0) })));
    await store.take(10);
    await store.commit(epoch, {
      store: {
        firstSeq: 1,
        jobs: [{ messageId: "a", payload: "1" }, { messageId: "b", payload: "1" }],
      },
    });
    followed.add("a");
    await store.commit(epoch, { confirm: ["a", "b"] });
    assert.deepEqual(told, ["b:waiting", "b:active", "a:completed", "b:completed"]);
  });

  test("job events go to listeners added at any time; results come without one", async () => {
    const s = new JobSystem();
    await s.queue.start();
    s.worker("w1");
    const first = await s.queue.add(1, { messageId: "quiet" });
    await s.until(async () => (await s.state("quiet")) === "completed", "quiet completed");
    assert.equal((await first.finished).state, "completed", "a waiter needs no listener");
    const states: string[] = [];
    const listener = (event: { job: { id: string; state: string } }) =>
      states.push(`${event.job.id}:${event.job.state}`);
    s.queue.addEventListener("job", listener);
    await s.queue.add(2, { messageId: "heard" });
    await s.until(async () => (await s.state("heard")) === "completed", "heard completed");
    assert.deepEqual(states, ["heard:waiting", "heard:active", "heard:completed"]);
    s.queue.removeEventListener("job", listener);
    await s.queue.add(3, { messageId: "after" });
    await s.until(async () => (await s.state("after")) === "completed", "after completed");
    assert.equal(states.length, 3, "a removed listener hears nothing more");
    await s.close();
  });
  test("a job watcher is told every change without events; a throwing one is contained", async () => {
    const errors: unknown[] = [];
    const logger = {
      error: (_message: string, error?: unknown) => void errors.push(error),
      warn: () => {},
      info: () => {},
      debug: () => {},
    };
    const s = new JobSystem({}, { logger });
    await s.queue.start();
    const seen: string[] = [];
    s.queue.watchJobs(() => {
      throw new Error("a watcher bug");
    });
    const stop = s.queue.watchJobs((job, previous) =>
      seen.push(`${job.id}:${previous ?? "new"}->${job.state}`)
    );
    s.worker("w1");
    await s.queue.add(1, { messageId: "w" });
    await s.until(async () => (await s.state("w")) === "completed", "w completed");
    assert.deepEqual(seen, ["w:new->waiting", "w:waiting->active", "w:active->completed"]);
    assert.equal(errors.length, 3, "the throwing watcher was logged once a change");
    stop();
    await s.queue.add(2, { messageId: "x" });
    await s.until(async () => (await s.state("x")) === "completed", "x completed");
    assert.equal(seen.length, 3, "a stopped watcher hears nothing more");
    await s.close();
  });
  test("a receipt shows its job and waits only when asked; one written as JSON waits for nothing", async () => {
    const s = new JobSystem({ defaults: { attempts: 1 } });
    await s.queue.start();
    s.worker("w1", () => {
      throw new Error("always");
    });
    const [receipt] = await s.queue.addMany([{ payload: 1, messageId: "doomed" }]);
    // Written as JSON (a log line, an HTTP answer), a receipt is its job: no wait is started, so a
    // job that ends dead leaves no rejected promise behind.
    assert.deepEqual(JSON.parse(JSON.stringify(receipt)), {
      job: JSON.parse(JSON.stringify(receipt.job)),
      created: true,
    });
    await s.until(async () => (await s.state("doomed")) === "dead", "doomed is dead");
    assert.equal(receipt.finished, receipt.finished, "one wait, however often asked");
    assert.equal((await receipt.finished).state, "dead");
    await assert.rejects(receipt.result, { name: "JobFailedError" });
    await s.close();
  });
});
