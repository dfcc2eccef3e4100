/**
 * Weakness 1 of the hostile-input issue: more idle TCP connections than the server process has
 * file descriptors. On Deno the failed accept ended the server's accept loop (`Deno.serve`'s with
 * an unhandled rejection that ended the process; `node:http`'s silently); now the server finds
 * it out, logs it and listens again, and established workers never notice. The server runs in a child process
 * with `ulimit -n 256`. Also the limits on connections the app can see: per client address, in
 * total, a registration deadline for WebSockets, and (Bun) a header timeout.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { CloseCode } from "../mod.ts";
import { connectWorker } from "../client.ts";
import { signToken } from "../server.ts";
import { idleSockets, ServerProcess } from "./fixtures/hostile_support.ts";
import { RawWebSocket, runtime, startFlow, waitFor, within } from "./fixtures/net_support.ts";

const SECRET = "fd-test-secret-0123456789-abcdefghijklmnopqrstuvwxyz";

test(
  "400 idle connections at ulimit -n 256 neither end the server nor stop established workers; it accepts again once they go",
  { timeout: 90_000 },
  async () => {
    const server = await ServerProcess.start({ secret: SECRET }, 256);
    const token = () =>
      signToken(SECRET, { producer: "jobs", worker: "honest", expiresIn: 600_000 });
    const url = `ws://127.0.0.1:${server.port}/workers`;
    const honest = connectWorker({
      url,
      token,
      producer: "jobs",
      name: "honest",
      window: 20,
      backoff: { initial: 50, max: 500 },
      handler: () => new Promise((resolve) => setTimeout(resolve, 1)),
    });
    let idle: Awaited<ReturnType<typeof idleSockets>> = [];
    let late: ReturnType<typeof connectWorker> | undefined;
    try {
      await waitFor(() => honest.processed > 50, "the honest worker to process jobs", 20_000);
      idle = await idleSockets(server.port, 400);
      // Descriptors are exhausted now; the established worker keeps going all the while.
      for (let round = 0; round < 3; round++) {
        const before = honest.processed;
        await waitFor(
          () => honest.processed > before + 50 || !server.running,
          "the honest worker to keep processing during the attack",
          15_000,
        );
        assert.ok(server.running, `the server process died:\n${server.stderr}`);
      }
      if (runtime === "deno") {
        // Deno's accept loop ends silently; the server's own probe (every 5 s) finds it out.
        await waitFor(
          () => /stopped accepting connections/.test(server.stderr),
          "the server to find that descriptors ran out",
          20_000,
        );
      }
      for (const socket of idle) socket.destroy();
      idle = [];
      // Once the descriptors are free the server listens again: a new worker gets in.
      late = connectWorker({
        url,
        token: () => signToken(SECRET, { producer: "jobs", worker: "late", expiresIn: 600_000 }),
        producer: "jobs",
        name: "late",
        window: 20,
        backoff: { initial: 50, max: 500 },
        handler: () => {},
      });
      await waitFor(
        () => (late?.processed ?? 0) > 0 || !server.running,
        "a new worker to connect and process jobs after the attack",
        30_000,
      );
      assert.ok(server.running, `the server process died:\n${server.stderr}`);
      assert.ok(late.processed > 0);
    } finally {
      for (const socket of idle) socket.destroy();
      await late?.close();
      await honest.close();
      await server.kill();
    }
  },
);

test(
  "connections are capped per client address and in total, before authentication",
  { timeout: 60_000 },
  async () => {
    const flow = await startFlow({}, { maxConnectionsPerIp: 3, maxConnections: 5 });
    const open: RawWebSocket[] = [];
    try {
      const upgrade = async (worker: string) => {
        const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
          "Sec-WebSocket-Protocol": `workpull.v1, ${await flow.token(worker)}`,
        });
        if (response.status === 101) open.push(ws);
        return response.status;
      };
      assert.deepEqual(
        [await upgrade("a"), await upgrade("b"), await upgrade("c"), await upgrade("d")],
        [101, 101, 101, 503],
      );
      const refusal = flow.net.find((e) => e.kind === "connection-refused");
      assert.ok(refusal?.kind === "connection-refused");
      assert.equal(refusal.reason, "too-many-from-address");
      assert.equal(refusal.address, "127.0.0.1");
      // Plain HTTP requests count while they are answered, and are refused the same way.
      const stats = await fetch(new URL("stats", flow.server.url));
      assert.equal(stats.status, 503);
      assert.equal((await stats.json()).error, "too-many-from-address");
      // A closed socket gives its place back.
      open.shift()!.destroy();
      let status = 0;
      for (let attempt = 0; attempt < 100 && status !== 101; attempt++) {
        status = await upgrade("e");
        if (status !== 101) await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(status, 101);
    } finally {
      for (const ws of open) ws.destroy();
      await flow.close();
    }

    const small = await startFlow({}, { maxConnections: 2 });
    const held: RawWebSocket[] = [];
    try {
      for (const worker of ["a", "b", "c"]) {
        const { response, ws } = await RawWebSocket.connect(small.server.port, "/workers", {
          "Sec-WebSocket-Protocol": `workpull.v1, ${await small.token(worker)}`,
        });
        if (response.status === 101) held.push(ws);
        else {
          assert.equal(response.status, 503);
          assert.ok(
            small.net.some((e) =>
              e.kind === "connection-refused" && e.reason === "too-many-connections"
            ),
          );
        }
      }
      assert.equal(held.length, 2);
    } finally {
      for (const ws of held) ws.destroy();
      await small.close();
    }
  },
);

test(
  "a WebSocket that does not register within registrationTimeout is closed with 1008, however chatty",
  { timeout: 60_000 },
  async () => {
    const flow = await startFlow({}, { registrationTimeout: 300 });
    const open: RawWebSocket[] = [];
    try {
      const connect = async (worker: string) => {
        const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
          "Sec-WebSocket-Protocol": `workpull.v1, ${await flow.token(worker)}`,
        });
        assert.equal(response.status, 101);
        open.push(ws);
        return ws;
      };
      const idler = await connect("idler");
      const chatty = await connect("chatty");
      const honest = await connect("honest");
      honest.send(JSON.stringify({
        type: "register",
        producer: "jobs",
        worker: "honest",
        incarnation: "i1",
        nonce: "n1",
        resendInterval: 2000,
      }));
      // Frames that are valid but never bind: acks of a session it never had (dropped silently;
      // a registration for another flow would be refused and closed at once with 4004).
      const chatter = setInterval(() => {
        chatty.send(JSON.stringify({
          type: "ack",
          session: "never-had-one",
          nonce: crypto.randomUUID(),
          confirmed: 0,
        }));
      }, 50);
      try {
        await waitFor(
          () => idler.closeCode !== undefined && chatty.closeCode !== undefined,
          "both unregistered sockets to be closed",
        );
      } finally {
        clearInterval(chatter);
      }
      assert.equal(idler.closeCode, CloseCode.policy);
      assert.equal(chatty.closeCode, CloseCode.policy);
      assert.equal(
        flow.net.filter((e) => e.kind === "registration-timeout").length,
        2,
      );
      assert.equal(honest.closeCode, undefined, "the registered socket stays");
      assert.deepEqual(flow.controller.stats().workers.map((w) => w.worker), ["honest"]);
    } finally {
      for (const ws of open) ws.destroy();
      await flow.close();
    }
  },
);

test(
  "on Bun a connection that sends nothing is closed within 20 s, and one idle after a request after httpIdleTimeout",
  { timeout: 60_000, skip: runtime !== "bun" && "Deno.serve has no header or idle timeout" },
  async () => {
    const flow = await startFlow({}, { httpIdleTimeout: 1000 });
    try {
      const [silent, keptAlive] = await idleSockets(flow.server.port, 2);
      const closed = (socket: typeof silent) =>
        new Promise<number>((resolve) => socket.on("close", () => resolve(performance.now())));
      const start = performance.now();
      const silentClosed = closed(silent);
      const keptAliveClosed = closed(keptAlive);
      keptAlive.on("data", () => {});
      keptAlive.write(`GET /stats HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n`);
      const idleAfterRequest = await within(
        keptAliveClosed,
        "the idle keep-alive to close",
        15_000,
      );
      assert.ok(idleAfterRequest - start < 10_000, "closed well before Bun's 10 s default");
      await within(silentClosed, "the silent connection to close", 20_000);
    } finally {
      await flow.close();
    }
  },
);
