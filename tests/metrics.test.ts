/**
 * Metrics: `GET /metrics` read back with a parser of the text format as jobs run (counters,
 * gauges, histograms per flow), its credentials and options; the pieces underneath (the text
 * format with hostile label values, histograms, the throughput history, the controller's
 * confirmation timing under a simulated clock, the runtime read from a User-Agent).
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  connectInProcess,
  JobQueue,
  MemoryJobStore,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { createWorkpullApp, signToken } from "../server.ts";
import { SimulatedClock } from "../testing.ts";
import { renderExposition } from "../src/metrics/exposition.ts";
import { FlowMetrics } from "../src/metrics/flow_metrics.ts";
import { Histogram } from "../src/metrics/histogram.ts";
import { RateHistory } from "../src/metrics/rate_history.ts";
import { runtimeFromUserAgent } from "../src/net/user_agent.ts";
import { ManualProducer, ScriptedWorker } from "./support/harness.ts";
import { parseExposition } from "./support/prometheus.ts";
import { waitFor } from "./support/waiting.ts";

const SECRET = "test-secret-0123456789-abcdefghijklmnopqrstuvwxyz";
/** An upgrader for in-memory tests: HTTP routes only, no upgrade ever happens. */
const noUpgrade = () => async (_c: unknown, next: () => Promise<void>) => await next();
const client = () => signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });

async function scrape(
  app: { request(path: string, init?: RequestInit): Response | Promise<Response> },
) {
  const response = await app.request("/metrics", {
    headers: { authorization: `Bearer ${await client()}` },
  });
  assert.equal(response.status, 200);
  assert.match(response.headers.get("content-type")!, /^text\/plain; version=0\.0\.4/);
  return parseExposition(await response.text());
}

