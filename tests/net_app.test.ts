import { test } from "node:test";
import assert from "node:assert/strict";
import type { WSContext } from "hono/ws";
import {
  BufferedProducer,
  CloseCode,
  connectInProcess,
  type Link,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { createWorkpullApp, type NetEvent, signToken } from "../server.ts";
import { socketEvents } from "../src/net/socket_link.ts";
import { SECRET } from "./fixtures/net_support.ts";

/** An upgrader for in-memory tests: HTTP routes only, no upgrade ever happens. */
const noUpgrade = () => async (_c: unknown, next: () => Promise<void>) => await next();

async function setup(options: { submitTimeout?: number; workers?: number } = {}) {
  const producer = new BufferedProducer<unknown>();
  const controller = new WorkPullingController({ name: "jobs", producer });
  await controller.start();
  const events: NetEvent[] = [];
  const app = createWorkpullApp({
    controller,
    producer,
    upgradeWebSocket: noUpgrade,
    auth: { secret: SECRET },
    maxBodyBytes: 64 * 1024,
    maxJobsPerRequest: 10,
    submitTimeout: options.submitTimeout ?? 5000,
    onEvent: (event) => events.push(event),
  });
  const workers = Array.from(
    { length: options.workers ?? 1 },
    (_, i) => new WorkerEndpoint({ producer: "jobs", name: `w${i}`, handler: () => {} }),
  );
  for (const worker of workers) connectInProcess(controller, worker);
  const client = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
  const post = (body: unknown, token = client) =>
    app.request("/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: typeof body === "string" ? body : JSON.stringify(body),
    });
  const close = async () => {
    await Promise.all(workers.map((worker) => worker.close()));
    await controller.close();
  };
  return { app, controller, producer, events, client, post, close };
}

test("POST /jobs answers with the MessageID and store sequence once accepted", async () => {
  const { post, controller, close } = await setup();
  try {
    const first = await post({ payload: { n: 1 }, messageId: "job-1" });
    assert.equal(first.status, 200);
    assert.deepEqual(await first.json(), { messageId: "job-1", seq: 1 });
    const batch = await post({ jobs: [{ payload: 2, messageId: "job-2" }, { payload: 3 }] });
    assert.equal(batch.status, 200);
    const { jobs } = await batch.json();
    assert.equal(jobs.length, 2);
    assert.deepEqual(jobs[0], { messageId: "job-2", seq: 2 });
    assert.equal(jobs[1].seq, 3);
    assert.equal(typeof jobs[1].messageId, "string");
    assert.equal(controller.stats().totals.accepted, 3);
  } finally {
    await close();
  }
});

test("POST /jobs is idempotent by MessageID: a resubmission returns the original sequence", async () => {
  const { post, controller, close } = await setup();
  try {
    const first = await (await post({ payload: "a", messageId: "same" })).json();
    await post({ payload: "b", messageId: "other" });
    const again = await post({ payload: "a", messageId: "same" });
    assert.equal(again.status, 200);
    assert.deepEqual(await again.json(), first);
    assert.equal(controller.stats().totals.stored, 2);
  } finally {
    await close();
  }
});

test("POST /jobs refuses bad bodies with 400 and large ones with 413, submitting nothing", async () => {
  const { post, controller, close } = await setup();
  try {
    const bad: [unknown, number, string][] = [
      ["{not json", 400, "malformed-json"],
      [{}, 400, "invalid-body"],
      [{ messageId: "x" }, 400, "invalid-body"],
      [{ payload: 1, extra: true }, 400, "invalid-body"],
      [{ payload: 1, messageId: "   " }, 400, "invalid-body"],
      [{ payload: 1, messageId: "x".repeat(257) }, 400, "invalid-body"],
      [{ payload: 1, messageId: 7 }, 400, "invalid-body"],
      [{ jobs: [] }, 400, "invalid-body"],
      [{ jobs: Array.from({ length: 11 }, () => ({ payload: 1 })) }, 413, "too-many-items"],
      [{ jobs: [{ payload: 1 }, { nope: 1 }] }, 400, "invalid-body"],
      [[1, 2], 400, "invalid-body"],
      [{ payload: "x".repeat(70 * 1024) }, 413, "body-too-large"],
    ];
    for (const [body, status, error] of bad) {
      const response = await post(body);
      assert.equal(response.status, status, JSON.stringify(body).slice(0, 60));
      assert.equal((await response.json()).error, error);
    }
    assert.deepEqual(controller.stats().totals, {
      stored: 0,
      accepted: 0,
      dispatched: 0,
      confirmed: 0,
      requeued: 0,
      failed: 0,
    });
  } finally {
    await close();
  }
});

