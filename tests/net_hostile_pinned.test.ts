/**
 * What a worker or client token could still pin on Deno (issue 56), over real sockets on the
 * runtime's own server:
 * - a WebSocket whose peer stopped reading loses its TCP connection, not only its binding, and
 *   its credential's place comes back only then;
 * - all sockets' unsent bytes share one budget (`maxPinnedBytes`): past it the socket stalled
 *   longest is dropped;
 * - a body trickled a byte at a time is answered 408 at `bodyTimeout` and its connection closed;
 * - a head never finished is dropped at `headTimeout`, and past `maxPendingHeads` new
 *   connections are dropped at once (`serveDeno` and `serveNode`; Bun closes idle heads itself).
 * The budget's own rules are checked under a simulated clock, without sockets.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import {
  OutboundBudget,
  STALL_GRACE,
  STALL_TIMEOUT,
  SWEEP_INTERVAL,
} from "../src/net/outbound_budget.ts";
import { signToken } from "../server.ts";
import { RawWebSocket, runtime, SECRET, startFlow, waitFor } from "./fixtures/net_support.ts";

/** Whether the server closed `ws`'s TCP connection: read again and wait for the end. */
function closedByServer(ws: RawWebSocket, ms: number): Promise<boolean> {
  if (ws.socket.destroyed || ws.socket.readableEnded) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    ws.socket.once("close", () => (clearTimeout(timer), resolve(true)));
    ws.socket.resume();
  });
}

/** Register `name` on a raw socket, stop reading and ask for `window` jobs. */
async function stallAfterRegistering(ws: RawWebSocket, name: string, window: number) {
  ws.send(JSON.stringify({
    type: "register",
    producer: "jobs",
    worker: name,
    incarnation: `i-${name}`,
    nonce: `n-${name}`,
    resendInterval: 60_000,
  }));
  await waitFor(() => ws.messages.length > 0, "the registration answer");
  const registered = JSON.parse(ws.messages[0]);
  ws.pause();
  ws.send(JSON.stringify({
    type: "request",
    session: registered.session,
    nonce: `n-${name}`,
    confirmed: 0,
    upTo: window,
    resend: false,
  }));
  return registered.session as string;
}

test("budget: a stalled socket is dropped only once the total is over and it stalled for the grace; the longest stalled first", () => {
  let now = 0;
  const budget = new OutboundBudget(1_000_000, () => now);
  const dropped: string[] = [];
  const socket = (name: string, bytes: () => number) => ({
    pinned: bytes,
    drop: (cause: string) => void dropped.push(`${name} ${cause}`),
  });
  let a = 0, b = 0, c = 0;
  const leaves = [
    budget.join(socket("a", () => a)),
    budget.join(socket("b", () => b)),
    budget.join(socket("c", () => c)),
  ];
  try {
    a = 600_000; // stalls first
    budget.sweep();
    now += SWEEP_INTERVAL;
    b = 600_000; // stalls later
    c = 10; // drains
    budget.sweep();
    assert.deepEqual(dropped, [], "over the budget, but nobody stalled for the grace yet");
    now += STALL_GRACE;
    budget.sweep();
    assert.deepEqual(dropped, ["a server-budget"], "a stalled longest; without it the total fits");
    now += SWEEP_INTERVAL;
    budget.sweep();
    assert.deepEqual(dropped, ["a server-budget"], "b alone is under the budget");
  } finally {
    for (const leave of leaves) leave();
  }
});

test("budget: a socket whose backlog drained between sweeps starts its grace again", () => {
  let now = 0;
  const budget = new OutboundBudget(100_000, () => now);
  const dropped: number[] = [];
  let pinned = 500_000;
  const leave = budget.join({ pinned: () => pinned, drop: () => void dropped.push(now) });
  try {
    budget.sweep();
    now += STALL_GRACE - SWEEP_INTERVAL;
    pinned = 0; // it read everything
    budget.sweep();
    pinned = 500_000;
    now += SWEEP_INTERVAL;
    budget.sweep();
    now += STALL_GRACE - SWEEP_INTERVAL;
    budget.sweep();
    assert.deepEqual(dropped, []);
    now += SWEEP_INTERVAL;
    budget.sweep();
    assert.deepEqual(dropped, [now]);
  } finally {
    leave();
  }
});

