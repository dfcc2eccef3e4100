/**
 * What the Node adapter (`serveNode`, `nodeWebSocket`) adds to `ws` so that Node serves as Deno
 * and Bun do: a frame ceiling enforced at the frame header, the ping-based idle timeout, nothing
 * kept for a client that leaves during authentication, a close that ends every WebSocket, and a
 * listen failure reported as an error. Node only (`node --test`, see `scripts/test.mjs`); the
 * network tests shared by every runtime (`net_*.test.ts`) also run on Node.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import net from "node:net";
import process from "node:process";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import { createAdaptorServer } from "@hono/node-server";
import { Hono } from "hono";
import { connectWorker } from "../client.ts";
import { BufferedProducer, WorkPullingController } from "../mod.ts";
import { type LinkIdentity, mountWorkpull } from "../server.ts";
import { nodeWebSocket } from "../node.ts";
import {
  NODE_TS_FLAGS,
  RawWebSocket,
  runtime,
  SECRET,
  startFlow,
  waitFor,
  within,
} from "./fixtures/net_support.ts";

const NODE_ONLY = {
  timeout: 60_000,
  skip: runtime === "node" ? false : "the Node adapter runs under node --test only",
};

/** Open a raw WebSocket to `port` with a worker token, answered with `workpull.v1`. */
async function rawWorker(port: number, token: string): Promise<RawWebSocket> {
  const { response, ws } = await RawWebSocket.connect(port, "/workers", {
    "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
  });
  assert.equal(response.status, 101);
  assert.equal(response.headers["sec-websocket-protocol"], "workpull.v1");
  return ws;
}

/** Resolves when the raw client's TCP connection closed. */
function closed(ws: RawWebSocket): Promise<void> {
  return new Promise((resolve) => {
    if (ws.socket.closed) resolve();
    else ws.socket.once("close", () => resolve());
  });
}

test(
  "a frame announced above the ceiling is refused at its header with 1009",
  NODE_ONLY,
  async () => {
    const flow = await startFlow();
    try {
      const ws = await rawWorker(flow.server.port, await flow.token("big"));
      // A masked text frame header announcing 8 MiB, and not one byte of payload: only a limit
      // checked at the header can answer (ws's default would wait for 100 MiB).
      const header = new Uint8Array([0x81, 0x80 | 127, 0, 0, 0, 0, 0, 0x80, 0, 0, 1, 2, 3, 4]);
      ws.socket.write(header);
      await waitFor(() => ws.closeCode !== undefined, "the 1009 close");
      assert.equal(ws.closeCode, 1009);
      await within(closed(ws), "the connection to close");
      assert.deepEqual(flow.of("worker-bound"), []);
    } finally {
      await flow.close();
    }
  },
);

test("a WebSocket that stops answering is pinged, then terminated", NODE_ONLY, async () => {
  const flow = await startFlow({}, { idleTimeout: 1000 });
  const honest = connectWorker({
    url: flow.server.workersUrl,
    token: await flow.token("honest"),
    producer: "jobs",
    name: "honest",
    resendInterval: 200,
    handler: () => {},
  });
  try {
    // The raw client never answers a ping and sends nothing after its registration.
    const ws = await rawWorker(flow.server.port, await flow.token("quiet"));
    ws.send(JSON.stringify({
      type: "register",
      producer: "jobs",
      worker: "quiet",
      incarnation: "i1",
      nonce: "n1",
      resendInterval: 3_600_000,
    }));
    await waitFor(() => flow.of("worker-bound").length === 2, "both workers to bind");
    const started = performance.now();
    await within(closed(ws), "the quiet connection to be terminated", 10_000);
    const after = performance.now() - started;
    assert.ok(ws.pings >= 1, "it was pinged first");
    // Pinged after one to two quiet ticks, terminated one tick later.
    assert.ok(after >= 900, `terminated after ${after} ms`);
    await waitFor(
      () => flow.of("worker-unbound").some((e) => e.worker === "quiet"),
      "the quiet worker's binding to end",
    );
    // The honest worker speaks every 200 ms and is never cut.
    assert.deepEqual(flow.of("worker-unbound").map((e) => e.worker), ["quiet"]);
    const { confirmed } = flow.submit(10);
    await within(confirmed, "the honest worker to confirm jobs");
  } finally {
    await honest.close();
    await flow.close();
  }
});

