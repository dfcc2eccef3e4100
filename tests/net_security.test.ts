/**
 * Authentication over real loopback sockets: every bad credential is refused before the
 * upgrade (401) or by a policy close, and changes nothing in the controller.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { connectWorker } from "../client.ts";
import { signToken } from "../server.ts";
import {
  type Flow,
  RawWebSocket,
  SECRET,
  startFlow,
  waitFor,
  within,
} from "./fixtures/net_support.ts";

const TIMEOUT = { timeout: 60_000 };
const OTHER_SECRET = "some-other-secret-0123456789-abcdefghijklmnopqrs";

/** What the controller looks like from outside, for before/after comparisons. */
function snapshot(flow: Flow) {
  const stats = flow.controller.stats();
  return {
    workers: stats.workers.map((w) => [w.worker, w.binding, w.incarnation]),
    pending: stats.pending,
    totals: stats.totals,
  };
}

/** A standard WebSocket client attempt: resolves with whether it opened and how it closed. */
function attempt(url: string, protocols: string[]): Promise<{ opened: boolean; code: number }> {
  return within(
    new Promise((resolve) => {
      let opened = false;
      const socket = new WebSocket(url, protocols);
      socket.onopen = () => (opened = true);
      // Node 22's WebSocket reports a refused handshake with an error and never a close event.
      socket.onerror = () => {
        if (!opened) resolve({ opened, code: 1006 });
      };
      socket.onclose = (event) => resolve({ opened, code: event.code });
    }),
    "the WebSocket attempt to end",
  );
}

test(
  "bad credentials are refused with 401 before the upgrade and change nothing",
  TIMEOUT,
  async () => {
    const flow = await startFlow();
    const honest = connectWorker({
      url: flow.server.workersUrl,
      token: await flow.token("honest"),
      producer: "jobs",
      name: "honest",
      handler: () => {},
    });
    try {
      await waitFor(() => flow.of("worker-bound").length === 1, "the honest worker to bind");
      const before = snapshot(flow);
      const eventsBefore = flow.events.length;
      const now = Date.now();
      const cases: [string, string | undefined, string][] = [
        ["no token", undefined, "missing-token"],
        [
          "a token signed with another secret",
          await signToken(OTHER_SECRET, { producer: "jobs", worker: "w", expiresIn: 60_000 }),
          "bad-signature",
        ],
        [
          "a tampered token",
          (await flow.token("w")).replace(/\.[^.]+$/, ".AAAA"),
          "bad-signature",
        ],
        [
          "an expired token",
          await signToken(SECRET, {
            producer: "jobs",
            worker: "w",
            expiresIn: 1000,
            now: now - 5000,
          }),
          "expired",
        ],
        [
          "a token for another producer",
          await signToken(SECRET, { producer: "other", worker: "w", expiresIn: 60_000 }),
          "wrong-producer",
        ],
        [
          "a client token on the worker route",
          await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 }),
          "wrong-kind",
        ],
      ];
      for (const [label, token, reason] of cases) {
        const protocol = token ? `workpull.v1, ${token}` : "workpull.v1";
        const raw = await RawWebSocket.connect(flow.server.port, "/workers", {
          "Sec-WebSocket-Protocol": protocol,
        });
        assert.equal(raw.response.status, 401, label);
        const query = await RawWebSocket.connect(
          flow.server.port,
          `/workers${token ? `?token=${token}` : ""}`,
        );
        assert.equal(query.response.status, 401, `${label} (query)`);
        const client = await attempt(
          flow.server.workersUrl.href,
          token ? ["workpull.v1", token] : ["workpull.v1"],
        );
        assert.equal(client.opened, false, `${label}: the WebSocket never opens`);
        const refusals = flow.net.filter((e) => e.kind === "unauthorized");
        assert.deepEqual(refusals.slice(-3).map((e) => e.kind === "unauthorized" && e.reason), [
          reason,
          reason,
          reason,
        ], label);
      }
      assert.deepEqual(snapshot(flow), before);
      assert.equal(flow.events.length, eventsBefore, "no controller event at all");
    } finally {
      await honest.close();
      await flow.close();
    }
  },
);

test(
  "a token for worker A cannot register worker B: policy close, nothing bound",
  TIMEOUT,
  async () => {
    const flow = await startFlow();
    try {
      const token = await flow.token("alice");
      const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
      assert.equal(response.status, 101);
      const before = snapshot(flow);
      ws.send(JSON.stringify({
        type: "register",
        producer: "jobs",
        worker: "bob",
        incarnation: "i1",
        nonce: "n1",
        resendInterval: 1000,
      }));
      await waitFor(() => ws.closeCode !== undefined, "the policy close");
      assert.equal(ws.closeCode, 1008);
      assert.deepEqual(ws.messages, [], "no registration answer");
      const rejected = flow.of("frame-rejected");
      assert.deepEqual(rejected.map((e) => [e.worker, e.reason]), [["alice", "identity-mismatch"]]);
      assert.deepEqual(flow.of("worker-bound"), []);
      assert.deepEqual(snapshot(flow), before);
      ws.destroy();

      // The same token does admit alice and her numbered endpoints (one worker process).
      const alice = connectWorker({
        url: flow.server.workersUrl,
        token,
        producer: "jobs",
        name: "alice",
        concurrency: 2,
        handler: () => {},
      });
      try {
        await waitFor(() => flow.of("worker-bound").length === 2, "alice#1 and alice#2 to bind");
        assert.deepEqual(flow.of("worker-bound").map((e) => e.worker).sort(), [
          "alice#1",
          "alice#2",
        ]);
      } finally {
        await alice.close();
      }
    } finally {
      await flow.close();
    }
  },
);

test(
  "the token may travel in the query string instead of the subprotocol list",
  TIMEOUT,
  async () => {
    const flow = await startFlow();
    const worker = connectWorker({
      url: flow.server.workersUrl,
      token: await flow.token("q"),
      tokenIn: "query",
      producer: "jobs",
      name: "q",
      handler: () => {},
    });
    try {
      const { confirmed } = flow.submit(5);
      await within(confirmed, "jobs confirmed through a query-token worker");
      assert.deepEqual(flow.of("worker-bound").map((e) => e.worker), ["q"]);
    } finally {
      await worker.close();
      await flow.close();
    }
  },
);

test("the app mounted under a prefix serves workers, jobs and stats there", TIMEOUT, async () => {
  const flow = await startFlow({}, { basePath: "/flows/jobs" });
  const worker = connectWorker({
    url: flow.server.workersUrl,
    token: await flow.token("m"),
    producer: "jobs",
    name: "m",
    handler: () => {},
  });
  try {
    assert.equal(flow.server.workersUrl.pathname, "/flows/jobs/workers");
    const client = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
    const headers = { authorization: `Bearer ${client}`, "content-type": "application/json" };
    const submitted = await fetch(new URL("jobs", flow.server.url), {
      method: "POST",
      headers,
      body: JSON.stringify({ payload: { hello: "world" }, messageId: "mounted-1" }),
    });
    assert.equal(submitted.status, 200);
    assert.deepEqual(await submitted.json(), { messageId: "mounted-1", seq: 1 });
    const stats = await fetch(new URL("stats", flow.server.url), { headers });
    const body = await stats.json();
    assert.deepEqual(body.workers.map((w: { worker: string }) => w.worker), ["m"]);
    const outside = await fetch(new URL("/stats", flow.server.url), { headers });
    assert.equal(outside.status, 404);
    await outside.body?.cancel();
  } finally {
    await worker.close();
    await flow.close();
  }
});