test("POST /jobs answers 503 when no worker takes the job in time; the job stays queued", async () => {
  const { post, producer, controller, close } = await setup({ submitTimeout: 50, workers: 0 });
  const worker = new WorkerEndpoint({ producer: "jobs", name: "late", handler: () => {} });
  try {
    const response = await post({ payload: 1, messageId: "waiting" });
    assert.equal(response.status, 503);
    assert.equal(response.headers.get("retry-after"), "1");
    assert.deepEqual(await response.json(), {
      error: "not-accepted-yet",
      messageIds: ["waiting"],
    });
    assert.equal(producer.buffered, 1);
    connectInProcess(controller, worker);
    const retried = await post({ payload: 1, messageId: "waiting" });
    assert.deepEqual(await retried.json(), { messageId: "waiting", seq: 1 });
    assert.equal(controller.stats().totals.stored, 1);
  } finally {
    await worker.close();
    await close();
  }
});

test("HTTP routes need a client token: 401 with a reason otherwise", async () => {
  const { app, post, client, events, close } = await setup();
  try {
    const worker = await signToken(SECRET, { producer: "jobs", worker: "w", expiresIn: 60_000 });
    const other = await signToken(SECRET, { producer: "other", expiresIn: 60_000 });
    assert.equal((await app.request("/stats")).status, 401);
    const wrongKind = await app.request("/stats", {
      headers: { authorization: `Bearer ${worker}` },
    });
    assert.equal(wrongKind.status, 401);
    assert.equal(wrongKind.headers.get("www-authenticate"), 'Bearer realm="workpull"');
    assert.deepEqual(await wrongKind.json(), { error: "unauthorized", reason: "wrong-kind" });
    assert.equal((await post({ payload: 1 }, other)).status, 401);
    assert.deepEqual(events, [
      { kind: "unauthorized", route: "stats", reason: "missing-token" },
      { kind: "unauthorized", route: "stats", reason: "wrong-kind" },
      { kind: "unauthorized", route: "jobs", reason: "wrong-producer" },
    ]);
    const stats = await app.request("/stats", { headers: { authorization: `Bearer ${client}` } });
    assert.equal(stats.status, 200);
    const body = await stats.json();
    assert.equal(body.name, "jobs");
    assert.equal(body.pending, 0);
    assert.equal(body.buffered, 0);
    assert.deepEqual(body.workers.map((w: { worker: string }) => w.worker), ["w0"]);
    assert.deepEqual(Object.keys(body.workers[0]).sort(), [
      "binding",
      "confirmed",
      "connected",
      "inFlight",
      "incarnation",
      "quietFor",
      "window",
      "worker",
    ]);
  } finally {
    await close();
  }
});

test("the WebSocket route refuses plain requests, foreign subprotocols and missing tokens", async () => {
  const { app, events, close } = await setup();
  try {
    // A plain GET says why an upgrade with the same credential would be refused, or 426.
    const plain = await app.request("/workers");
    assert.equal(plain.status, 401);
    assert.equal((await plain.json()).reason, "missing-token");
    const worker = await signToken(SECRET, { producer: "jobs", worker: "w", expiresIn: 60_000 });
    const checked = await app.request("/workers", {
      headers: { authorization: `Bearer ${worker}` },
    });
    assert.equal(checked.status, 426);
    const upgrade = { upgrade: "websocket", connection: "Upgrade" };
    const foreign = await app.request("/workers", {
      headers: { ...upgrade, "sec-websocket-protocol": "workpull.v2, token" },
    });
    assert.equal(foreign.status, 400);
    const anonymous = await app.request("/workers", {
      headers: { ...upgrade, "sec-websocket-protocol": "workpull.v1" },
    });
    assert.equal(anonymous.status, 401);
    assert.deepEqual(events.map((event) => event.kind), [
      "unauthorized", // the plain GET without a credential
      "bad-upgrade",
      "unauthorized",
    ]);
  } finally {
    await close();
  }
});

// ---------------------------------------------------------------------------------------------
// The socket link, driven through its Hono event handlers with a fake runtime socket.

interface FakeRaw {
  sent: string[];
  closed: { code: number; reason: string } | undefined;
  readyState: number;
  bufferedAmount?: number;
  getBufferedAmount?(): number;
  send(data: string): unknown;
  close(code: number, reason: string): void;
  terminate?(): void;
}

