/**
 * Repeating jobs: a schedule keeps its next run in the store as a delayed job named after the
 * run, adds the run after it when the time comes, and refuses a bad schedule with an error that
 * names it. In memory under a simulated clock; on a real Deno KV file a stored run outlives a
 * restart (and the missed runs beyond it are skipped); two instances of a shared flow add each
 * run once. Runs on Deno's KV and, under Bun and Node, on npm `@deno/kv`.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectInProcess, JobQueue, type Logger, MemoryJobStore, WorkerEndpoint } from "../mod.ts";
import { DenoKvClusterStore, DenoKvJobStore } from "../deno_kv.ts";
import { SimulatedClock } from "../src/core/clock.ts";
import { runId } from "../src/schedule/scheduler.ts";
import { JobSystem } from "./support/job_harness.ts";
import { openKv } from "./fixtures/open_kv.ts";
import { waitFor } from "./support/waiting.ts";
import { ManualClock } from "./support/manual_clock.ts";

const MINUTE = 60_000;
const iso = (time: number) => new Date(time).toISOString();

describe("schedules in memory", () => {
  test("every: the next run waits in the store, runs at its time, and the one after it is stored", async () => {
    const s = new JobSystem();
    const payload = { n: 1 };
    const info = s.queue.schedule("tick", { every: MINUTE }, { payload, priority: 5 });
    payload.n = 99; // the schedule keeps what it was given
    assert.deepEqual(info, {
      key: "tick",
      when: { every: MINUTE },
      next: undefined,
      nextJob: undefined,
      stored: false,
    });
    await s.queue.start();
    await s.until(() => s.queue.schedules()[0].stored, "the first run stored");
    const first = await s.queue.get(`tick@${iso(MINUTE)}`);
    assert.deepEqual([first?.state, first?.runAt, first?.priority], ["scheduled", MINUTE, 5]);
    s.worker("w1", ({ payload }) => payload);

    await s.run(MINUTE - s.clock.now() - 10);
    assert.deepEqual(s.ran(), [], "nothing before its time");
    await s.run(4 * MINUTE - s.clock.now() + 10);
    assert.deepEqual(s.ran(), [1, 2, 3, 4].map((n) => `tick@${iso(n * MINUTE)}`));
    assert.deepEqual(s.runs.map((run) => run.at), [1, 2, 3, 4].map((n) => n * MINUTE));
    const done = await s.queue.get(`tick@${iso(MINUTE)}`);
    assert.deepEqual([done?.state, done?.result], ["completed", { n: 1 }]);
    const [next] = s.queue.stats().schedules;
    assert.deepEqual([next.next, next.nextJob, next.stored], [
      5 * MINUTE,
      `tick@${iso(5 * MINUTE)}`,
      true,
    ]);
    await s.close();
  });

  test("cron: runs at the pattern's times in its time zone", async () => {
    const s = new JobSystem();
    s.clock.advance(Date.UTC(2026, 11, 4, 12)); // noon UTC: 13:00 in Berlin
    s.queue.schedule("nightly", { cron: "0 3 * * *", timezone: "Europe/Berlin" }, { payload: 0 });
    s.queue.schedule("utc", { cron: "30 * * * *" }, { payload: 0 });
    await s.queue.start();
    await s.until(() => s.queue.schedules().every((schedule) => schedule.stored), "stored");
    const [nightly, utc] = s.queue.schedules();
    assert.equal(nightly.nextJob, "nightly@2026-12-05T02:00:00.000Z", "3:00 in Berlin, winter");
    assert.deepEqual(nightly.when, { cron: "0 3 * * *", timezone: "Europe/Berlin" });
    assert.equal(utc.nextJob, "utc@2026-12-04T12:30:00.000Z");
    assert.deepEqual(utc.when, { cron: "30 * * * *", timezone: "UTC" });
    s.worker("w1");
    await s.run(2 * MINUTE * 60, 1000);
    assert.deepEqual(s.ran(), ["utc@2026-12-04T12:30:00.000Z", "utc@2026-12-04T13:30:00.000Z"]);
    await s.close();
  });

  test("a bad schedule is refused with an error that names it, and nothing is added", async () => {
    const s = new JobSystem();
    await s.queue.start();
    const refused = (
      key: unknown,
      when: unknown,
      job: unknown,
      error: { name: string; message: RegExp },
    ) =>
      assert.throws(
        () => s.queue.schedule(key as string, when as { every: number }, job as { payload: 1 }),
        error,
      );
    refused("k", { cron: "not a pattern" }, { payload: 1 }, {
      name: "RangeError",
      message: /when is not a valid cron pattern in UTC/,
    });
    refused("k", { cron: "0 3 * * *", timezone: "Mars/Olympus" }, { payload: 1 }, {
      name: "RangeError",
      message: /Mars\/Olympus/,
    });
    refused("k", { every: 10 }, { payload: 1 }, {
      name: "RangeError",
      message: /when.every must be in 1000\.\./,
    });
    refused("k", { every: 1000, cron: "* * * * *" }, { payload: 1 }, {
      name: "TypeError",
      message: /exactly one of "every" and "cron"/,
    });
    refused("k", { every: MINUTE, timezone: "UTC" }, { payload: 1 }, {
      name: "TypeError",
      message: /timezone goes with "cron" only/,
    });
    refused("k", { cron: "0 0 31 2 *" }, { payload: 1 }, {
      name: "RangeError",
      message: /never runs within a year/,
    });
    refused("k", { every: MINUTE }, { payload: 1, messageId: "x" }, {
      name: "TypeError",
      message: /job.messageId is set by the schedule/,
    });
    refused("k", { every: MINUTE }, { payload: () => {} }, {
      name: "TypeError",
      message: /job.payload must be JSON-serializable/,
    });
    refused("k", { every: MINUTE }, { payload: 1, attempts: 0 }, {
      name: "RangeError",
      message: /job.attempts/,
    });
    refused(" ", { every: MINUTE }, { payload: 1 }, {
      name: "TypeError",
      message: /schedule key must be a non-blank string/,
    });
    refused("k".repeat(232), { every: MINUTE }, { payload: 1 }, {
      name: "TypeError",
      message: /at most 231 characters/,
    });
    await s.run(10);
    assert.deepEqual(s.queue.schedules(), []);
    assert.deepEqual(s.store.counts(), { waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 });
    await s.close();
    assert.throws(
      () => s.queue.schedule("k", { every: MINUTE }, { payload: 1 }),
      /queue is closed/,
    );
  });

  test("a replaced schedule's next run is cancelled; an unscheduled one adds nothing more", async () => {
    const s = new JobSystem();
    await s.queue.start();
    s.queue.schedule("k", { every: MINUTE }, { payload: "old" });
    await s.until(() => s.queue.schedules()[0].stored, "stored");
    s.queue.schedule("k", { every: 2 * MINUTE }, { payload: "new" });
    await s.until(() => s.queue.schedules()[0].stored, "the replacement stored");
    assert.equal(await s.state(`k@${iso(MINUTE)}`), "cancelled");
    assert.equal((await s.queue.get(`k@${iso(2 * MINUTE)}`))?.state, "scheduled");

    // The same run time keeps the stored run.
    s.queue.schedule("k", { cron: "*/2 * * * *" }, { payload: "cron" });
    await s.until(() => s.queue.schedules()[0].stored, "the cron schedule stored");
    assert.equal(await s.state(`k@${iso(2 * MINUTE)}`), "scheduled");

    assert.equal(s.queue.unschedule("k"), true);
    assert.equal(s.queue.unschedule("k"), false);
    await s.until(async () => (await s.state(`k@${iso(2 * MINUTE)}`)) === "cancelled", "cancel");
    s.worker("w1");
    await s.run(10 * MINUTE, 1000);
    assert.deepEqual(s.ran(), []);
    assert.deepEqual(s.store.counts(), { waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 });
    await s.close();
  });

  test("a run the store refuses is added again a second later", async () => {
    const clock = new SimulatedClock();
    let refusals = 2;
    class FlakyStore extends MemoryJobStore {
      override enqueue(jobs: Parameters<MemoryJobStore["enqueue"]>[0]) {
        if (refusals-- > 0) return Promise.reject(new Error("store unavailable"));
        return super.enqueue(jobs);
      }
    }
    const errors: string[] = [];
    const logger: Logger = {
      error: (message) => void errors.push(message),
      warn() {},
      info() {},
      debug() {},
    };
    const queue = new JobQueue({
      name: "jobs",
      store: new FlakyStore({ clock }),
      controller: { clock },
      logger,
    });
    queue.schedule("k", { every: MINUTE }, { payload: 1 });
    await queue.start();
    await clock.advanceAsync(0);
    assert.equal(queue.schedules()[0].stored, false);
    await clock.advanceAsync(999);
    assert.equal(queue.schedules()[0].stored, false, "not before a second");
    for (let i = 0; i < 3; i++) await clock.advanceAsync(1000);
    assert.equal(queue.schedules()[0].stored, true);
    assert.equal((await queue.get(`k@${iso(MINUTE)}`))?.state, "scheduled");
    assert.deepEqual(errors, [
      `the schedule k could not add its run k@${iso(MINUTE)}; trying again`,
      `the schedule k could not add its run k@${iso(MINUTE)}; trying again`,
    ]);
    await queue.close();
  });

  test("runId names a run by its key and time", () => {
    assert.equal(runId("report", Date.UTC(2026, 0, 2, 3, 4, 5)), "report@2026-01-02T03:04:05.000Z");
  });
});