test("budget: under the budget, a backlog that has not shrunk for the stall timeout is dropped; a slow reader's is not", () => {
  let now = 0;
  const budget = new OutboundBudget(1 << 30, () => now);
  const dropped: string[] = [];
  let stuck = 200_000;
  let slow = 5_000_000;
  const leaves = [
    budget.join({ pinned: () => stuck, drop: (cause) => void dropped.push(`stuck ${cause}`) }),
    budget.join({ pinned: () => slow, drop: (cause) => void dropped.push(`slow ${cause}`) }),
  ];
  try {
    for (let t = 0; t < STALL_TIMEOUT; t += SWEEP_INTERVAL) {
      budget.sweep();
      now += SWEEP_INTERVAL;
      stuck += 1000; // it keeps growing: nothing is taken
      slow -= 10_000; // it drains, slowly
    }
    budget.sweep();
    assert.deepEqual(dropped, ["stuck stalled"]);
  } finally {
    for (const leave of leaves) leave();
  }
});

test(
  "a peer that never reads loses its TCP connection, and its credential's place comes back only then",
  { timeout: 60_000 },
  async () => {
    const flow = await startFlow({ maxInFlightBytes: 64 << 20 }, {
      maxEndpointsPerWorker: 1,
      maxBufferedBytes: 2 << 20,
    });
    const token = await flow.token("sloth");
    const upgrade = () =>
      RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
    const first = await upgrade();
    let second: RawWebSocket | undefined;
    try {
      assert.equal(first.response.status, 101);
      await stallAfterRegistering(first.ws, "sloth", 5000);
      const { confirmed } = flow.submit(5000, () => "x".repeat(4096));
      confirmed.catch(() => {});
      await waitFor(
        () => flow.net.some((e) => e.kind === "backpressure" && e.worker === "sloth"),
        "the edge to drop the non-reading socket",
        30_000,
      );
      assert.ok(await closedByServer(first.ws, 5000), "its TCP connection was closed");
      // Its place is free again: the same credential is served once more.
      let status = 0;
      for (let attempt = 0; attempt < 100 && status !== 101; attempt++) {
        const next = await upgrade();
        status = next.response.status;
        if (status === 101) second = next.ws;
        else await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(status, 101);
    } finally {
      first.ws.destroy();
      second?.destroy();
      await flow.close();
    }
  },
);

test(
  "while a non-reading socket holds its place, the credential's next upgrade is refused with 429",
  { timeout: 30_000 },
  async () => {
    const flow = await startFlow({}, { maxEndpointsPerWorker: 1 });
    const token = await flow.token("sloth");
    const upgrade = () =>
      RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
    const first = await upgrade();
    try {
      await stallAfterRegistering(first.ws, "sloth", 10);
      const second = await upgrade();
      assert.equal(second.response.status, 429);
      const refusal = flow.net.find((e) => e.kind === "connection-refused");
      assert.ok(refusal?.kind === "connection-refused");
      assert.equal(refusal.reason, "too-many-endpoints");
    } finally {
      first.ws.destroy();
      await flow.close();
    }
  },
);

test(
  "past maxPinnedBytes the socket stalled longest is dropped with its TCP connection, though under its own limit",
  { timeout: 60_000 },
  async () => {
    const flow = await startFlow({ maxInFlightBytes: 64 << 20 }, {
      maxBufferedBytes: 64 << 20,
      maxPinnedBytes: 1 << 20,
    });
    const sloths: RawWebSocket[] = [];
    try {
      for (const name of ["sloth-a", "sloth-b"]) {
        const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
          "Sec-WebSocket-Protocol": `workpull.v1, ${await flow.token(name)}`,
        });
        assert.equal(response.status, 101);
        sloths.push(ws);
        await stallAfterRegistering(ws, name, 5000);
      }
      const { confirmed } = flow.submit(10_000, () => "x".repeat(4096));
      confirmed.catch(() => {});
      await waitFor(
        () => flow.net.some((e) => e.kind === "backpressure" && e.cause === "server-budget"),
        "the server's budget to drop a socket",
        30_000,
      );
      const report = flow.net.find((e) => e.kind === "backpressure" && e.cause === "server-budget");
      assert.ok(report?.kind === "backpressure");
      assert.equal(report.limit, 1 << 20);
      const dropped = sloths[report.worker === "sloth-a" ? 0 : 1];
      assert.ok(await closedByServer(dropped, 5000), "its TCP connection was closed");
    } finally {
      for (const ws of sloths) ws.destroy();
      await flow.close();
    }
  },
);

