/**
 * The dashboard's server side: the page (no data, strict CSP, wherever the app is mounted),
 * the live stream over a real loopback server (a client token; snapshots that follow the jobs;
 * workers with their runtime), its bounds (caps, credential expiry, slow viewers, server and
 * controller closing), option validation, and random requests to every new route.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { connectInProcess, JobQueue, MemoryJobStore, WorkerEndpoint } from "../mod.ts";
import { createWorkpullApp, signToken } from "../server.ts";
import { connectWorker } from "../client.ts";
import { type DashboardSnapshot, SnapshotSource } from "../src/dashboard/snapshot.ts";
import { FlowMetrics } from "../src/metrics/flow_metrics.ts";
import { LiveStreams } from "../src/dashboard/live_stream.ts";
import type { SSEStreamingApi } from "hono/streaming";
import { prng, runtime, SECRET, serve } from "./fixtures/net_support.ts";
import { EventReader } from "./support/sse.ts";
import { waitFor, within } from "./support/waiting.ts";

/** An upgrader for in-memory tests: HTTP routes only, no upgrade ever happens. */
const noUpgrade = () => async (_c: unknown, next: () => Promise<void>) => await next();
const clientToken = (producer = "invoices", expiresIn = 60_000) =>
  signToken(SECRET, { producer, expiresIn });
const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

async function jobQueue(attempts = 1) {
  const queue = new JobQueue({
    name: "invoices",
    store: new MemoryJobStore({ defaults: { attempts, backoff: { type: "fixed", delay: 5 } } }),
  });
  await queue.start();
  return queue;
}

function snapshotOf(event: { event: string; data: string }): DashboardSnapshot | undefined {
  return event.event === "snapshot" ? JSON.parse(event.data) : undefined;
}

describe("the dashboard page", () => {
  test("served without a credential wherever the app is mounted, holding no data, under a strict CSP", async () => {
    const queue = await jobQueue();
    const server = await serve({ queue, auth: { secret: SECRET }, basePath: "/wp" });
    try {
      for (const url of [server.url.href, server.url.href.replace(/\/$/, "")]) {
        const response = await fetch(url);
        assert.equal(response.status, 200, url);
        assert.match(response.headers.get("content-type")!, /^text\/html/);
        const html = await response.text();
        assert.match(html, /data-base="\/wp"/);
        assert.equal(html.includes("invoices"), false, "the page holds no data");
        const policy = response.headers.get("content-security-policy")!;
        const nonce = /script-src 'nonce-([^']+)'/.exec(policy)![1];
        assert.ok(html.includes(`<script nonce="${nonce}">`), "the inline script has the nonce");
        assert.match(policy, /default-src 'none'/);
        assert.match(policy, /frame-ancestors 'none'/);
        assert.equal(response.headers.get("cache-control"), "no-store");
      }
      const again = await fetch(server.url);
      assert.notEqual(
        again.headers.get("content-security-policy"),
        (await fetch(server.url)).headers.get("content-security-policy"),
        "a fresh nonce each time",
      );
      await again.body?.cancel();
      assert.equal((await fetch(new URL("elsewhere/", server.url))).status, 404);
    } finally {
      await server.close();
      await queue.close();
    }
  });

  test("elsewhere with dashboard.path, or off with dashboard: false", async () => {
    const queue = await jobQueue();
    try {
      const ui = createWorkpullApp({
        queue,
        upgradeWebSocket: noUpgrade,
        auth: { secret: SECRET },
        dashboard: { path: "/ui" },
      });
      assert.equal((await ui.request("/ui")).status, 200);
      assert.equal((await ui.request("/ui/")).status, 200);
      assert.equal((await ui.request("/")).status, 404);
      const off = createWorkpullApp({
        queue,
        upgradeWebSocket: noUpgrade,
        auth: { secret: SECRET },
        dashboard: false,
      });
      assert.equal((await off.request("/")).status, 404);
      const events = await off.request("/events", { headers: bearer(await clientToken()) });
      assert.equal(events.status, 404);
      const options = (dashboard: unknown) => () =>
        createWorkpullApp({
          queue,
          upgradeWebSocket: noUpgrade,
          auth: { secret: SECRET },
          dashboard: dashboard as never,
        });
      assert.throws(options({ path: "/jobs" }), /option "dashboard.path"/);
      assert.throws(options({ path: "/events/x" }), /option "dashboard.path"/);
      assert.throws(options({ path: "ui" }), /option "dashboard.path"/);
      assert.throws(options({ path: "/a b" }), /option "dashboard.path"/);
      assert.throws(options({ interval: 10 }), /option "dashboard.interval"/);
      assert.throws(options({ maxStreams: 0 }), /option "dashboard.maxStreams"/);
      assert.throws(
        options({ maxStreamsPerClient: 1.5 }),
        /option "dashboard.maxStreamsPerClient"/,
      );
      assert.throws(options("yes"), /option "dashboard" must be true, false or an object/);
    } finally {
      await queue.close();
    }
  });
});

