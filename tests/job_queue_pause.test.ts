/**
 * Pausing a job queue: no new try starts while jobs are still added and the tries already at a
 * worker run to their end; resume runs what waited, in order. In memory under a simulated clock;
 * on a real Deno KV file the pause outlives a restart; in a shared flow (two instances on one KV)
 * the other instance follows a pause and a resume at its next lease round. Runs on Deno's KV
 * and, under Bun and Node, on npm `@deno/kv`.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectInProcess, JobQueue, PauseChangedEvent, WorkerEndpoint } from "../mod.ts";
import { DenoKvClusterStore, DenoKvJobStore } from "../deno_kv.ts";
import { BacklogProducer } from "../src/backlog/backlog_producer.ts";
import { MemoryJobStore } from "../src/backlog/memory_job_store.ts";
import { QueueConflictError } from "../src/queue/work_queue.ts";
import { PauseFlag } from "../src/backlog/deno_kv/pause_flag.ts";
import type { KvLike } from "../src/queue/deno_kv/port.ts";
import { SimulatedClock } from "../src/core/clock.ts";
import { planJob } from "../src/lifecycle/job_options.ts";
import { JobSystem } from "./support/job_harness.ts";
import { openKv } from "./fixtures/open_kv.ts";
import { waitFor } from "./support/waiting.ts";
import { ManualClock } from "./support/manual_clock.ts";

describe("pause in memory", () => {
  test("a paused queue starts no new try; jobs are still added; resume runs them in order", async () => {
    const s = new JobSystem();
    const events: boolean[] = [];
    s.queue.addEventListener("pause", (event) => events.push(event.paused));
    await s.queue.start();
    await s.queue.addMany(["a", "b", "c"].map((id) => ({ payload: id, messageId: id })));
    const gates: (() => void)[] = [];
    s.worker("w1", () => new Promise<void>((resolve) => gates.push(resolve)), 1);
    await s.until(() => s.runs.length === 1, "a running");

    await s.queue.pause();
    await s.queue.pause(); // once is enough: one event
    assert.equal(s.queue.paused, true);
    assert.equal(s.queue.stats().paused, true);
    gates.shift()!(); // the try that was running ends as usual
    await s.until(async () => (await s.state("a")) === "completed", "a completed");
    const added = await s.queue.add("d", { messageId: "d" });
    assert.deepEqual([added.created, added.job.state], [true, "waiting"]);
    await s.run(60_000);
    assert.deepEqual(s.ran(), ["a"], "nothing new started in a minute");
    assert.deepEqual(s.store.counts(), { waiting: 3, scheduled: 0, failed: 0, active: 0, dead: 0 });

    await s.queue.resume();
    assert.equal(s.queue.paused, false);
    while (s.runs.length < 4) {
      gates.shift()?.();
      await s.run(1);
    }
    gates.shift()?.();
    await s.until(async () => (await s.state("d")) === "completed", "d completed");
    assert.deepEqual(s.ran(), ["a", "b", "c", "d"]);
    assert.deepEqual(events, [true, false]);
    await s.close();
  });

  test("the jobs already handed to a worker run to their end after a pause", async () => {
    const s = new JobSystem();
    await s.queue.start();
    await s.queue.addMany([1, 2, 3, 4].map((n) => ({ payload: n, messageId: `j${n}` })));
    const gates: (() => void)[] = [];
    s.worker("w1", () => new Promise<void>((resolve) => gates.push(resolve)), 10);
    await s.until(() => s.store.counts().active === 4, "all four at the worker");
    await s.queue.pause();
    await s.queue.add(5, { messageId: "j5" });
    while (s.runs.length < 4) {
      gates.shift()?.();
      await s.run(1);
    }
    gates.shift()?.();
    await s.until(async () => (await s.state("j4")) === "completed", "j4 completed");
    await s.run(10_000);
    assert.deepEqual(s.ran(), ["j1", "j2", "j3", "j4"]);
    assert.equal(await s.state("j5"), "waiting");
    await s.queue.resume();
    await s.until(async () => {
      gates.shift()?.();
      return (await s.state("j5")) === "completed";
    }, "j5 completed");
    await s.close();
  });

  test("start serves workers while it reads the persisted pause, and hands out nothing before it knows", async () => {
    let answer: (paused: boolean) => void = () => {};
    class SlowPauseStore extends MemoryJobStore {
      readPaused() {
        return new Promise<boolean>((resolve) => (answer = resolve));
      }
    }
    const clock = new SimulatedClock();
    const store = new SlowPauseStore({ clock });
    const queue = new JobQueue({ name: "jobs", store, controller: { clock } });
    const ran: string[] = [];
    const worker = new WorkerEndpoint({
      producer: "jobs",
      name: "w",
      clock,
      handler: ({ messageId }) => void ran.push(messageId),
    });
    const starting = queue.start();
    assert.notEqual(queue.controller.state, "idle", "the controller starts at once");
    connectInProcess(queue.controller, worker);
    await store.enqueue([{ id: "x", payload: "1", plan: planJob({}, 0) }]);
    for (let i = 0; i < 10; i++) await clock.advanceAsync(100);
    assert.equal(queue.controller.stats().workers.length, 1, "the worker is bound");
    assert.deepEqual(ran, [], "nothing before the pause is known");
    answer(false);
    await starting;
    for (let i = 0; i < 10 && ran.length === 0; i++) await clock.advanceAsync(100);
    assert.deepEqual(ran, ["x"]);
    const closing = worker.close();
    await clock.advanceAsync(10_000);
    await closing;
    await queue.close();
  });

  test("the backlog producer leaves a grant open while paused and answers it on resume", async () => {
    const store = new MemoryJobStore({ clock: new SimulatedClock() });
    const producer = new BacklogProducer(store);
    await store.load();
    await store.enqueue([{ id: "x", payload: "1", plan: planJob({}, 0) }]);
    const produced: unknown[] = [];
    producer.attach({
      produced: (message) => produced.push(message),
      storedAck: () => {},
      maxPayloadBytes: 1024,
      deliveryConfirmation: false,
    });
    producer.pause();
    producer.onRequestNext({ session: "s", token: "t1", maxJobs: 5 });
    await Promise.resolve();
    assert.deepEqual(produced, []);
    producer.resume();
    await waitFor(() => produced.length === 1, "the open grant answered");
    const [answer] = produced as { jobs: { messageId: string }[] }[];
    assert.deepEqual(answer.jobs.map((job) => job.messageId), ["x"]);
  });
});

describe("pause on Deno KV", () => {
  test("a pause outlives a restart on a KV file, and a resume does too", async () => {
    const dir = mkdtempSync(join(tmpdir(), "workpull-pause-"));
    const path = join(dir, "jobs.kv");
    try {
      const first = await openQueue(path);
      await first.queue.pause();
      await first.queue.addMany([1, 2, 3].map((n) => ({ payload: n, messageId: `j${n}` })));
      await first.close();

      const second = await openQueue(path);
      assert.equal(second.queue.paused, true, "started paused");
      const ran: string[] = [];
      second.worker((id) => ran.push(id));
      await waitFor(
        () => second.queue.controller.stats().workers[0]?.window > 0,
        "the worker's demand",
      );
      assert.deepEqual(ran, []);
      assert.deepEqual(
        [second.queue.store.counts().waiting, second.queue.store.counts().active],
        [3, 0],
      );
      await second.queue.resume();
      await waitFor(() => ran.length === 3, "the three jobs to run");
      assert.deepEqual(ran, ["j1", "j2", "j3"]);
      await second.close();

      const third = await openQueue(path);
      assert.equal(third.queue.paused, false, "the resume was persisted too");
      await third.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("the flag is read and written again while the KV file is locked by another process", async () => {
    const kv = await openKv(":memory:");
    try {
      let refusals = 0;
      // A KV whose calls are refused twice each, as SQLite refuses them while another
      // connection holds the write lock.
      const busy = {
        getMany: (keys: Deno.KvKey[]) =>
          ++refusals % 3 === 0
            ? kv.getMany(keys)
            : Promise.reject(new TypeError("database is locked")),
        list: kv.list.bind(kv),
        atomic: () => {
          const atomic = kv.atomic();
          const commit = atomic.commit.bind(atomic);
          atomic.commit = () =>
            ++refusals % 3 === 0 ? commit() : Promise.reject(new TypeError("database is locked"));
          return atomic;
        },
      };
      const flag = new PauseFlag(busy as unknown as KvLike, ["flow"]);
      await flag.write(true, 1);
      assert.equal(await flag.read(), true);
      assert.equal(refusals, 6, "each call was refused twice, then went through");
    } finally {
      kv.close();
    }
  });

  test("a malformed pause flag stops the start with an error that names it", async () => {
    const kv = await openKv(":memory:");
    try {
      const atomic = kv.atomic().set(["flow", "paused"], new TextEncoder().encode("{not json"));
      assert.equal((await atomic.commit()).ok, true);
      const queue = new JobQueue({
        name: "jobs",
        store: new DenoKvJobStore(kv, { prefix: ["flow"] }),
      });
      await assert.rejects(queue.start(), (error: Error) => {
        assert.ok(error instanceof QueueConflictError, String(error));
        assert.match(error.message, /the pause flag is not JSON/);
        return true;
      });
      await queue.close();
    } finally {
      kv.close();
    }
  });

  test("in a shared flow, the other instance follows a pause and a resume at its lease round", async () => {
    const kv = await openKv(":memory:");
    const clock = new ManualClock();
    const store = (id: string) =>
      new DenoKvClusterStore(kv, { prefix: ["shared"], clock, instance: { id } });
    const a = new JobQueue({ name: "jobs", store: store("a") });
    const b = new JobQueue({ name: "jobs", store: store("b") });
    const seen: boolean[] = [];
    b.addEventListener("pause", (event) => {
      assert.ok(event instanceof PauseChangedEvent);
      seen.push(event.paused);
    });
    try {
      await a.start();
      await b.start();
      await a.pause();
      assert.equal(b.paused, false, "not before its lease round");
      await (b.store as DenoKvClusterStore).renew();
      assert.equal(b.paused, true);
      await b.resume();
      assert.equal(a.paused, true, "not before its lease round");
      await (a.store as DenoKvClusterStore).renew();
      assert.equal(a.paused, false);
      await (b.store as DenoKvClusterStore).renew();
      assert.deepEqual(seen, [true, false], "its own resume is not reported twice");

      // An instance started after the pause starts paused.
      await a.pause();
      const c = new JobQueue({ name: "jobs", store: store("c") });
      await c.start();
      assert.equal(c.paused, true);
      await c.close();
    } finally {
      await a.close();
      await b.close();
      kv.close();
    }
  });
});

/** A job queue on the KV file at `path`, with in-process workers whose handler gets the id. */
async function openQueue(path: string) {
  const kv = await openKv(path);
  const queue = new JobQueue({ name: "jobs", store: new DenoKvJobStore(kv, { prefix: ["flow"] }) });
  await queue.start();
  const workers: WorkerEndpoint<unknown>[] = [];
  return {
    queue,
    worker(handler: (id: string) => void) {
      const endpoint = new WorkerEndpoint({
        producer: "jobs",
        name: `w${workers.length}`,
        window: 1,
        handler: ({ messageId }) => handler(messageId),
      });
      workers.push(endpoint);
      connectInProcess(queue.controller, endpoint);
    },
    async close() {
      for (const endpoint of workers) await endpoint.close();
      await queue.close();
      kv.close();
    },
  };
}