describe("GET /metrics", () => {
  test("a job queue's schedules: when each runs next, labelled with its key", async () => {
    const queue = new JobQueue({ name: "jobs", store: new MemoryJobStore() });
    await queue.start();
    const app = createWorkpullApp({ queue, upgradeWebSocket: noUpgrade, auth: { secret: SECRET } });
    try {
      const name = "workpull_schedule_next_run_timestamp_seconds";
      assert.equal((await scrape(app)).types.has(name), false, "none before a schedule");
      const key = 'hourly "report"\nall';
      queue.schedule(key, { every: 3_600_000 }, { payload: { n: 5 } });
      const next = queue.schedules()[0].next!;
      const m = await scrape(app);
      assert.equal(m.types.get(name), "gauge");
      assert.equal(m.value(name, { flow: "jobs", schedule: key }), next / 1000);
    } finally {
      await queue.close();
    }
  });

  test("counters, gauges and histograms move as a job queue's jobs run, fail and die", async () => {
    const queue = new JobQueue({
      name: "jobs",
      store: new MemoryJobStore({
        defaults: { attempts: 2, backoff: { type: "fixed", delay: 5 } },
      }),
    });
    await queue.start();
    const app = createWorkpullApp({ queue, upgradeWebSocket: noUpgrade, auth: { secret: SECRET } });
    const flow = { flow: "jobs" };
    let worker: WorkerEndpoint<{ n: number }> | undefined;
    try {
      const receipts = await Promise.all([1, 2, -1].map((n) => queue.add({ n })));
      let m = await scrape(app);
      assert.equal(m.value("workpull_jobs_submitted_total", flow), 3);
      assert.equal(m.value("workpull_backlog_jobs", { ...flow, state: "waiting" }), 3);
      assert.equal(m.value("workpull_paused", flow), 0);
      await queue.pause();
      assert.equal((await scrape(app)).value("workpull_paused", flow), 1);
      await queue.resume();
      assert.equal(m.value("workpull_workers", flow), 0);
      assert.equal(m.value("workpull_jobs_completed_total", flow), 0);
      assert.equal(m.value("workpull_job_run_seconds_count", flow), 0);
      assert.equal(m.types.get("workpull_job_wait_seconds"), "histogram");

      worker = new WorkerEndpoint<{ n: number }>({
        producer: "jobs",
        name: "w1",
        handler: async ({ payload }) => {
          await new Promise((resolve) => setTimeout(resolve, 20)); // some work
          if (payload.n < 0) throw new RangeError("negative");
          return payload.n;
        },
      });
      connectInProcess(queue.controller, worker);
      await Promise.all(receipts.map((receipt) => receipt.finished));
      m = await scrape(app);
      assert.equal(m.value("workpull_jobs_submitted_total", flow), 3, "a retry is no new job");
      assert.equal(m.value("workpull_jobs_completed_total", flow), 2);
      assert.equal(m.value("workpull_jobs_failed_total", flow), 2, "both tries of -1");
      assert.equal(m.value("workpull_jobs_dead_total", flow), 1);
      assert.equal(m.value("workpull_jobs_accepted_total", flow), 4, "4 tries");
      assert.equal(m.value("workpull_jobs_dispatched_total", flow), 4);
      assert.equal(m.value("workpull_jobs_confirmed_total", flow), 4);
      assert.equal(m.value("workpull_jobs_requeued_total", flow), 0);
      assert.equal(m.value("workpull_workers", flow), 1);
      assert.equal(m.value("workpull_backlog_jobs", { ...flow, state: "dead" }), 1);
      assert.equal(m.value("workpull_backlog_jobs", { ...flow, state: "waiting" }), 0);
      assert.equal(m.value("workpull_in_flight_jobs", flow), 0);
      assert.equal(m.value("workpull_job_wait_seconds_count", flow), 4, "each try started once");
      assert.equal(m.value("workpull_job_run_seconds_count", flow), 4);
      const run = m.value("workpull_job_run_seconds_sum", flow);
      assert.ok(run >= 4 * 0.015 && run < 10, `4 tries of ~20 ms took ${run} s`);
      assert.equal(
        m.value("workpull_job_run_seconds_bucket", { ...flow, le: "0.001" }),
        0,
        "no 20 ms try is under 1 ms",
      );
      // The backoff (5 ms) is waited out in the backlog: the retry's wait counts from its due time.
      assert.ok(m.value("workpull_job_wait_seconds_sum", flow) < 5);

      // A dead letter retried dies again: the dead counter moves, the gauge comes back.
      const [dead] = (await queue.deadLetters()).jobs;
      const retried = await app.request(`/dead-letters/${dead.id}/retry`, {
        method: "POST",
        headers: { authorization: `Bearer ${await client()}` },
      });
      assert.equal(retried.status, 200);
      await waitFor(async () => (await queue.get(dead.id))?.state === "dead", "the retry to die");
      m = await scrape(app);
      assert.equal(m.value("workpull_jobs_dead_total", flow), 2);
      assert.equal(m.value("workpull_jobs_failed_total", flow), 4);
      assert.equal(m.value("workpull_backlog_jobs", { ...flow, state: "dead" }), 1);
    } finally {
      await worker?.close();
      await queue.close();
    }
  });

  test("a controller without a job queue: submitted is what it stored; no backlog, no wait", async () => {
    const producer = new BufferedProducer<unknown>();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      deliveryConfirmation: true,
    });
    await controller.start();
    const app = createWorkpullApp({
      controller,
      producer,
      upgradeWebSocket: noUpgrade,
      auth: { secret: SECRET },
    });
    const worker = new WorkerEndpoint({ producer: "jobs", name: "w", handler: () => {} });
    connectInProcess(controller, worker);
    try {
      const receipts = await Promise.all([1, 2, 3].map((n) => producer.submit({ n })));
      await Promise.all(receipts.map((receipt) => receipt.confirmed));
      const m = await scrape(app);
      assert.equal(m.value("workpull_jobs_submitted_total", { flow: "jobs" }), 3);
      assert.equal(m.value("workpull_jobs_confirmed_total", { flow: "jobs" }), 3);
      assert.equal(m.value("workpull_job_run_seconds_count", { flow: "jobs" }), 3);
      assert.equal(m.types.has("workpull_backlog_jobs"), false);
      assert.equal(m.types.has("workpull_paused"), false);
      assert.equal(m.types.has("workpull_schedule_next_run_timestamp_seconds"), false);
      assert.equal(m.types.has("workpull_job_wait_seconds"), false);
      assert.equal(m.types.has("workpull_jobs_dead_total"), false);
    } finally {
      await worker.close();
      await controller.close();
    }
  });

  test("needs a client token, unless public; off with metrics: false; hooks see the route", async () => {
    const controller = new WorkPullingController({
      name: "jobs",
      producer: new BufferedProducer(),
    });
    const app = createWorkpullApp({
      controller,
      upgradeWebSocket: noUpgrade,
      auth: { secret: SECRET },
    });
    const workerToken = await signToken(SECRET, {
      producer: "jobs",
      worker: "w",
      expiresIn: 60_000,
    });
    assert.equal((await app.request("/metrics")).status, 401);
    for (const token of [workerToken, "wp1.x.y", "x".repeat(5000)]) {
      const response = await app.request("/metrics", {
        headers: { authorization: `Bearer ${token}` },
      });
      assert.equal(response.status, 401);
    }
    const open = createWorkpullApp({
      controller,
      upgradeWebSocket: noUpgrade,
      auth: { secret: SECRET },
      metrics: { public: true },
    });
    const response = await open.request("/metrics");
    assert.equal(response.status, 200);
    assert.equal(parseExposition(await response.text()).value("workpull_workers"), 0);
    const off = createWorkpullApp({
      controller,
      upgradeWebSocket: noUpgrade,
      auth: { secret: SECRET },
      metrics: false,
    });
    assert.equal((await off.request("/metrics")).status, 404);
    const routes: string[] = [];
    const hooked = createWorkpullApp({
      controller,
      upgradeWebSocket: noUpgrade,
      auth: {
        authorize: (_request, route) => (routes.push(route), route === "metrics" ? {} : null),
      },
    });
    assert.equal((await hooked.request("/metrics")).status, 200);
    assert.equal((await hooked.request("/stats")).status, 401);
    assert.deepEqual(routes, ["metrics", "stats"]);
    assert.throws(
      () =>
        createWorkpullApp({
          controller,
          upgradeWebSocket: noUpgrade,
          auth: { secret: SECRET },
          metrics: { public: "yes" as unknown as boolean },
        }),
      /option "metrics.public" must be a boolean/,
    );
    assert.throws(
      () =>
        createWorkpullApp({
          controller,
          upgradeWebSocket: noUpgrade,
          auth: { secret: SECRET },
          metrics: 1 as unknown as boolean,
        }),
      /option "metrics" must be true, false or an object/,
    );
  });

  test("rejected frames are counted by reason, the edge's refusals too", async () => {
    const clock = new SimulatedClock();
    const controller = new WorkPullingController({
      name: "jobs",
      producer: new ManualProducer(),
      clock,
    });
    await controller.start();
    const metrics = FlowMetrics.of({ controller });
    new ScriptedWorker(controller, "a").sendRaw("not json");
    new ScriptedWorker(controller, "b").sendRaw(JSON.stringify({ type: "nope" }));
    new ScriptedWorker(controller, "c").register("n1", "other-flow");
    metrics.edgeEvent({ kind: "rate-limited", worker: "d" });
    metrics.edgeEvent({ kind: "frame-too-large", worker: "e", bytes: undefined, limit: 10 });
    // Measured by the edge and passed on: the controller reports it (counted once).
    metrics.edgeEvent({ kind: "frame-too-large", worker: "f", bytes: 99, limit: 10 });
    const m = parseExposition(renderExposition(metrics.families()));
    const rejected = (reason: string) =>
      m.value("workpull_frames_rejected_total", { flow: "jobs", reason });
    assert.equal(rejected("malformed-json"), 1);
    assert.equal(rejected("invalid-frame"), 1);
    assert.equal(rejected("wrong-producer"), 1);
    assert.equal(rejected("rate-limited"), 1);
    assert.equal(rejected("too-large"), 1);
    assert.equal(rejected("stale-incarnation"), 0, "every reason is there from the start");
    assert.strictEqual(FlowMetrics.of({ controller }), metrics, "one collector per controller");
    await controller.close();
  });
});

