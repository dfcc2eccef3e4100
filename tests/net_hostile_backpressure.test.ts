/**
 * Weakness 7 of the hostile-input issue: on Deno a peer that never reads kept its socket and
 * everything the server had queued for it (~5 MB each) after the backpressure close (4000),
 * because Deno's WebSocket cannot abort a socket: it waits to flush the close frame. The socket
 * edge now hands the runtime at most `writeHighWater` (1 MiB) beyond what it has written and
 * queues the rest itself; at the close that queue is dropped, so a pinned socket holds at most
 * the high-water mark in the runtime.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import type { WSContext } from "hono/ws";
import { CloseCode } from "../mod.ts";
import { connectWorker } from "../client.ts";
import type { NetEvent } from "../server.ts";
import { socketEvents } from "../src/net/socket_link.ts";
import { RawWebSocket, startFlow, waitFor, within } from "./fixtures/net_support.ts";

/** A Deno-style socket whose buffer only drains when the test says so. */
function stalledSocket() {
  const raw = {
    readyState: 1,
    bufferedAmount: 0,
    sent: [] as string[],
    closed: undefined as number | undefined,
    send(frame: string) {
      this.sent.push(frame);
      this.bufferedAmount += frame.length;
    },
    close(code: number) {
      this.closed = code;
      this.readyState = 3;
    },
  };
  return raw;
}

function drive(
  raw: ReturnType<typeof stalledSocket>,
  maxBufferedBytes: number,
  writeHighWater: number,
) {
  const reports: NetEvent[] = [];
  const closed: number[] = [];
  let link!: { send(frame: string): void };
  const events = socketEvents((attached) => {
    link = attached;
    return { receive() {}, closed: (code) => void closed.push(code) };
  }, {
    maxFrameBytes: 1024,
    maxBufferedBytes,
    writeHighWater,
    worker: "sloth",
    onEvent: (event) => reports.push(event),
  });
  const ws = { raw, readyState: 1 } as unknown as WSContext;
  events.onOpen!(new Event("open"), ws);
  return {
    link,
    reports,
    closed,
    close: () => events.onClose!(new CloseEvent("close", { code: 1006 }) as never, ws),
  };
}

test("socket link: a peer that never reads gets at most the high-water mark handed to the runtime; the rest is dropped at the 4000 close", () => {
  const raw = stalledSocket();
  const socket = drive(raw, 10_000, 1_000);
  for (let i = 0; i < 100 && raw.readyState === 1; i++) socket.link.send("x".repeat(300));
  assert.equal(raw.closed, CloseCode.backpressure);
  assert.deepEqual(socket.closed, [CloseCode.backpressure]);
  assert.ok(raw.bufferedAmount <= 1_000 + 300, `the runtime holds ${raw.bufferedAmount} bytes`);
  const report = socket.reports.find((e) => e.kind === "backpressure");
  assert.ok(report?.kind === "backpressure");
  assert.equal(report.bufferedBytes, raw.bufferedAmount);
  assert.ok(report.queuedBytes + report.bufferedBytes > 10_000);
  socket.close();
});

test("socket link: queued frames are written in order as the runtime drains", async () => {
  const raw = stalledSocket();
  const socket = drive(raw, 100_000, 1_000);
  const frames = Array.from({ length: 20 }, (_, i) => `${i}`.padEnd(300, "."));
  for (const frame of frames) socket.link.send(frame);
  assert.equal(raw.sent.length, 4, "1,200 bytes handed over, the rest queued");
  const drain = setInterval(() => (raw.bufferedAmount = 0), 1);
  try {
    await waitFor(() => raw.sent.length === 20, "the queue to drain", 5_000);
  } finally {
    clearInterval(drain);
  }
  assert.deepEqual(raw.sent, frames);
  assert.equal(raw.closed, undefined);
  socket.close();
});

test(
  "over real sockets a non-reading peer is closed with 4000 holding at most ~1 MiB in the runtime; its jobs go to an honest worker",
  { timeout: 60_000 },
  async () => {
    // The controller's byte budget per worker is raised so that the edge's limit is what
    // catches the reader (its grant lets ~16 MiB go its way).
    const flow = await startFlow({ maxInFlightBytes: 64 * 1024 * 1024 });
    const token = await flow.token("sloth");
    const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
      "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
    });
    assert.equal(response.status, 101);
    const honest = connectWorker({
      url: flow.server.workersUrl,
      token: await flow.token("honest"),
      producer: "jobs",
      name: "honest",
      window: 20,
      handler: () => {},
    });
    try {
      ws.send(JSON.stringify({
        type: "register",
        producer: "jobs",
        worker: "sloth",
        incarnation: "i1",
        nonce: "n1",
        resendInterval: 60_000,
      }));
      await waitFor(() => ws.messages.length > 0, "the registration answer");
      const registered = JSON.parse(ws.messages[0]);
      ws.pause();
      ws.send(JSON.stringify({
        type: "request",
        session: registered.session,
        nonce: "n1",
        confirmed: 0,
        upTo: 4000,
        resend: false,
      }));
      const payload = "x".repeat(8 * 1024);
      const { confirmed } = flow.submit(2000, () => payload);
      await within(confirmed, "every job confirmed by the honest worker", 45_000);
      const report = flow.net.find((e) => e.kind === "backpressure");
      assert.ok(report?.kind === "backpressure" && report.worker === "sloth", "closed for it");
      assert.ok(
        report.bufferedBytes <= 1024 * 1024 + 300 * 1024,
        `the runtime held ${report.bufferedBytes} bytes at the close`,
      );
      assert.ok(report.queuedBytes > 0, "the rest waited at the edge and was dropped");
      const unbound = flow.of("worker-unbound").find((e) => e.worker === "sloth");
      assert.equal(unbound?.reason, "backpressure");
    } finally {
      ws.destroy();
      await honest.close();
      await flow.close();
    }
  },
);