test(
  "mounted with nodeWebSocket: an upgrade abandoned during authentication leaves nothing behind",
  NODE_ONLY,
  async () => {
    const producer = new BufferedProducer<unknown>();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      deliveryConfirmation: true,
    });
    await controller.start();
    // The hook holds every "leaver" upgrade until the test lets it through, so each client can
    // leave while it is being authenticated.
    const held: (() => void)[] = [];
    const authorize = (request: Request) => {
      const as = new URL(request.url).searchParams.get("as") ?? "leaver";
      if (as !== "leaver") return { worker: as };
      return new Promise<LinkIdentity>((resolve) => held.push(() => resolve({ worker: as })));
    };
    const app = new Hono();
    const sockets = nodeWebSocket();
    mountWorkpull(app, "/pool", {
      controller,
      upgradeWebSocket: sockets.upgradeWebSocket,
      auth: { authorize },
    });
    const server = createAdaptorServer({ fetch: app.fetch, overrideGlobalObjects: false });
    sockets.injectWebSocket(server, app);
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const port = (server.address() as net.AddressInfo).port;
    const honest = connectWorker({
      url: `ws://127.0.0.1:${port}/pool/workers?as=honest`,
      producer: "jobs",
      name: "honest",
      handler: () => {},
    });
    const connections = () =>
      new Promise<number>((resolve) => server.getConnections((_, count) => resolve(count)));
    const request = [
      "GET /pool/workers HTTP/1.1",
      `Host: 127.0.0.1:${port}`,
      "Upgrade: websocket",
      "Connection: Upgrade",
      "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
      "Sec-WebSocket-Version: 13",
      "",
      "",
    ].join("\r\n");
    /** A batch of clients that send a valid upgrade and reset while it is authenticated. */
    const leave = async (count: number) => {
      const clients = await Promise.all(
        Array.from({ length: count }, () =>
          new Promise<net.Socket>((resolve) => {
            const socket = net.connect(port, "127.0.0.1", () => resolve(socket));
            socket.on("error", () => {});
          })),
      );
      for (const client of clients) client.write(request);
      await waitFor(() => held.length === count, `${count} upgrades held in authentication`);
      for (const client of clients) client.resetAndDestroy();
      let open = Infinity;
      await waitFor(() => {
        connections().then((n) => (open = n));
        return open === 1; // the honest worker's
      }, "the server to see the resets");
      for (const release of held.splice(0)) release();
      // Authentication and the upgrade's end run in microtasks: one macrotask turn settles them.
      await new Promise((resolve) => setImmediate(resolve));
    };
    try {
      await waitFor(() => controller.stats().workers.length === 1, "the honest worker to bind");
      const collect = garbageCollector();
      // Warm up: JIT, pools, first-use allocations. One round was not always enough on a loaded
      // machine (CI once measured 1,085 bytes an upgrade where a quiet one measures about 200).
      for (let i = 0; i < 3; i++) await leave(100);
      collect();
      const before = process.memoryUsage().heapUsed;
      const rounds = 20;
      for (let i = 0; i < rounds; i++) await leave(100);
      collect();
      const perUpgrade = (process.memoryUsage().heapUsed - before) / (rounds * 100);
      // @hono/node-ws keeps about 7 KB per abandoned upgrade for the life of the server.
      assert.ok(perUpgrade < 1024, `${Math.round(perUpgrade)} bytes kept per abandoned upgrade`);
      // The server is unharmed: the honest worker still works, nothing else ever bound.
      const receipts = await Promise.all(
        Array.from({ length: 20 }, (_, n) => producer.submit({ n }, { messageId: `job-${n}` })),
      );
      await within(Promise.all(receipts.map((r) => r.confirmed)), "20 confirmations");
      assert.deepEqual(controller.stats().workers.map((w) => w.worker), ["honest"]);
    } finally {
      await honest.close();
      sockets.close();
      await new Promise((resolve) => server.close(resolve));
      await controller.close();
    }
  },
);