test(
  "a body trickled a byte at a time is answered 408 at bodyTimeout and its connection closed",
  { timeout: 30_000 },
  async () => {
    const flow = await startFlow({}, { bodyTimeout: 500 });
    const token = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
    const socket = net.connect(flow.server.port, "127.0.0.1");
    let answer = "";
    let trickle: ReturnType<typeof setInterval> | undefined;
    try {
      const started = performance.now();
      const closed = new Promise<number>((resolve) => {
        socket.on("close", () => resolve(performance.now() - started));
      });
      socket.on("error", () => {});
      socket.on("data", (chunk: Uint8Array) => (answer += new TextDecoder().decode(chunk)));
      socket.write(
        `POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n` +
          "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{",
      );
      trickle = setInterval(() => socket.write(" "), 100);
      const after = await closed;
      assert.match(answer, /^HTTP\/1\.1 408/);
      assert.match(answer, /"error":"body-timeout"/);
      assert.ok(after < 5000, `closed after ${after.toFixed(0)} ms`);
    } finally {
      clearInterval(trickle);
      socket.destroy();
      await flow.close();
    }
  },
);

test(
  "a head never finished is dropped at headTimeout; past maxPendingHeads new connections are dropped at once",
  { timeout: 30_000, skip: runtime === "bun" ? "Bun closes idle heads itself (~10 s)" : false },
  async () => {
    const flow = await startFlow({}, { headTimeout: 500, maxPendingHeads: 3 });
    const sockets: net.Socket[] = [];
    const open = (trickle: boolean) => {
      const socket = net.connect(flow.server.port, "127.0.0.1");
      sockets.push(socket);
      socket.on("error", () => {});
      const started = performance.now();
      const closed = new Promise<number>((resolve) => {
        socket.on("close", () => resolve(performance.now() - started));
      });
      if (trickle) {
        socket.on("connect", () => socket.write("GET /workers HTTP/1.1\r\nHost: x\r\n"));
        const timer = setInterval(() => socket.write("X-Slow: 1\r\n"), 100);
        socket.on("close", () => clearInterval(timer));
      }
      return closed;
    };
    try {
      const waiting = [open(true), open(false), open(true)];
      await waitFor(() => sockets.every((s) => !s.connecting), "the connections to be made");
      await new Promise((resolve) => setTimeout(resolve, 50)); // let the server see all three
      const extra = await open(false);
      assert.ok(extra < 400, `the fourth was dropped at once (${extra.toFixed(0)} ms)`);
      for (const after of await Promise.all(waiting)) {
        assert.ok(after >= 400 && after < 3000, `dropped at the head deadline (${after} ms)`);
      }
      const kinds = flow.net.map((e) => e.kind === "connection-refused" ? e.reason : e.kind);
      assert.equal(kinds.filter((k) => k === "head-timeout").length, 3);
      assert.equal(kinds.filter((k) => k === "too-many-pending-heads").length, 1);
      // A complete request is served as before.
      assert.equal((await fetch(new URL("stats", flow.server.url))).status, 401);
    } finally {
      for (const socket of sockets) socket.destroy();
      await flow.close();
    }
  },
);