describe("schedules on Deno KV", () => {
  test("a stored run outlives a restart and runs once; the runs missed beyond it are skipped", async () => {
    const dir = mkdtempSync(join(tmpdir(), "workpull-schedule-"));
    const path = join(dir, "jobs.kv");
    const clock = new SimulatedClock();
    const t1 = 1_700_000_040_000; // a whole minute
    clock.advance(t1 - 30_000);
    const open = async () => {
      const kv = await openKv(path);
      const queue = new JobQueue({
        name: "jobs",
        store: new DenoKvJobStore(kv, { prefix: ["flow"], clock }),
        controller: { clock },
      });
      queue.schedule("tick", { every: MINUTE }, { payload: "p" });
      await queue.start();
      await waitFor(() => queue.schedules()[0].stored, "the next run stored");
      return { kv, queue };
    };
    try {
      const first = await open();
      assert.equal(first.queue.schedules()[0].nextJob, `tick@${iso(t1)}`);
      await first.queue.close();
      first.kv.close();

      clock.advance(140_000); // down over t1 and t1 + 1 min
      const second = await open();
      assert.equal(second.queue.schedules()[0].nextJob, `tick@${iso(t1 + 2 * MINUTE)}`);
      const ran: string[] = [];
      const worker = new WorkerEndpoint({
        producer: "jobs",
        name: "w",
        clock,
        handler: ({ messageId }) => void ran.push(messageId),
      });
      connectInProcess(second.queue.controller, worker);
      await waitFor(() => ran.length === 1, "the stored run to run");
      assert.deepEqual(ran, [`tick@${iso(t1)}`]);
      assert.equal(await second.queue.get(`tick@${iso(t1 + MINUTE)}`), undefined, "skipped");
      assert.equal(
        (await second.queue.get(`tick@${iso(t1 + 2 * MINUTE)}`))?.state,
        "scheduled",
      );
      await worker.close();
      await second.queue.close();
      second.kv.close();
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("on the wall clock, two instances of a shared flow run each second's run once, on the instance with the worker", async () => {
    const dir = mkdtempSync(join(tmpdir(), "workpull-schedule-shared-"));
    const kv = await openKv(join(dir, "shared.kv"));
    const queues = ["a", "b"].map((id) =>
      new JobQueue({
        name: "jobs",
        store: new DenoKvClusterStore(kv, { prefix: ["shared"], instance: { id } }),
      })
    );
    const ran: string[] = [];
    const worker = new WorkerEndpoint({
      producer: "jobs",
      name: "w",
      handler: ({ messageId }) => void ran.push(messageId),
    });
    try {
      for (const queue of queues) queue.schedule("second", { every: 1000 }, { payload: 1 });
      await Promise.all(queues.map((queue) => queue.start()));
      const first = queues[0].schedules()[0].next!;
      connectInProcess(queues[1].controller, worker); // only b has a worker
      await waitFor(() => ran.length >= 3, "three runs", 20_000);
      const times = ran.map((id) => Date.parse(id.slice("second@".length)));
      assert.deepEqual(ran, [...new Set(ran)], "no run twice");
      assert.equal(times[0], first);
      for (let i = 1; i < times.length; i++) {
        assert.equal(times[i] - times[i - 1], 1000, `consecutive seconds: ${ran.join(", ")}`);
      }
    } finally {
      await worker.close();
      for (const queue of queues) await queue.close();
      kv.close();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  test("two instances of a shared flow that declare a schedule add each run once", async () => {
    const kv = await openKv(":memory:");
    const clock = new ManualClock();
    const queues = ["a", "b"].map((id) =>
      new JobQueue({
        name: "jobs",
        store: new DenoKvClusterStore(kv, { prefix: ["shared"], clock, instance: { id } }),
      })
    );
    const created: string[] = [];
    try {
      for (const queue of queues) {
        queue.addEventListener("job", (event) => {
          if (event.previous === undefined) created.push(event.job.id);
        });
        queue.schedule("tick", { every: MINUTE }, { payload: 1 });
      }
      await Promise.all(queues.map((queue) => queue.start()));
      await waitFor(
        () => queues.every((queue) => queue.schedules()[0].stored),
        "both instances to have stored the run",
      );
      const [a, b] = queues.map((queue) => queue.schedules()[0].nextJob);
      assert.equal(a, b);
      assert.deepEqual(created, [a], "one of them created it");
      assert.equal((await queues[1].get(a!))?.state, "scheduled");
    } finally {
      for (const queue of queues) await queue.close();
      kv.close();
    }
  });
});