describe("metrics pieces", () => {
  test("the text format escapes hostile label values and reads back exactly", () => {
    const hostile = 'a"b\\c\nd} 1\nworkpull_fake 2';
    const histogram = new Histogram([0.1, 1]);
    histogram.observe(0.05);
    histogram.observe(5, 3);
    const text = renderExposition([
      {
        name: "x_total",
        help: "Help with a \\ and\na newline.",
        type: "counter",
        samples: [{ labels: { flow: hostile }, value: 7 }],
      },
      { name: "g", help: "A gauge.", type: "gauge", samples: [{ labels: {}, value: -Infinity }] },
      {
        name: "h_seconds",
        help: "H.",
        type: "histogram",
        samples: [{ labels: { flow: hostile }, histogram: histogram.snapshot() }],
      },
      { name: "empty", help: "Left out.", type: "gauge", samples: [] },
    ]);
    const m = parseExposition(text);
    assert.equal(m.value("x_total", { flow: hostile }), 7);
    assert.equal(m.value("g"), -Infinity);
    assert.equal(m.value("h_seconds_bucket", { flow: hostile, le: "0.1" }), 1);
    assert.equal(m.value("h_seconds_bucket", { flow: hostile, le: "1" }), 1);
    assert.equal(m.value("h_seconds_bucket", { flow: hostile, le: "+Inf" }), 4);
    assert.equal(m.value("h_seconds_sum", { flow: hostile }), 15.05);
    assert.equal(m.types.has("empty"), false);
    assert.equal(m.samples.some((s) => s.name === "workpull_fake"), false, "nothing injected");
    assert.throws(
      () =>
        renderExposition([{
          name: "bad name",
          help: "",
          type: "gauge",
          samples: [{ labels: {}, value: 1 }],
        }]),
      /invalid metric name/,
    );
    assert.throws(() => new Histogram([1, 1]), /ascending/);
  });

  test("throughput history: growth spread over the seconds between samples, gaps are zero", () => {
    const history = new RateHistory(["done"], 10);
    history.sample(100_000, { done: 0 });
    history.sample(100_400, { done: 3 }); // same second
    history.sample(101_000, { done: 5 }); // the second starting at 100 s saw 5
    history.sample(104_000, { done: 11 }); // 6 over the 3 seconds 101..103
    let series = history.series(105_500);
    assert.equal(series.end, 104);
    assert.deepEqual(series.values.done, [0, 0, 0, 0, 0, 5, 2, 2, 2, 0]);
    // A counter that went down was reset: it counts from 0. Its 2 over 96 unsampled seconds
    // are an average of 0.02 a second (the seconds before the ring's are gone).
    history.sample(200_000, { done: 2 });
    series = history.series(201_000);
    assert.deepEqual(series.values.done.slice(-3), [0.02, 0.02, 0]);
    history.sample(201_000, { done: 4 });
    assert.deepEqual(
      history.series(202_000).values.done.slice(-2),
      [2, 0],
      "2 in the second at 200 s",
    );
    assert.throws(() => new RateHistory(["x"], 1), /seconds must be an integer/);
  });

  test("the controller times each confirmed job from delivery or the previous confirmation", async () => {
    const clock = new SimulatedClock();
    const producer = new ManualProducer();
    const controller = new WorkPullingController({ name: "jobs", producer, clock });
    await controller.start();
    const seen: [string, number, number][] = [];
    const stop = controller.watchConfirmations((worker, jobs, busyMs) =>
      seen.push([worker, jobs, busyMs])
    );
    const a = new ScriptedWorker(controller, "a");
    a.register();
    a.request(0, 3);
    producer.produce(["j1", "j2", "j3"].map((messageId) => ({ messageId, payload: 1 })));
    clock.advance(300);
    a.ack(1); // j1 took 300 ms
    clock.advance(100);
    a.ack(3); // j2 and j3 finished within 100 ms: 50 each
    clock.advance(5000); // idle: it does not count
    a.request(3, 4);
    producer.produce([{ messageId: "j4", payload: 1 }]);
    clock.advance(40);
    a.ack(4);
    assert.deepEqual(seen, [["a", 1, 300], ["a", 2, 100], ["a", 1, 40]]);
    stop();
    a.request(4, 5);
    producer.produce([{ messageId: "j5", payload: 1 }]);
    a.ack(5);
    assert.equal(seen.length, 3, "a stopped watcher hears nothing");
    const stats = controller.stats().workers[0];
    assert.equal(stats.quietFor, 0, "heard from just now");
    await controller.close();
  });

  test("the runtime of a worker from its User-Agent: short, plain, never trusted", () => {
    const cases: [string | null, string | undefined][] = [
      ["Deno/2.9.6", "Deno 2.9.6"],
      ["Bun/1.4.5", "Bun 1.4.5"],
      ["node", "Node"],
      ["Node.js/20.20.2", "Node 20.20.2"],
      [
        "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36",
        "Chrome 131",
      ],
      [
        "Mozilla/5.0 (Macintosh; Intel Mac OS X 14_5) AppleWebKit/605.1.15 (KHTML, like Gecko) Version/17.5 Safari/605.1.15",
        "Safari 17",
      ],
      ["Mozilla/5.0 (X11; Linux x86_64; rv:128.0) Gecko/20100101 Firefox/128.0", "Firefox 128"],
      ["Mozilla/5.0 (Windows NT 10.0) Chrome/126.0 Safari/537.36 Edg/126.0", "Edge 126"],
      ["Mozilla/5.0 (unknown)", "browser"],
      ["curl/8.5.0", "curl 8.5.0"],
      ['<script>alert("x")</script>', "scriptalertx script"],
      ["x".repeat(10_000), "x".repeat(40)],
      ["", undefined],
      [null, undefined],
    ];
    for (const [header, expected] of cases) {
      assert.equal(runtimeFromUserAgent(header), expected, String(header).slice(0, 60));
    }
  });
});
