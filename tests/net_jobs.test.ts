/**
 * The job queue's HTTP routes, in memory (`app.request`): submissions answered at once, with
 * their state; idempotent resubmission; invalid batches refused whole naming the field; 429 at
 * maxBacklog and recovery; job status, cancellation and dead letters; credentials.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { connectInProcess, JobQueue, MemoryJobStore, WorkerEndpoint } from "../mod.ts";
import { createWorkpullApp, signToken } from "../server.ts";
import { connectWorker } from "../client.ts";
import { prng, SECRET, serve } from "./fixtures/net_support.ts";
import { waitFor } from "./support/waiting.ts";
import { parseExposition } from "./support/prometheus.ts";
import { summary } from "../src/cli/stats.ts";

/** An upgrader for in-memory tests: HTTP routes only, no upgrade ever happens. */
const noUpgrade = () => async (_c: unknown, next: () => Promise<void>) => await next();

async function setup(store = new MemoryJobStore(), logged: unknown[][] | undefined = undefined) {
  const queue = new JobQueue({ name: "jobs", store });
  await queue.start();
  const app = createWorkpullApp({
    queue,
    ...(logged
      ? {
        logger: {
          error: (...args: unknown[]) => void logged.push(args),
          warn() {},
          info() {},
          debug() {},
        },
      }
      : {}),
    upgradeWebSocket: noUpgrade,
    auth: { secret: SECRET },
    maxJobsPerRequest: 10,
  });
  const client = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
  const call = (method: string, path: string, body?: unknown, token = client) =>
    app.request(path, {
      method,
      headers: {
        authorization: `Bearer ${token}`,
        ...(body === undefined ? {} : { "content-type": "application/json" }),
      },
      ...(body === undefined
        ? {}
        : { body: typeof body === "string" ? body : JSON.stringify(body) }),
    });
  const workers: WorkerEndpoint<unknown>[] = [];
  const worker = (handler: (payload: unknown) => unknown) => {
    const endpoint = new WorkerEndpoint({
      producer: "jobs",
      name: `w${workers.length}`,
      handler: ({ payload }) => handler(payload),
    });
    workers.push(endpoint);
    connectInProcess(queue.controller, endpoint);
  };
  const close = async () => {
    for (const endpoint of workers) await endpoint.close();
    await queue.close();
  };
  return { queue, app, client, call, worker, close };
}

