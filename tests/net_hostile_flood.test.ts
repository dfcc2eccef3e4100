/**
 * Weakness 3 of the hostile-input issue: one socket flooding valid frames (350k a second)
 * starved every honest worker on Deno. Each connection now has a token bucket at the socket
 * edge; a flooder runs it dry within its burst and is closed with 1008, while an honest worker —
 * whose confirmations are cumulative — stays far below the rate.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import type { WSContext } from "hono/ws";
import { CloseCode } from "../mod.ts";
import { connectWorker } from "../client.ts";
import type { NetEvent } from "../server.ts";
import { socketEvents } from "../src/net/socket_link.ts";
import { TokenBucket } from "../src/net/token_bucket.ts";
import { RawWebSocket, startFlow, waitFor, within } from "./fixtures/net_support.ts";

test("a token bucket passes its burst, refuses beyond, and refills with time", () => {
  const bucket = new TokenBucket(1000, 5, 0);
  assert.deepEqual([0, 0, 0, 0, 0, 0].map(() => bucket.take(0)), [
    true,
    true,
    true,
    true,
    true,
    false,
  ]);
  assert.equal(bucket.take(0.5), false, "half a token is not a token");
  assert.equal(bucket.take(1), true);
  assert.equal(bucket.take(1_000_000), true);
  let passed = 0;
  for (let i = 0; i < 100; i++) if (bucket.take(1_000_000)) passed++;
  assert.equal(passed, 4, "a long pause refills to the burst, no more");
});

test("socket link: a connection past its frame rate is closed with 1008 before the frame is read", () => {
  const delivered: unknown[] = [];
  const closed: number[] = [];
  const reports: NetEvent[] = [];
  const raw = {
    readyState: 1,
    bufferedAmount: 0,
    closedWith: undefined as number | undefined,
    send() {},
    close(code: number) {
      this.closedWith = code;
      this.readyState = 3;
    },
  };
  const events = socketEvents(() => ({
    receive: (frame) => void delivered.push(frame),
    closed: (code) => void closed.push(code),
  }), {
    maxFrameBytes: 1024,
    maxBufferedBytes: 1 << 20,
    frameRate: 1,
    frameBurst: 10,
    worker: "flooder",
    onEvent: (event) => reports.push(event),
  });
  const ws = { raw, readyState: 1 } as unknown as WSContext;
  events.onOpen!(new Event("open"), ws);
  for (let i = 0; i < 50; i++) {
    events.onMessage!(new MessageEvent("message", { data: `{"n":${i}}` }) as never, ws);
  }
  assert.equal(delivered.length, 10, "the burst passes, nothing after it");
  assert.equal(raw.closedWith, CloseCode.policy);
  assert.deepEqual(closed, [CloseCode.policy]);
  assert.deepEqual(reports, [{ kind: "rate-limited", worker: "flooder" }]);
  events.onClose!(new CloseEvent("close", { code: 1006 }) as never, ws);
});

test(
  "a flooding socket is closed with 1008 and an honest worker with a window of 10,000 keeps going, never limited",
  { timeout: 90_000 },
  async () => {
    const flow = await startFlow();
    const honest = connectWorker({
      url: flow.server.workersUrl,
      token: await flow.token("honest"),
      producer: "jobs",
      name: "honest",
      concurrency: 2,
      window: 10_000,
      handler: () => new Promise((resolve) => setTimeout(resolve, 1)),
    });
    let flooding = true;
    let floodSocket: WebSocket | undefined;
    try {
      let feeding = true;
      const feed = (async () => {
        while (feeding) await flow.submit(500).confirmed;
      })();
      await waitFor(() => honest.processed > 200, "the honest worker to process jobs", 20_000);

      // The flooder: a registered endpoint sending valid acks as fast as it can.
      const token = await flow.token("flooder");
      const socket = floodSocket = new WebSocket(flow.server.workersUrl.href, [
        "workpull.v1",
        token,
      ]);
      const closed = new Promise<number>((resolve) => {
        socket.onclose = (event) => resolve(event.code);
      });
      const registered = new Promise<{ session: string }>((resolve) => {
        socket.onmessage = (event) => {
          const frame = JSON.parse(String(event.data));
          if (frame.type === "registered") resolve(frame);
        };
      });
      await within(new Promise((resolve) => (socket.onopen = resolve)), "the flooder to connect");
      socket.send(JSON.stringify({
        type: "register",
        producer: "jobs",
        worker: "flooder",
        incarnation: "i1",
        nonce: "n1",
        resendInterval: 2000,
      }));
      const { session } = await within(registered, "the flooder to register");
      const ack = JSON.stringify({ type: "ack", session, nonce: "n1", confirmed: 0 });
      const before = honest.processed;
      const flood = (async () => {
        let sent = 0;
        while (flooding && socket.readyState === WebSocket.OPEN) {
          for (let i = 0; i < 1000; i++) socket.send(ack);
          sent += 1000;
          await new Promise((resolve) => setTimeout(resolve, 0));
        }
        return sent;
      })();
      const code = await within(closed, "the flooder to be closed", 30_000);
      flooding = false;
      const sent = await flood;
      // The server closed it for the rate (a client still writing may see the TCP close first:
      // Deno's client then reports code 0).
      assert.ok(
        flow.net.some((e) => e.kind === "rate-limited" && e.worker === "flooder"),
        `closed with ${code} after ${sent} frames, not for its rate`,
      );
      assert.ok([CloseCode.policy, 0, 1006].includes(code), `close code ${code}`);
      await waitFor(
        () => honest.processed > before + 200,
        "the honest worker to keep processing",
        20_000,
      );
      // A few more seconds of honest work at full window: never rate-limited.
      const mark = honest.processed;
      await waitFor(() => honest.processed > mark + 1000, "another 1,000 honest jobs", 30_000);
      assert.deepEqual(
        flow.net.filter((e) => e.kind === "rate-limited" && e.worker !== "flooder"),
        [],
      );
      assert.equal(honest.connected, 2, "the honest endpoints were never disconnected");
      feeding = false;
      await within(feed, "the job stream to drain", 60_000);
    } finally {
      flooding = false;
      floodSocket?.close();
      await honest.close();
      await flow.close();
    }
  },
);

test(
  "a credential's sockets share one frame budget, and a credential caught flooding is refused new sockets for a while",
  { timeout: 60_000 },
  async () => {
    const flow = await startFlow({}, {
      frameRate: 1000,
      frameBurst: 1000,
      frameRatePerWorker: 1500,
      floodCooldown: 60_000,
    });
    const open: RawWebSocket[] = [];
    try {
      const token = await flow.token("spread");
      for (let i = 0; i < 2; i++) {
        const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
          "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
        });
        assert.equal(response.status, 101);
        open.push(ws);
      }
      // 900 frames each: under each socket's own burst of 1,000, over the shared 1,500.
      const frame = JSON.stringify({ type: "ack", session: "s", nonce: "n", confirmed: 0 });
      for (const ws of open) for (let i = 0; i < 900; i++) ws.send(frame);
      // (Deno may drop the TCP connection before its close frame reaches a peer still sending.)
      await waitFor(
        () => flow.net.some((e) => e.kind === "rate-limited" && e.worker === "spread"),
        "one socket to be closed for the shared budget",
      );
      const again = await RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
      assert.equal(again.response.status, 429, "cooling down");
      assert.equal(again.response.headers["retry-after"], "60");
      assert.ok(
        flow.net.some((e) =>
          e.kind === "connection-refused" && e.reason === "cooling-down" && e.worker === "spread"
        ),
      );
      // Another credential is not affected.
      const other = await RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${await flow.token("other")}`,
      });
      assert.equal(other.response.status, 101);
      open.push(other.ws);
    } finally {
      for (const ws of open) ws.destroy();
      await flow.close();
    }
  },
);