function fakeSocket(kind: "deno" | "bun", sendResult = 1): FakeRaw {
  const raw: FakeRaw = {
    sent: [],
    closed: undefined,
    readyState: 1,
    send(data) {
      raw.sent.push(data);
      if (kind === "deno") raw.bufferedAmount! += data.length;
      return sendResult;
    },
    close(code, reason) {
      raw.closed = { code, reason };
      raw.readyState = 3;
    },
  };
  if (kind === "deno") raw.bufferedAmount = 0;
  else {
    raw.getBufferedAmount = () => raw.sent.reduce((sum, frame) => sum + frame.length, 0);
    raw.terminate = () => {};
  }
  return raw;
}

function drive(raw: FakeRaw, receive: (frame: unknown) => void = () => {}) {
  const closed: [number, string][] = [];
  const received: unknown[] = [];
  const reports: NetEvent[] = [];
  let link!: Link;
  const events = socketEvents((attached) => {
    link = attached;
    return {
      receive: (frame) => {
        received.push(frame);
        receive(frame);
      },
      closed: (code, reason) => void closed.push([code, reason]),
    };
  }, {
    maxFrameBytes: 1024,
    maxBufferedBytes: 100,
    worker: "w",
    onEvent: (event) => reports.push(event),
  });
  const ws = { raw, readyState: 1 } as unknown as WSContext;
  events.onOpen!(new Event("open"), ws);
  const message = (data: string) =>
    events.onMessage!(new MessageEvent("message", { data }) as never, ws);
  const close = (code: number) =>
    events.onClose!(new CloseEvent("close", { code, reason: "" }) as never, ws);
  return { link, message, close, closed, received, reports };
}

test("socket link: a frame over the byte limit is not delivered and closes with 1009", () => {
  const raw = fakeSocket("deno");
  const socket = drive(raw);
  socket.message("x".repeat(1000));
  socket.message("é".repeat(600)); // 600 characters, 1200 bytes
  assert.deepEqual(socket.received, ["x".repeat(1000)]);
  assert.deepEqual(raw.closed, { code: CloseCode.tooLarge, reason: "frame exceeds 1024 bytes" });
  assert.deepEqual(socket.closed, [[CloseCode.tooLarge, "frame exceeds 1024 bytes"]]);
  assert.deepEqual(socket.reports, [{
    kind: "frame-too-large",
    worker: "w",
    bytes: 1200,
    limit: 1024,
  }]);
  socket.close(1006);
  assert.equal(socket.closed.length, 1, "closed is reported once");
});

test("socket link: a growing outbound buffer closes with 4000 (Deno-style bufferedAmount)", () => {
  const raw = fakeSocket("deno");
  const socket = drive(raw);
  socket.link.send("a".repeat(60));
  assert.equal(raw.readyState, 1, "still open");
  socket.link.send("b".repeat(60));
  assert.equal(raw.closed?.code, CloseCode.backpressure);
  socket.link.send("c");
  assert.equal(raw.sent.length, 2, "nothing is sent after the close");
  assert.deepEqual(socket.closed, [[CloseCode.backpressure, "outbound buffer limit exceeded"]]);
  assert.deepEqual(socket.reports, [{
    kind: "backpressure",
    worker: "w",
    bufferedBytes: 120,
    queuedBytes: 0,
    limit: 100,
    cause: "socket-limit",
  }]);
});

test("socket link: a frame the runtime dropped closes with 4000 (Bun-style send result)", () => {
  const raw = fakeSocket("bun", 0);
  const socket = drive(raw);
  socket.link.send("x");
  assert.equal(raw.closed?.code, CloseCode.backpressure);
  assert.deepEqual(socket.closed.map(([code]) => code), [CloseCode.backpressure]);
});

test("socket link: a receiver that throws cannot break the handler; close is reported once", () => {
  const raw = fakeSocket("deno");
  const errors: unknown[] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => void errors.push(args);
  try {
    const socket = drive(raw, () => {
      throw new Error("receiver bug");
    });
    socket.message("{}");
    socket.link.close(CloseCode.policy, "identity mismatch");
    socket.close(1008);
    assert.deepEqual(raw.closed, { code: CloseCode.policy, reason: "identity mismatch" });
    assert.deepEqual(socket.closed, [[CloseCode.policy, "identity mismatch"]]);
    assert.equal(errors.length, 1);
  } finally {
    console.error = original;
  }
});

test("socket link: a closed socket drops sends without calling it backpressure", () => {
  const raw = fakeSocket("bun", 0);
  raw.readyState = 3;
  const socket = drive(raw);
  socket.link.send("x");
  assert.equal(raw.closed, undefined);
  assert.deepEqual(socket.closed, []);
});