describe("job routes", () => {
  test("POST /jobs answers at once with no worker online: 201 new, 200 already known", async () => {
    const s = await setup();
    try {
      const created = await s.call("POST", "/jobs", { payload: { n: 1 }, messageId: "a" });
      assert.equal(created.status, 201);
      const job = await created.json();
      assert.deepEqual([job.id, job.state, job.created], ["a", "waiting", true]);
      const batch = await s.call("POST", "/jobs", {
        jobs: [{ payload: 2, messageId: "b", priority: 5 }, { payload: 3, delay: 60_000 }],
      });
      assert.equal(batch.status, 201);
      const { jobs } = await batch.json();
      assert.deepEqual(jobs.map((j: { state: string }) => j.state), ["waiting", "scheduled"]);
      const again = await s.call("POST", "/jobs", { payload: { n: 99 }, messageId: "a" });
      assert.equal(again.status, 200);
      assert.deepEqual([(await again.json()).created], [false]);
      // They run when a worker joins, and their results can be read back.
      s.worker((payload) => ({ echo: payload }));
      await waitFor(
        async () => (await (await s.call("GET", "/jobs/b")).json()).state === "completed",
        "b",
      );
      const b = await (await s.call("GET", "/jobs/b")).json();
      assert.deepEqual([b.state, b.result, b.attempts, b.priority], [
        "completed",
        { echo: 2 },
        1,
        5,
      ]);
      const a = await (await s.call("GET", "/jobs/a")).json();
      assert.deepEqual(
        a.result,
        { echo: { n: 1 } },
        "the first submission's payload, not the resent one",
      );
    } finally {
      await s.close();
    }
  });

  test("an invalid batch is refused whole with 400 naming the field; nothing is stored", async () => {
    const s = await setup();
    try {
      const cases: [unknown, number, string][] = [
        [
          { jobs: [{ payload: 1, messageId: "ok" }, { payload: 2, priority: 1.5 }] },
          400,
          "jobs.1.priority",
        ],
        [
          { jobs: [{ payload: 1, messageId: "ok" }, { payload: 2, delay: -5 }] },
          400,
          "jobs.1.delay",
        ],
        [{ payload: 1, runAt: 10, delay: 5 }, 400, "runAt"],
        [{ payload: 1, backoff: { type: "linear", delay: 1 } }, 400, "backoff.type"],
        [{ payload: 1, attempts: "three" }, 400, "attempts"],
        [{ payload: 1, unknown: true }, 400, "unknown"],
        [{ jobs: [] }, 400, "jobs"],
        [{ jobs: Array.from({ length: 11 }, (_, n) => ({ payload: n })) }, 413, "too-many-items"],
      ];
      for (const [body, status, named] of cases) {
        const response = await s.call("POST", "/jobs", body);
        const answer = await response.json();
        assert.equal(response.status, status, JSON.stringify(answer));
        assert.ok(
          JSON.stringify(answer).includes(named),
          `${JSON.stringify(answer)} names ${named}`,
        );
      }
      assert.equal((await s.call("GET", "/jobs/ok")).status, 404, "nothing of a refused batch");
      const text = await s.app.request("/jobs", {
        method: "POST",
        headers: { authorization: `Bearer ${s.client}`, "content-type": "text/plain" },
        body: JSON.stringify({ payload: 1 }),
      });
      assert.equal(text.status, 415);
    } finally {
      await s.close();
    }
  });

  test("beyond maxBacklog: 429 with Retry-After, the batch refused whole; accepted again once drained", async () => {
    const s = await setup(new MemoryJobStore({ maxBacklog: 3 }));
    try {
      assert.equal(
        (await s.call("POST", "/jobs", { jobs: [{ payload: 1 }, { payload: 2 }] })).status,
        201,
      );
      const full = await s.call("POST", "/jobs", {
        jobs: [{ payload: 3, messageId: "c" }, { payload: 4, messageId: "d" }],
      });
      assert.equal(full.status, 429);
      assert.equal(full.headers.get("retry-after"), "1");
      assert.deepEqual(await full.json(), { error: "backlog-full", limit: 3, size: 2, adding: 2 });
      assert.equal((await s.call("GET", "/jobs/c")).status, 404);
      s.worker(() => {});
      await waitFor(() => s.queue.stats().backlog.waiting === 0, "the backlog to drain");
      assert.equal(
        (await s.call("POST", "/jobs", { jobs: [{ payload: 3 }, { payload: 4 }] })).status,
        201,
      );
    } finally {
      await s.close();
    }
  });

  test("DELETE /jobs/:id cancels a waiting job; 404 for an unknown one", async () => {
    const s = await setup();
    try {
      await s.call("POST", "/jobs", { payload: 1, messageId: "later", delay: 60_000 });
      const cancelled = await s.call("DELETE", "/jobs/later");
      assert.equal(cancelled.status, 200);
      assert.equal((await cancelled.json()).state, "cancelled");
      assert.equal((await s.call("DELETE", "/jobs/nobody")).status, 404);
      assert.equal((await s.call("GET", "/jobs/nobody")).status, 404);
    } finally {
      await s.close();
    }
  });

  test("dead letters: listed in pages, retried one or all, deleted", async () => {
    const store = new MemoryJobStore({ defaults: { attempts: 1 } });
    const s = await setup(store);
    try {
      let healthy = false;
      s.worker(() => {
        if (!healthy) throw new Error("down");
      });
      await s.call("POST", "/jobs", {
        jobs: ["a", "b", "c"].map((id) => ({ payload: id, messageId: id })),
      });
      await waitFor(
        async () => (await (await s.call("GET", "/dead-letters")).json()).jobs.length === 3,
        "3 dead",
      );
      const page = await (await s.call("GET", "/dead-letters?limit=2")).json();
      assert.deepEqual(page.jobs.map((j: { id: string }) => j.id), ["a", "b"]);
      const rest = await (await s.call("GET", `/dead-letters?limit=2&cursor=${page.cursor}`))
        .json();
      assert.deepEqual(rest.jobs.map((j: { id: string }) => j.id), ["c"]);
      assert.equal((await s.call("GET", "/dead-letters?limit=lots")).status, 400);
      assert.equal((await s.call("DELETE", "/dead-letters/b")).status, 204);
      assert.equal((await s.call("DELETE", "/dead-letters/b")).status, 404);
      healthy = true;
      const retried = await s.call("POST", "/dead-letters/a/retry");
      assert.equal(retried.status, 200);
      await waitFor(
        async () => (await (await s.call("GET", "/jobs/a")).json()).state === "completed",
        "a ran",
      );
      assert.deepEqual(await (await s.call("POST", "/dead-letters/retry")).json(), { retried: 1 });
      await waitFor(
        async () => (await (await s.call("GET", "/jobs/c")).json()).state === "completed",
        "c ran",
      );
      assert.equal((await s.call("POST", "/dead-letters/zzz/retry")).status, 404);
    } finally {
      await s.close();
    }
  });

  test("GET /stats shows the schedules with their next runs, and GET /jobs/:id the next run's job", async () => {
    const s = await setup();
    try {
      s.queue.schedule("nightly", { cron: "0 3 * * *", timezone: "Europe/Berlin" }, { payload: 7 });
      await waitFor(() => s.queue.schedules()[0].stored, "the next run stored");
      const { schedules } = await (await s.call("GET", "/stats")).json();
      assert.equal(schedules.length, 1);
      const [nightly] = schedules;
      assert.deepEqual(nightly.when, { cron: "0 3 * * *", timezone: "Europe/Berlin" });
      assert.ok(nightly.next > Date.now() && nightly.next <= Date.now() + 86_400_000);
      assert.equal(nightly.nextJob, `nightly@${new Date(nightly.next).toISOString()}`);
      const job = await (await s.call("GET", `/jobs/${encodeURIComponent(nightly.nextJob)}`))
        .json();
      assert.deepEqual([job.state, job.runAt], ["scheduled", nightly.next]);
      const shown = summary("jobs", await (await s.call("GET", "/stats")).json());
      assert.ok(
        shown.includes(
          `\n  schedules: 1\n    nightly: cron "0 3 * * *" Europe/Berlin, next ${
            new Date(nightly.next).toISOString()
          }\n`,
        ),
        shown,
      );
    } finally {
      await s.close();
    }
  });

  test("POST /pause stops new tries, jobs are still added, POST /resume runs them; a store that cannot persist it answers 503 and changes nothing", async () => {
    const s = await setup();
    try {
      assert.deepEqual(await (await s.call("POST", "/pause")).json(), { paused: true });
      assert.deepEqual(await (await s.call("POST", "/pause")).json(), { paused: true });
      const ran: unknown[] = [];
      s.worker((payload) => void ran.push(payload));
      assert.equal((await s.call("POST", "/jobs", { payload: 1, messageId: "a" })).status, 201);
      // The worker's demand is open and the job waits: the paused queue takes nothing.
      await waitFor(() => s.queue.controller.stats().workers[0]?.window > 0, "the worker's demand");
      const paused = await (await s.call("GET", "/stats")).json();
      assert.equal(paused.paused, true);
      assert.deepEqual([paused.backlog.waiting, paused.backlog.active], [1, 0]);
      assert.equal((await (await s.call("GET", "/jobs/a")).json()).state, "waiting");
      assert.deepEqual(await (await s.call("POST", "/resume")).json(), { paused: false });
      await waitFor(
        async () => (await (await s.call("GET", "/jobs/a")).json()).state === "completed",
        "a ran after the resume",
      );
      assert.deepEqual(ran, [1]);
    } finally {
      await s.close();
    }
    class UnwritableStore extends MemoryJobStore {
      readPaused() {
        return Promise.resolve(false);
      }
      writePaused(): Promise<void> {
        return Promise.reject(new Error("the disk is gone"));
      }
    }
    const logged: unknown[][] = [];
    const failing = await setup(new UnwritableStore(), logged);
    try {
      const response = await failing.call("POST", "/pause");
      assert.equal(response.status, 503);
      assert.equal(response.headers.get("retry-after"), "1");
      assert.deepEqual(await response.json(), { error: "unavailable" });
      assert.equal(failing.queue.paused, false);
      assert.match(String(logged[0]?.[0]), /pausing the queue failed/);
      assert.match(String(logged[0]?.[1]), /the disk is gone/);
    } finally {
      await failing.close();
    }
  });

  test("every job route needs a client token", async () => {
    const s = await setup();
    try {
      const worker = await signToken(SECRET, { producer: "jobs", worker: "w", expiresIn: 60_000 });
      const routes: [string, string, unknown?][] = [
        ["POST", "/jobs", { payload: 1 }],
        ["GET", "/jobs/a"],
        ["DELETE", "/jobs/a"],
        ["GET", "/dead-letters"],
        ["POST", "/dead-letters/a/retry"],
        ["POST", "/dead-letters/retry"],
        ["DELETE", "/dead-letters/a"],
        ["POST", "/pause"],
        ["POST", "/resume"],
        ["GET", "/stats"],
      ];
      for (const [method, path, body] of routes) {
        assert.equal(
          (await s.call(method, path, body, "not-a-token")).status,
          401,
          `${method} ${path}`,
        );
        assert.equal(
          (await s.call(method, path, body, worker)).status,
          401,
          `${method} ${path} (worker token)`,
        );
      }
      const stats = await (await s.call("GET", "/stats")).json();
      assert.deepEqual(stats.backlog, { waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 });
      assert.equal(stats.paused, false, "a refused pause changed nothing");
    } finally {
      await s.close();
    }
  });

  test("thousands of random requests to the job, metrics and dashboard routes: never a 500, the queue keeps running", async () => {
    const s = await setup(new MemoryJobStore({ maxBacklog: 50 }));
    const random = prng(0xb0d1);
    const pick = <T>(items: readonly T[]) => items[Math.floor(random() * items.length)];
    const value = (): unknown =>
      pick<() => unknown>([
        () => null,
        () => Math.floor(random() * 2e6) - 1e6,
        () => random(),
        () => "x".repeat(Math.floor(random() * 300)),
        () => pick(["", " ", "__proto__", "exponential", "fixed", "\u0000"]),
        () => [value(), value()],
        () => ({ type: pick(["fixed", "exponential", "bogus"]), delay: value() }),
        () => -1,
        () => 1e308,
      ])();
    const job = () => {
      const body: Record<string, unknown> = { payload: value() };
      for (
        const key of [
          "messageId",
          "delay",
          "runAt",
          "priority",
          "attempts",
          "backoff",
          "timeout",
          "extra",
        ]
      ) {
        if (random() < 0.3) {
          body[key] = key === "messageId" && random() < 0.7
            ? `m${Math.floor(random() * 40)}`
            : value();
        }
      }
      return body;
    };
    try {
      let stored = 0;
      for (let i = 0; i < 2000; i++) {
        const roll = random();
        let response: Response;
        if (roll < 0.6) {
          const body = random() < 0.5
            ? job()
            : { jobs: Array.from({ length: Math.floor(random() * 12) }, job) };
          const text = random() < 0.05 ? JSON.stringify(body).slice(0, -3) : JSON.stringify(body);
          response = await s.call("POST", "/jobs", text);
          if (response.status === 201) stored += 1;
        } else {
          const id = encodeURIComponent(
            pick(["m1", "m2", "", "%", "..", "x".repeat(300), String(value())]),
          );
          const [method, path] = pick([
            ["GET", `/jobs/${id}`],
            ["DELETE", `/jobs/${id}`],
            ["GET", `/dead-letters?limit=${encodeURIComponent(String(value()))}`],
            ["POST", `/dead-letters/${id}/retry`],
            ["DELETE", `/dead-letters/${id}`],
            ["POST", "/pause"],
            ["POST", "/resume"],
            ["POST", `/pause/${id}`],
            // The observing routes, between the job operations.
            ["GET", "/metrics"],
            ["GET", `/metrics?name=${id}`],
            ["POST", "/metrics"],
            ["GET", "/"],
            ["GET", `/${id}`],
            ["GET", "/events"],
            ["GET", `/events/${id}`],
          ]);
          response = await s.call(method, path);
        }
        assert.ok(
          response.status < 500 || response.status === 503,
          `${response.status} on request ${i}`,
        );
        await response.body?.cancel();
      }
      assert.ok(stored > 10, `${stored} submissions stored`);
      assert.equal(s.queue.controller.state, "running");
      // Paused or not, as the last of the random pauses and resumes left it; resumed, it runs.
      assert.equal((await (await s.call("GET", "/stats")).json()).paused, s.queue.paused);
      assert.deepEqual(await (await s.call("POST", "/resume")).json(), { paused: false });
      // The metrics still read back, and counted the jobs stored.
      const metrics = parseExposition(await (await s.call("GET", "/metrics")).text());
      assert.ok(metrics.value("workpull_jobs_submitted_total", { flow: "jobs" }) > 0);
    } finally {
      await s.close();
    }
  });
});