describe("the live stream", () => {
  test("needs a client token; its snapshots follow the jobs, with each worker's runtime", {
    timeout: 60_000,
  }, async () => {
    const queue = await jobQueue();
    const server = await serve({ queue, auth: { secret: SECRET } });
    const events = new URL("events", server.url);
    const token = await clientToken();
    let worker: { close(): Promise<void> } | undefined;
    let reader: EventReader | undefined;
    try {
      const refusals = [
        undefined,
        await signToken(SECRET, { producer: "invoices", worker: "w", expiresIn: 60_000 }),
        await clientToken("other-flow"),
        "wp1.garbage.token",
      ];
      for (const credential of refusals) {
        const response = await fetch(events, { headers: credential ? bearer(credential) : {} });
        assert.equal(response.status, 401, String(credential).slice(0, 20));
        await response.body?.cancel();
      }
      worker = connectWorker<{ n: number }>({
        url: server.workersUrl,
        token: await signToken(SECRET, { producer: "invoices", worker: "w", expiresIn: 60_000 }),
        producer: "invoices",
        name: "w",
        drainOnSignals: false,
        handler: ({ payload }) => {
          if (payload.n < 0) throw new TypeError(`bad input ${payload.n}`);
          return payload.n;
        },
      });
      const response = await fetch(events, { headers: bearer(token) });
      assert.equal(response.status, 200);
      assert.match(response.headers.get("content-type")!, /^text\/event-stream/);
      reader = new EventReader(response);
      const first = await reader.until(
        (e) => {
          const s = snapshotOf(e);
          return s && s.workers.length === 1 ? s : undefined;
        },
        "a snapshot with the worker",
      );
      assert.equal(first.flow, "invoices");
      assert.equal(first.state, "running");
      const expected = { deno: /^Deno \d/, bun: /^Bun \d/, node: /^Node\b/ }[runtime];
      assert.match(
        first.workers[0].runtime ?? "unknown",
        expected,
        "the runtime, from its User-Agent",
      );
      assert.equal(first.workers[0].connected, true);
      assert.ok(
        first.workers[0].lastSeen! <= first.at && first.workers[0].lastSeen! > first.at - 10_000,
      );
      assert.deepEqual(first.deadLetters, []);

      const submitted = await fetch(new URL("jobs", server.url), {
        method: "POST",
        headers: { ...bearer(token), "content-type": "application/json" },
        body: JSON.stringify({
          jobs: [1, 2, 3, 4, -5].map((n) => ({ payload: { n }, messageId: `job${n}` })),
        }),
      });
      assert.equal(submitted.status, 201);
      const later = await reader.until((e) => {
        const s = snapshotOf(e);
        const done = s && s.totals.completed === 4 && s.deadLetters?.length === 1 &&
          s.rate.values.completed.reduce((a, b) => a + b, 0) >= 4;
        return done ? s : undefined;
      }, "a snapshot with 4 completed, 1 dead, and the throughput");
      assert.equal(later.counts.dead, 1);
      assert.equal(later.totals.submitted, 5);
      assert.equal(later.workers[0].confirmed, 5);
      assert.deepEqual(later.deadLetters![0].error, { name: "TypeError", message: "bad input -5" });
      assert.equal(later.failures![0].id, "job-5");
      assert.equal(later.failures![0].state, "dead");
      assert.equal(later.rate.seconds, 300);
      assert.equal(later.paused, false);
      // A pause shows in the next snapshot.
      await queue.pause();
      await reader.until((e) => snapshotOf(e)?.paused === true || undefined, "a paused snapshot");
    } finally {
      await reader?.cancel();
      await worker?.close();
      await server.close();
      await queue.close();
    }
  });

  test("streams are capped per credential and in total; a place comes back when a stream ends", async () => {
    const queue = await jobQueue();
    const app = createWorkpullApp({
      queue,
      upgradeWebSocket: noUpgrade,
      auth: { secret: SECRET },
      dashboard: { maxStreams: 2, maxStreamsPerClient: 1 },
    });
    const open = async (token: string) => {
      const response = await app.request("/events", { headers: bearer(token) });
      if (response.status !== 200) return { status: response.status, body: await response.json() };
      const reader = new EventReader(response);
      await reader.until(snapshotOf, "the first snapshot");
      return { status: 200, reader };
    };
    const [a, b, c] = [
      await clientToken(),
      await clientToken("invoices", 61_000),
      await clientToken("invoices", 62_000),
    ];
    try {
      const first = await open(a);
      assert.equal(first.status, 200);
      const again = await open(a);
      assert.deepEqual([again.status, again.body], [429, {
        error: "too-many-streams-for-credential",
      }]);
      const second = await open(b);
      assert.equal(second.status, 200);
      const third = await open(c);
      assert.deepEqual([third.status, third.body], [429, { error: "too-many-streams" }]);
      await first.reader!.cancel();
      let reopened: Awaited<ReturnType<typeof open>> | undefined;
      await waitFor(async () => {
        reopened = await open(a);
        return reopened.status === 200;
      }, "the cancelled stream's place to come back");
      await reopened!.reader!.cancel();
      await second.reader!.cancel();
    } finally {
      await queue.close();
    }
  });

  test("a stream ends when its credential expires, and when the controller closes", {
    timeout: 30_000,
  }, async () => {
    const queue = await jobQueue();
    const app = createWorkpullApp({ queue, upgradeWebSocket: noUpgrade, auth: { secret: SECRET } });
    try {
      const short = await clientToken("invoices", 1500);
      const expiring = new EventReader(await app.request("/events", { headers: bearer(short) }));
      const ended = await expiring.until(
        (e) => e.event === "end" ? JSON.parse(e.data) : undefined,
        "the end of the stream at the token's expiry",
        5000,
      );
      assert.deepEqual(ended, { reason: "expired" });
      assert.deepEqual(await expiring.rest(), []);

      const lasting = new EventReader(
        await app.request("/events", { headers: bearer(await clientToken()) }),
      );
      await lasting.until(snapshotOf, "a snapshot");
      await queue.close();
      const closed = await lasting.until(
        (e) => e.event === "end" ? JSON.parse(e.data) : undefined,
        "the end of the stream once the controller closed",
        5000,
      );
      assert.deepEqual(closed, { reason: "closed" });
    } finally {
      await queue.close();
    }
  });

  test("closing the server ends the open streams (Deno.serve would wait for them)", {
    timeout: 30_000,
  }, async () => {
    const queue = await jobQueue();
    const server = await serve({ queue, auth: { secret: SECRET } });
    let reader: EventReader | undefined;
    try {
      const response = await fetch(new URL("events", server.url), {
        headers: bearer(await clientToken()),
      });
      reader = new EventReader(response);
      await reader.until(snapshotOf, "a snapshot");
      await within(server.close(), "the server to close with a stream open", 5000);
      // The stream ends, with a last event where the runtime lets it through first.
      const rest = await reader.rest().catch(() => []);
      assert.ok(rest.every((e) => e.event === "end" || e.event === "snapshot"));
    } finally {
      await reader?.cancel();
      await server.close();
      await queue.close();
    }
  });

  test(
    "random requests to the page, the stream and the metrics: never a 500, every place given back",
    {
      timeout: 60_000,
    },
    async () => {
      const queue = await jobQueue();
      const app = createWorkpullApp({
        queue,
        upgradeWebSocket: noUpgrade,
        auth: { secret: SECRET },
        dashboard: { maxStreams: 3, maxStreamsPerClient: 3 },
      });
      const random = prng(0xda5b);
      const pick = <T>(items: readonly T[]): T => items[Math.floor(random() * items.length)];
      const valid = await clientToken();
      const workerToken = await signToken(SECRET, {
        producer: "invoices",
        worker: "w",
        expiresIn: 60_000,
      });
      const garbage = () =>
        Array.from(
          { length: Math.floor(random() * 40) },
          () => String.fromCharCode(32 + Math.floor(random() * 95)),
        ).join("");
      try {
        const statuses = new Map<number, number>();
        for (let i = 0; i < 1500; i++) {
          const path = pick([
            "/",
            "//",
            "/events",
            "/events/",
            "/events?token=" + encodeURIComponent(valid),
            "/metrics",
            "/metrics/",
            "/metrics?x=" + encodeURIComponent(garbage()),
            "/index.html",
            "/%2e%2e/events",
            "/events/../metrics",
            "/" + encodeURIComponent(garbage()),
            "/" + "a/".repeat(Math.floor(random() * 50)),
          ]);
          const headers: Record<string, string> = {};
          const credential = pick([valid, workerToken, garbage(), "", "x".repeat(10_000)]);
          const scheme = pick(["Bearer ", "bearer ", "Basic ", "Bearer  ", ""]);
          if (random() < 0.8) headers.authorization = `${scheme}${credential}`;
          if (random() < 0.3) headers.accept = pick(["text/event-stream", "*/*", garbage()]);
          if (random() < 0.3) headers["user-agent"] = garbage();
          if (random() < 0.1) headers["last-event-id"] = garbage();
          const method = pick([
            "GET",
            "GET",
            "GET",
            "POST",
            "PUT",
            "DELETE",
            "HEAD",
            "OPTIONS",
            "PATCH",
          ]);
          let response: Response;
          try {
            response = await app.request(path, {
              method,
              headers,
              ...(method === "POST" || method === "PUT" ? { body: garbage() } : {}),
            });
          } catch (error) {
            // A header value the Request constructor refuses never reaches the app.
            assert.ok(error instanceof TypeError, String(error));
            continue;
          }
          statuses.set(response.status, (statuses.get(response.status) ?? 0) + 1);
          assert.ok(response.status < 500, `${response.status} for ${method} ${path}`);
          await response.body?.cancel();
        }
        assert.ok((statuses.get(200) ?? 0) > 50, `some requests went through: ${[...statuses]}`);
        assert.ok((statuses.get(401) ?? 0) > 50, "many were refused");
        // Every cancelled stream gave its place back: three can open now.
        await waitFor(async () => {
          const responses = await Promise.all(
            [1, 2, 3].map(() => app.request("/events", { headers: bearer(valid) })),
          );
          for (const response of responses) await response.body?.cancel();
          return responses.every((response) => response.status === 200);
        }, "three streams to open after the fuzzing");
        assert.equal(queue.controller.state, "running");
      } finally {
        await queue.close();
      }
    },
  );
});

