/**
 * Weaknesses 2 and 9 of the hostile-input issue, and the content-type part of 8: `POST /jobs`
 * bodies that cost the server far more than their size. A million invalid items were parsed and
 * validated in full before the item limit was looked at (12 s frozen, +2.7 GB); a payload nested
 * 100,000 deep gave `500` on Bun (stack overflow); a `text/plain` POST, which a browser sends
 * cross-site without a preflight, was accepted. Each body is now refused after the first bytes
 * that break a limit, and nothing reaches the controller.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { BufferedProducer, WorkPullingController } from "../mod.ts";
import { createWorkpullApp, signToken } from "../server.ts";
import { SECRET, startFlow } from "./fixtures/net_support.ts";

/** An upgrader for in-memory tests: HTTP routes only. */
const noUpgrade = () => async (_c: unknown, next: () => Promise<void>) => await next();

async function setup() {
  const producer = new BufferedProducer<unknown>();
  const controller = new WorkPullingController({ name: "jobs", producer });
  await controller.start();
  const app = createWorkpullApp({
    controller,
    producer,
    upgradeWebSocket: noUpgrade,
    auth: { secret: SECRET },
    submitTimeout: 50,
  });
  const token = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
  return { app, controller, producer, token };
}

/**
 * A request body of `text` in 16 KiB chunks that counts how many bytes the server pulled, so a
 * test can tell a server that stopped reading from one that read it all.
 */
function countedBody(text: string): { body: ReadableStream<Uint8Array>; pulled: () => number } {
  const bytes = new TextEncoder().encode(text);
  let offset = 0;
  const body = new ReadableStream<Uint8Array>({
    pull(controller) {
      if (offset >= bytes.length) return controller.close();
      const chunk = bytes.subarray(offset, offset + 16 * 1024);
      offset += chunk.length;
      controller.enqueue(chunk);
    },
  }, { highWaterMark: 0 });
  return { body, pulled: () => offset };
}

test("a body of a million invalid items is refused with 413 after its first few KB", async () => {
  const { app, controller, token } = await setup();
  try {
    const text = `{"jobs":[${'{"x":1},'.repeat(1_000_000)}{"x":1}]}`; // ~8 MB
    const { body, pulled } = countedBody(text);
    const response = await app.request("/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body,
      duplex: "half",
    } as RequestInit);
    assert.equal(response.status, 413);
    assert.deepEqual(await response.json(), { error: "too-many-items", limit: 1000 });
    assert.ok(pulled() <= 32 * 1024, `the server read ${pulled()} of ${text.length} bytes`);
    assert.equal(controller.stats().totals.stored, 0);
  } finally {
    await controller.close();
  }
});

test("an escaped key cannot dodge the item count", async () => {
  const { app, controller, token } = await setup();
  try {
    const response = await app.request("/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: `{"jo\\u0062s":[${'{"payload":1},'.repeat(1500)}{"payload":1}]}`,
    });
    assert.equal(response.status, 413);
    assert.equal((await response.json()).error, "too-many-items");
    assert.equal(controller.stats().totals.stored, 0);
  } finally {
    await controller.close();
  }
});

test("a Content-Length over the body limit is refused before a byte is read", async () => {
  const { app, controller, token } = await setup();
  try {
    const { body, pulled } = countedBody(`{"payload":"${"x".repeat(9 * 1024 * 1024)}"}`);
    const response = await app.request("/jobs", {
      method: "POST",
      headers: {
        authorization: `Bearer ${token}`,
        "content-type": "application/json",
        "content-length": String(9 * 1024 * 1024 + 14),
      },
      body,
      duplex: "half",
    } as RequestInit);
    assert.equal(response.status, 413);
    assert.equal((await response.json()).error, "body-too-large");
    assert.equal(pulled(), 0);
  } finally {
    await controller.close();
  }
});

test("a payload nested 100,000 deep gets 400 too-deep on every runtime, not 500", async () => {
  const { app, controller, producer, token } = await setup();
  try {
    const depth = 100_000;
    for (
      const payload of [
        "[".repeat(depth) + "]".repeat(depth),
        '{"a":'.repeat(depth) + "1" + "}".repeat(depth),
      ]
    ) {
      const response = await app.request("/jobs", {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: `{"payload":${payload}}`,
      });
      assert.equal(response.status, 400);
      assert.deepEqual(await response.json(), {
        error: "too-deep",
        limit: 67,
        detail: "the body nests too deeply",
      });
    }
    // Just inside the limit is fine: 64 levels of payload.
    const response = await app.request("/jobs", {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ jobs: [{ payload: JSON.parse("[".repeat(64) + "]".repeat(64)) }] }),
    });
    assert.equal(response.status, 503, "accepted, waiting for a worker");
    assert.equal(producer.buffered, 1);
  } finally {
    await controller.close();
  }
});

test("POST /jobs without a JSON content type gets 415 and submits nothing", async () => {
  const { app, controller, producer, token } = await setup();
  try {
    for (const type of ["text/plain", "application/x-www-form-urlencoded", undefined]) {
      const response = await app.request("/jobs", {
        method: "POST",
        headers: {
          authorization: `Bearer ${token}`,
          ...(type === undefined ? {} : { "content-type": type }),
        },
        body: JSON.stringify({ payload: 1 }),
      });
      assert.equal(response.status, 415, String(type));
      assert.equal((await response.json()).error, "unsupported-media-type");
    }
    assert.equal(producer.buffered, 0);
    const charset = await app.request("/jobs", {
      method: "POST",
      headers: {
        authorization: `Bearer ${token}`,
        "content-type": "Application/JSON; charset=utf-8",
      },
      body: JSON.stringify({ payload: 1, messageId: "ok" }),
    });
    assert.equal(charset.status, 503, "accepted, waiting for a worker");
    assert.equal(producer.buffered, 1);
  } finally {
    await controller.close();
  }
});

test(
  "over real sockets, two million-item bodies at once get 413 and submit nothing",
  { timeout: 60_000 },
  async () => {
    const flow = await startFlow();
    try {
      const token = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
      const body = `{"jobs":[${'{"x":1},'.repeat(1_000_000)}{"x":1}]}`;
      const responses = await Promise.all([1, 2].map(() =>
        fetch(new URL("jobs", flow.server.url), {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body,
        })
      ));
      for (const response of responses) {
        assert.equal(response.status, 413);
        assert.equal((await response.json()).error, "too-many-items");
      }
      assert.equal(flow.controller.stats().totals.stored, 0);
    } finally {
      await flow.close();
    }
  },
);
