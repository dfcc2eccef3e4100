/**
 * The lifecycle of a job in a job queue (in memory, simulated clock, real in-process workers):
 * failures leave the worker and are retried with backoff elsewhere, then dead-lettered; timeouts
 * abort; cancellation; results and progress.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { JobFailedError } from "../mod.ts";
import { JobSystem } from "./support/job_harness.ts";

describe("job lifecycle", () => {
  test("a poison job runs exactly `attempts` times across workers, then is dead; nothing stalls behind it", async () => {
    // Defect: a rejected handler was retried on the same worker forever and held its place: one
    // always-failing job stalled its worker, with 9 of 39 good jobs stuck behind it.
    const s = new JobSystem({ defaults: { attempts: 3, backoff: { type: "fixed", delay: 100 } } });
    await s.queue.start();
    const handler = ({ messageId }: { messageId: string }) => {
      if (messageId === "poison") throw new TypeError("cannot digest");
    };
    for (const name of ["w1", "w2", "w3"]) s.worker(name, handler, 5);
    await s.queue.add(0, { messageId: "poison" });
    await s.queue.addMany(
      Array.from({ length: 39 }, (_, i) => ({ payload: i, messageId: `good-${i}` })),
    );
    await s.until(async () => (await s.state("poison")) === "dead", "the poison job to be dead");
    await s.until(() => s.ran().filter((id) => id.startsWith("good")).length === 39, "good jobs");
    const poisonRuns = s.runs.filter((run) => run.messageId === "poison");
    assert.deepEqual(poisonRuns.map((run) => run.attempt), [1, 2, 3]);
    assert.ok(new Set(poisonRuns.map((run) => run.worker)).size > 1, "tried on different workers");
    const dead = await s.queue.get("poison");
    assert.deepEqual([dead?.state, dead?.attempts, dead?.error], [
      "dead",
      3,
      { name: "TypeError", message: "cannot digest" },
    ]);
    for (let i = 0; i < 39; i++) assert.equal(await s.state(`good-${i}`), "completed");
    const letters = await s.queue.deadLetters();
    assert.deepEqual(letters.jobs.map((job) => job.id), ["poison"]);
    await s.close();
  });

  test("a failed try waits out its backoff: fixed, and exponential with a cap", async () => {
    const s = new JobSystem({ defaults: { attempts: 5 } });
    await s.queue.start();
    s.worker("w1", () => {
      throw new Error("always");
    });
    await s.queue.add(0, {
      messageId: "exp",
      backoff: { type: "exponential", delay: 100, max: 300, jitter: 0 },
    });
    await s.until(async () => (await s.state("exp")) === "dead", "dead");
    const at = s.runs.map((run) => run.at);
    const waits = at.slice(1).map((t, i) => t - at[i]);
    // 100, 200, 300 (capped), 300; each within 100 ms (the due-time tolerance) of its backoff.
    for (const [i, wait] of [100, 200, 300, 300].entries()) {
      assert.ok(waits[i] >= wait && waits[i] <= wait + 100, `wait ${i + 1}: ${waits[i]} ms`);
    }
    const failed: string[] = [];
    s.queue.addEventListener("job", (event) => failed.push(event.job.state));
    await s.queue.add(0, {
      messageId: "fixed",
      attempts: 2,
      backoff: { type: "fixed", delay: 50 },
    });
    await s.until(async () => (await s.state("fixed")) === "dead", "fixed dead");
    const fixed = s.runs.filter((run) => run.messageId === "fixed").map((run) => run.at);
    assert.ok(fixed[1] - fixed[0] >= 50 && fixed[1] - fixed[0] <= 150);
    assert.deepEqual(failed, ["waiting", "active", "failed", "active", "dead"]);
    await s.close();
  });

  test("a timeout aborts the signal and the try fails; a late success is never confirmed", async () => {
    const s = new JobSystem({ defaults: { attempts: 2, backoff: { type: "fixed", delay: 0 } } });
    await s.queue.start();
    let calls = 0;
    let reason: unknown;
    s.worker("w1", ({ signal }) => {
      calls += 1;
      if (calls === 1) {
        signal.addEventListener("abort", () => (reason = signal.reason));
        // Ignores its signal and "succeeds" long after the deadline.
        return new Promise((resolve) => s.clock.setTimeout(() => resolve("late"), 5_000));
      }
      return "in time";
    });
    const receipt = await s.queue.add(0, { messageId: "slow", timeout: 1_000 });
    await s.until(async () => (await s.state("slow")) === "completed", "completed");
    assert.equal((reason as Error)?.name, "TimeoutError");
    const job = await s.queue.get("slow");
    assert.deepEqual([job?.attempts, job?.result], [2, "in time"], "the retry's result");
    assert.equal(await receipt.result, "in time");
    await s.run(6_000);
    assert.equal((await s.queue.get("slow"))?.result, "in time", "the late one changed nothing");
    await s.close();
  });

  test("the controller fails a try whose worker never reports its end past the timeout", async () => {
    const s = new JobSystem({ defaults: { attempts: 2, backoff: { type: "fixed", delay: 0 } } });
    await s.queue.start();
    s.worker("frozen", () => new Promise(() => {}));
    await s.queue.add(0, { messageId: "j", timeout: 500 });
    await s.until(() => s.runs.length === 1, "started");
    // The worker stops answering altogether (a frozen process): no fail frame will come.
    s.links.get("frozen")!.close(1006, "frozen");
    s.worker("w2");
    await s.until(async () => (await s.state("j")) === "completed", "completed elsewhere");
    await s.close();
  });

  test("cancel: a waiting job never runs; an active job's signal aborts and it is not retried", async () => {
    const s = new JobSystem({ defaults: { attempts: 5 } });
    await s.queue.start();
    await s.queue.add(0, { messageId: "waiting", delay: 10_000 });
    const cancelled = await s.queue.cancel("waiting");
    assert.equal(cancelled?.state, "cancelled");
    let reason: unknown;
    s.worker(
      "w1",
      ({ signal }) =>
        new Promise((_, reject) =>
          signal.addEventListener("abort", () => {
            reason = signal.reason;
            reject(signal.reason);
          })
        ),
    );
    const active = await s.queue.add(0, { messageId: "active" });
    await s.until(() => s.runs.length === 1, "started");
    assert.equal((await s.queue.cancel("active"))?.state, "active");
    await s.until(async () => (await s.state("active")) === "cancelled", "cancelled");
    assert.equal((reason as Error).name, "CancelledError");
    await assert.rejects(active.result, (error) => error instanceof JobFailedError);
    await s.run(12_000);
    assert.deepEqual(s.ran(), ["active"], "neither ran (again)");
    assert.equal(await s.queue.cancel("unknown"), undefined);
    await s.close();
  });

  test("results travel back with the confirmation; progress is visible while running", async () => {
    const s = new JobSystem();
    await s.queue.start();
    let release!: () => void;
    s.worker("w1", async ({ payload, progress }) => {
      progress({ step: 1 });
      await new Promise<void>((resolve) => (release = resolve));
      return { doubled: (payload as number) * 2 };
    });
    const receipt = await s.queue.add(21, { messageId: "j" });
    const seen: unknown[] = [];
    s.queue.addEventListener("progress", (event) => seen.push(event.value));
    await s.until(async () => (await s.queue.get("j"))?.progress !== undefined, "progress");
    assert.deepEqual((await s.queue.get("j"))?.progress, { step: 1 });
    release();
    assert.deepEqual(await receipt.result, { doubled: 42 });
    assert.deepEqual((await s.queue.get("j"))?.result, { doubled: 42 });
    await s.close();
  });

  test("a dead letter can be retried (it runs again) or deleted", async () => {
    const s = new JobSystem({ defaults: { attempts: 1 } });
    await s.queue.start();
    let healthy = false;
    s.worker("w1", () => {
      if (!healthy) throw new Error("down");
    });
    await s.queue.addMany([{ payload: 1, messageId: "a" }, { payload: 2, messageId: "b" }, {
      payload: 3,
      messageId: "c",
    }]);
    await s.until(async () => (await s.queue.deadLetters()).jobs.length === 3, "three dead");
    const page = await s.queue.deadLetters(2);
    assert.deepEqual(page.jobs.map((job) => job.id), ["a", "b"]);
    const rest = await s.queue.deadLetters(2, page.cursor);
    assert.deepEqual([rest.jobs.map((job) => job.id), rest.cursor], [["c"], undefined]);
    healthy = true;
    assert.equal((await s.queue.retryDead("a"))?.state, "waiting");
    assert.equal(await s.queue.deleteDead("b"), true);
    assert.equal(await s.queue.get("b"), undefined);
    await s.until(async () => (await s.state("a")) === "completed", "a ran again");
    assert.equal(await s.queue.retryAllDead(), 1);
    await s.until(async () => (await s.state("c")) === "completed", "c ran again");
    assert.deepEqual((await s.queue.deadLetters()).jobs, []);
    await s.close();
  });

  test("a job whose worker is lost while running it is retried without using a try, up to a limit", async () => {
    const s = new JobSystem({ defaults: { attempts: 1, lostLimit: 2 } });
    await s.queue.start();
    let n = 0;
    // Every worker that runs "killer" dies while running it.
    const killer = () => {
      const name = `w${n}`;
      queueMicrotask(() => s.crash(name));
      return new Promise(() => {});
    };
    const spawn = () =>
      s.worker(`w${++n}`, ({ messageId }) => messageId === "killer" ? killer() : undefined);
    spawn();
    await s.queue.add(0, { messageId: "killer" });
    for (let i = 0; i < 5 && (await s.state("killer")) !== "dead"; i++) {
      await s.until(() => s.runs.length === i + 1, `run ${i + 1}`);
      await s.run(100);
      spawn();
    }
    const job = await s.queue.get("killer");
    assert.equal(job?.state, "dead");
    assert.equal(job?.error?.name, "WorkerLostError");
    assert.equal(s.runs.length, 3, "lost twice without using its one try, the third loss ends it");
    await s.close();
  });

  test("lost workers count across tries: lostLimit + attempts losses end a job that kills every worker", async () => {
    const s = new JobSystem({
      defaults: { attempts: 2, lostLimit: 1, backoff: { type: "fixed", delay: 10 } },
    });
    await s.queue.start();
    let n = 0;
    const spawn = () =>
      s.worker(`w${++n}`, ({ messageId }) => {
        if (messageId !== "killer") return;
        const name = `w${n}`;
        queueMicrotask(() => s.crash(name));
        return new Promise(() => {});
      });
    spawn();
    await s.queue.add(0, { messageId: "killer" });
    for (let i = 0; i < 6 && (await s.state("killer")) !== "dead"; i++) {
      await s.until(() => s.runs.length === i + 1, `run ${i + 1}`);
      await s.run(100);
      spawn();
    }
    const job = await s.queue.get("killer");
    assert.deepEqual([job?.state, job?.attempts], ["dead", 2]);
    assert.equal(s.runs.length, 3, "one free loss, then each loss fails a try: 1 + 2");
    await s.close();
  });

  test("a job that finished just before its worker was lost is not blamed twice for the loss", async () => {
    // The worker holds its confirmation of "good" for its ack delay while "killer" starts and
    // kills it, so the first loss is charged to "good", the oldest unconfirmed job. Both come
    // back marked confirmFirst: the next worker confirms "good" before starting "killer", so
    // every later loss is charged to "killer" and "good" completes on its first try.
    const s = new JobSystem({ defaults: { attempts: 1, lostLimit: 1 } });
    await s.queue.start();
    let n = 0;
    const spawn = () =>
      s.worker(`w${++n}`, ({ messageId }) => {
        if (messageId !== "killer") return;
        const name = `w${n}`;
        queueMicrotask(() => s.crash(name));
        return new Promise(() => {});
      });
    spawn();
    await s.queue.addMany([{ payload: 0, messageId: "good" }, { payload: 0, messageId: "killer" }]);
    for (let i = 0; i < 6 && (await s.state("killer")) !== "dead"; i++) {
      await s.until(
        () => s.runs.some((run, k) => k >= i && run.messageId === "killer"),
        `killer run ${i + 1}`,
      );
      await s.run(100);
      spawn();
    }
    await s.until(async () => (await s.state("good")) === "completed", "good completed");
    const good = await s.queue.get("good");
    assert.deepEqual([good?.state, good?.attempts, good?.error], ["completed", 1, undefined]);
    assert.equal((await s.queue.get("killer"))?.state, "dead");
    const killerRuns = s.runs.filter((run) => run.messageId === "killer").length;
    assert.equal(killerRuns, 3, "one loss blamed on good, then one free and one fatal for killer");
    await s.close();
  });
});