describe("live stream bounds", () => {
  /** A stream whose writes never complete (a viewer that does not read). */
  function stuckStream() {
    const writes: string[] = [];
    let aborted = false;
    const aborters: (() => void)[] = [];
    const stream = {
      get aborted() {
        return aborted;
      },
      write(chunk: string) {
        writes.push(chunk);
        return new Promise(() => {});
      },
      close: () => Promise.resolve(),
      abort() {
        aborted = true;
        for (const listener of aborters) listener();
      },
      onAbort(listener: () => void) {
        aborters.push(listener);
      },
    };
    return { stream: stream as unknown as SSEStreamingApi, writes, isAborted: () => aborted };
  }

  test("a viewer that does not read is cut after ten skipped snapshots; its place comes back", async () => {
    let n = 0;
    const streams = new LiveStreams(
      { closed: false, prepare: () => Promise.resolve(), build: () => `{"n":${++n}}` },
      { interval: 10, maxStreams: 1, maxStreamsPerClient: 1, recheckInterval: 0 },
    );
    const stuck = stuckStream();
    const client = { address: "10.0.0.1", credential: "t" };
    const place = streams.admit(client);
    assert.equal(typeof place, "object");
    assert.equal(streams.admit({ address: "10.0.0.2", credential: "u" }), "too-many-streams");
    const served = streams.serve(stuck.stream, client, place as Exclude<typeof place, string>);
    await within(served, "the stuck viewer to be cut", 5000);
    assert.ok(stuck.isAborted(), "aborted, not closed politely");
    assert.equal(stuck.writes.length, 1, "one snapshot held for it, never more");
    assert.equal(streams.size, 0);
    assert.equal(typeof streams.admit(client), "object", "the place came back");
  });

  test("an unchanged snapshot is not sent again", async () => {
    let builds = 0;
    const streams = new LiveStreams(
      { closed: false, prepare: () => Promise.resolve(), build: () => (builds++, "{}") },
      { interval: 10, maxStreams: 1, maxStreamsPerClient: 1, recheckInterval: 0 },
    );
    const writes: string[] = [];
    const aborters: (() => void)[] = [];
    const stream = {
      aborted: false,
      write: (chunk: string) => (writes.push(chunk), Promise.resolve()),
      close: () => Promise.resolve(),
      abort: () => aborters.forEach((listener) => listener()),
      onAbort: (listener: () => void) => aborters.push(listener),
    } as unknown as SSEStreamingApi;
    const client = { address: undefined, credential: undefined };
    const place = streams.admit(client) as { release(): void };
    const served = streams.serve(stream, client, place);
    await waitFor(() => builds >= 5, "five ticks");
    assert.deepEqual(writes, ["event: snapshot\ndata: {}\n\n"]);
    streams.closeAll();
    await within(served, "the stream to end");
    await waitFor(() => writes.length === 2, "the end event");
    assert.equal(writes[1], 'event: end\ndata: {"reason":"closed"}\n\n');
    const ticks = builds;
    await new Promise((resolve) => setTimeout(resolve, 50));
    assert.equal(builds, ticks, "no viewer, no ticks");
  });
});