describe("job queue over the network", () => {
  test(
    "jobs posted with no worker online run when a worker connects; results, failures and progress travel over WebSocket",
    {
      timeout: 60_000,
    },
    async () => {
      const queue = new JobQueue({
        name: "jobs",
        store: new MemoryJobStore({
          defaults: { attempts: 2, backoff: { type: "fixed", delay: 10 } },
        }),
      });
      await queue.start();
      const server = await serve({ queue, auth: { secret: SECRET } });
      const client = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
      const post = (body: unknown) =>
        fetch(new URL("jobs", server.url), {
          method: "POST",
          headers: { authorization: `Bearer ${client}`, "content-type": "application/json" },
          body: JSON.stringify(body),
        });
      let worker: { close(): Promise<void> } | undefined;
      try {
        const started = performance.now();
        const response = await post({
          jobs: [
            { payload: { n: 20 }, messageId: "double" },
            { payload: { n: -1 }, messageId: "negative" },
          ],
        });
        assert.equal(response.status, 201, "answered at once, with no worker online");
        assert.ok(performance.now() - started < 5_000);
        const progress: unknown[] = [];
        queue.addEventListener("progress", (event) => progress.push(event.value));
        worker = connectWorker<{ n: number }>({
          url: server.workersUrl,
          token: await signToken(SECRET, { producer: "jobs", worker: "remote", expiresIn: 60_000 }),
          producer: "jobs",
          name: "remote",
          drainOnSignals: false,
          handler: ({ payload, progress: report }) => {
            report({ seen: payload.n });
            if (payload.n < 0) throw new RangeError("negative input");
            return payload.n * 2;
          },
        });
        const get = async (id: string) =>
          await (await fetch(new URL(`jobs/${id}`, server.url), {
            headers: { authorization: `Bearer ${client}` },
          })).json();
        await waitFor(async () => (await get("double")).state === "completed", "double completed");
        await waitFor(async () => (await get("negative")).state === "dead", "negative dead");
        assert.equal((await get("double")).result, 40, "the result came back over the WebSocket");
        const dead = await get("negative");
        assert.deepEqual([dead.attempts, dead.error], [2, {
          name: "RangeError",
          message: "negative input",
        }]);
        assert.ok(progress.length > 0, "progress came back over the WebSocket");
      } finally {
        await worker?.close();
        await server.close();
        await queue.close();
      }
    },
  );
});
