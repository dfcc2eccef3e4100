/**
 * Weakness 1 of the hostile-input issue: more idle TCP connections than the server process has
 * file descriptors. On Deno the failed accept ended `Deno.serve`'s loop with an unhandled
 * rejection and the process exited; now the server logs it, sheds new connections for a while
 * and listens again, and established workers never notice. The server runs in a child process
 * with `ulimit -n 256`.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { connectWorker } from "../client.ts";
import { signToken } from "../server.ts";
import { idleSockets, ServerProcess } from "./fixtures/hostile_support.ts";
import { runtime, waitFor } from "./fixtures/net_support.ts";

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
        assert.match(server.stderr, /stopped accepting connections/, "descriptors ran out");
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