describe("the dashboard in process", () => {
  test("an in-process worker shows with an unknown runtime and its counts", async () => {
    const queue = await jobQueue();
    const app = createWorkpullApp({ queue, upgradeWebSocket: noUpgrade, auth: { secret: SECRET } });
    const worker = new WorkerEndpoint({ producer: "invoices", name: "local", handler: () => {} });
    connectInProcess(queue.controller, worker);
    const reader = new EventReader(
      await app.request("/events", { headers: bearer(await clientToken()) }),
    );
    try {
      const snapshot = await reader.until((e) => {
        const s = snapshotOf(e);
        return s && s.workers.length === 1 ? s : undefined;
      }, "the worker");
      assert.equal(snapshot.workers[0].name, "local");
      assert.equal(snapshot.workers[0].runtime, undefined);
    } finally {
      await reader.cancel();
      await worker.close();
      await queue.close();
    }
  });

  test("a plain controller's snapshot has no pause (the page shows no pause button)", async () => {
    const { BufferedProducer, WorkPullingController } = await import("../mod.ts");
    const controller = new WorkPullingController({
      name: "plain",
      producer: new BufferedProducer(),
    });
    const source = new SnapshotSource({ controller, metrics: FlowMetrics.of({ controller }) });
    assert.equal("paused" in source.snapshot(), false);
    const queue = await jobQueue();
    try {
      const queued = new SnapshotSource({
        controller: queue.controller,
        queue,
        metrics: FlowMetrics.of({ controller: queue.controller, queue }),
      });
      assert.equal(queued.snapshot().paused, false);
    } finally {
      await queue.close();
    }
  });

  test("a job queue's snapshot shows its schedules with their next runs; a plain controller's has none", async () => {
    const { BufferedProducer, WorkPullingController } = await import("../mod.ts");
    const controller = new WorkPullingController({
      name: "plain",
      producer: new BufferedProducer(),
    });
    const plain = new SnapshotSource({ controller, metrics: FlowMetrics.of({ controller }) });
    assert.equal("schedules" in plain.snapshot(), false);
    const queue = await jobQueue();
    try {
      const source = new SnapshotSource({
        controller: queue.controller,
        queue,
        metrics: FlowMetrics.of({ controller: queue.controller, queue }),
      });
      assert.deepEqual(source.snapshot().schedules, []);
      queue.schedule("hourly", { every: 3_600_000 }, { payload: 1 });
      queue.schedule("nightly", { cron: "0 3 * * *", timezone: "Europe/Berlin" }, { payload: 2 });
      await waitFor(() => queue.schedules().every((s) => s.stored), "the next runs stored");
      const [hourly, nightly] = queue.schedules();
      assert.deepEqual(source.snapshot().schedules, [
        { key: "hourly", rule: "every 3600000 ms", next: hourly.next },
        { key: "nightly", rule: 'cron "0 3 * * *" Europe/Berlin', next: nightly.next },
      ]);
    } finally {
      await queue.close();
    }
  });
});
