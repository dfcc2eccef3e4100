/**
 * Weakness 5 of the hostile-input issue (the part at the network edge): one worker token opened
 * 100 endpoints that heartbeat and never confirm, each a binding with its own demand window,
 * and held most of the pool (honest throughput 2,000 → 40 jobs/s). The WebSockets one worker
 * credential may hold at once are now capped (`maxEndpointsPerWorker`, default 64); the upgrade
 * past the cap is refused with 429 before anything is created. (How long a job may sit
 * unconfirmed at a live binding is the controller's `maxJobAge`.)
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { RawWebSocket, startFlow } from "./fixtures/net_support.ts";

const TIMEOUT = { timeout: 60_000 };

test(
  "a worker token gets at most maxEndpointsPerWorker WebSockets; others are unaffected; a closed one frees its place",
  TIMEOUT,
  async () => {
    const flow = await startFlow({}, { maxEndpointsPerWorker: 4 });
    const open: RawWebSocket[] = [];
    try {
      const hoarder = await flow.token("hoarder");
      const statuses: number[] = [];
      for (let i = 0; i < 6; i++) {
        const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
          "Sec-WebSocket-Protocol": `workpull.v1, ${hoarder}`,
        });
        statuses.push(response.status);
        if (response.status === 101) open.push(ws);
      }
      assert.deepEqual(statuses, [101, 101, 101, 101, 429, 429]);
      const refusals = flow.net.filter((e) => e.kind === "connection-refused");
      assert.deepEqual(refusals.map((e) => e.kind === "connection-refused" && e.reason), [
        "too-many-endpoints",
        "too-many-endpoints",
      ]);
      assert.deepEqual(refusals.map((e) => e.kind === "connection-refused" && e.worker), [
        "hoarder",
        "hoarder",
      ]);

      // Another credential is not affected.
      const honest = await RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${await flow.token("honest")}`,
      });
      assert.equal(honest.response.status, 101);
      open.push(honest.ws);

      // A closed endpoint gives its place back.
      open.shift()!.destroy();
      let status = 0;
      for (let attempt = 0; attempt < 100 && status !== 101; attempt++) {
        const again = await RawWebSocket.connect(flow.server.port, "/workers", {
          "Sec-WebSocket-Protocol": `workpull.v1, ${hoarder}`,
        });
        status = again.response.status;
        if (status === 101) open.push(again.ws);
        else await new Promise((resolve) => setTimeout(resolve, 20));
      }
      assert.equal(status, 101, "the freed place is available again");
    } finally {
      for (const ws of open) ws.destroy();
      await flow.close();
    }
  },
);

test("the default cap is 64 endpoints per worker token", TIMEOUT, async () => {
  const flow = await startFlow();
  const open: RawWebSocket[] = [];
  try {
    const token = await flow.token("hoarder");
    const statuses = await Promise.all(Array.from({ length: 70 }, async () => {
      const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
      if (response.status === 101) open.push(ws);
      return response.status;
    }));
    assert.equal(statuses.filter((s) => s === 101).length, 64);
    assert.equal(statuses.filter((s) => s === 429).length, 6);
  } finally {
    for (const ws of open) ws.destroy();
    await flow.close();
  }
});