test("closing the server ends every WebSocket and stops listening", NODE_ONLY, async () => {
  const flow = await startFlow();
  const worker = connectWorker({
    url: flow.server.workersUrl,
    token: await flow.token("w"),
    producer: "jobs",
    name: "w",
    backoff: { initial: 60_000, max: 60_000 },
    handler: () => {},
  });
  let disconnected = false;
  worker.addEventListener("disconnected", () => (disconnected = true));
  try {
    await waitFor(() => flow.of("worker-bound").length === 1, "the worker to bind");
    await within(flow.server.close(), "the server to close");
    await waitFor(() => disconnected, "the worker to see its connection end");
    await waitFor(
      () => flow.of("worker-unbound").length === 1,
      "the controller to see the link end",
    );
    const refused = await new Promise<boolean>((resolve) => {
      const socket = net.connect(flow.server.port, "127.0.0.1");
      socket.on("connect", () => (socket.destroy(), resolve(false)));
      socket.on("error", () => resolve(true));
    });
    assert.ok(refused, "nothing listens on the port any more");
  } finally {
    await worker.close();
    await flow.close();
  }
});

test(
  "a Node server told SIGTERM drains: the running job is confirmed, then it exits",
  NODE_ONLY,
  async () => {
    const fixture = new URL("./fixtures/node_server_process.ts", import.meta.url).pathname;
    const server = spawn(process.execPath, [...NODE_TS_FLAGS, fixture], {
      stdio: ["ignore", "pipe", "pipe"],
    });
    const exited = new Promise<number | null>((resolve) =>
      server.on("exit", (code) => resolve(code))
    );
    const reports: Record<string, string>[] = [];
    let stderr = "";
    server.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    let pending = "";
    server.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const line of lines) if (line.trim()) reports.push(JSON.parse(line));
    });
    const report = (key: string) => reports.find((r) => key in r);
    let release!: () => void;
    const started: string[] = [];
    let worker: ReturnType<typeof connectWorker> | undefined;
    try {
      await waitFor(() => report("url") !== undefined, () => `the server to listen\n${stderr}`);
      worker = connectWorker({
        url: report("url")!.url,
        token: report("url")!.token,
        producer: "jobs",
        name: "w",
        window: 1,
        drainOnSignals: false,
        handler: ({ messageId }) => {
          started.push(messageId);
          return new Promise<void>((resolve) => (release = resolve));
        },
      });
      await waitFor(() => started.length === 1, "the worker to start a job");
      server.kill("SIGTERM");
      await waitFor(() => report("signal") !== undefined, "the server to get the signal");
      release(); // the job finishes during the drain
      const code = await within(exited, "the server to drain and exit", 20_000);
      assert.equal(code, 143, `exit code ${code}: drained, then 128 + SIGTERM\n${stderr}`);
      const confirmed = reports.flatMap((r) => r.confirmed ? [r.confirmed] : []);
      assert.deepEqual(confirmed, started, "the running job was confirmed, nothing else was sent");
    } finally {
      if (server.exitCode === null && server.signalCode === null) server.kill("SIGKILL");
      await within(exited, "the server process to be reaped");
      await worker?.close();
    }
  },
);

test("a port already taken rejects with the address named", NODE_ONLY, async () => {
  const flow = await startFlow();
  try {
    const { serveNode } = await import("../node.ts");
    await assert.rejects(
      serveNode({
        controller: flow.controller,
        auth: { secret: SECRET },
        port: flow.server.port,
      }),
      new RegExp(
        `Cannot serve with serveNode on 127\\.0\\.0\\.1:${flow.server.port}: .*EADDRINUSE`,
      ),
    );
  } finally {
    await flow.close();
  }
});

/** Node's garbage collector as a function (exposed at run time, no command-line flag needed). */
function garbageCollector(): () => void {
  setFlagsFromString("--expose-gc");
  const gc = runInNewContext("gc");
  // Twice: what the first collection's finalizers and weak references let go goes too.
  return () => {
    gc();
    gc();
  };
}
