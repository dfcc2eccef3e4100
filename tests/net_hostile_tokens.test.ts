/**
 * Weakness 8 of the hostile-input issue: credentials. Three other spellings of a signature's last
 * base64url character verified (its unused bits were ignored); expiry was checked only at the
 * upgrade (jobs flowed 3.5 s after it); there was no revocation short of rotating the secret, no
 * way to rotate with overlap, and no Origin check for cookie-based `authorize` hooks.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { CloseCode } from "../mod.ts";
import { connectWorker, type DisconnectedEvent } from "../client.ts";
import { signToken, TokenError, verifyToken } from "../server.ts";
import { RawWebSocket, SECRET, startFlow, waitFor, within } from "./fixtures/net_support.ts";

const TIMEOUT = { timeout: 60_000 };
const ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/** Other spellings of `text`'s last character that differ only in unused low bits. */
function siblings(text: string): string[] {
  const unused = (text.length * 6) % 8;
  const last = ALPHABET.indexOf(text.at(-1)!);
  return [...ALPHABET]
    .filter((_, i) => i !== last && i >> unused === last >> unused)
    .map((c) => text.slice(0, -1) + c);
}

async function reasonOf(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(() => undefined, (e) => e);
  assert.ok(error instanceof TokenError, `expected a TokenError, got ${error}`);
  return error.reason;
}

test("only the canonical spelling of a token verifies: other last characters are malformed", async () => {
  const token = await signToken(SECRET, { producer: "jobs", worker: "w", expiresIn: 60_000 });
  const [version, claims, signature] = token.split(".");
  // 32 bytes of HMAC in 43 characters: the last one holds 4 bits of it and 2 unused bits.
  assert.equal(siblings(signature).length, 3);
  for (const spelled of siblings(signature)) {
    const forged = `${version}.${claims}.${spelled}`;
    assert.equal(await reasonOf(verifyToken(SECRET, forged)), "malformed", spelled.slice(-3));
  }
  // The claims part too, when its length leaves unused bits.
  for (const spelled of siblings(claims)) {
    assert.equal(
      await reasonOf(verifyToken(SECRET, `${version}.${spelled}.${signature}`)),
      "malformed",
    );
  }
  assert.equal((await verifyToken(SECRET, token)).worker, "w");
});

test("keys rotate with overlap: a token names its key; an unknown key is refused", async () => {
  const OLD = "the-old-secret-0123456789-abcdefghijklmnopqrstuv";
  const NEW = "the-new-secret-0123456789-abcdefghijklmnopqrstuv";
  const old = await signToken(OLD, { producer: "jobs", expiresIn: 60_000, kid: "2024-06" });
  const fresh = await signToken(NEW, { producer: "jobs", expiresIn: 60_000, kid: "2024-09" });
  assert.match(fresh, /^wp1\.2024-09\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
  const both = { keys: { "2024-06": OLD, "2024-09": NEW } };
  assert.equal((await verifyToken(both, old)).kid, "2024-06");
  assert.equal((await verifyToken(both, fresh)).kid, "2024-09");
  const newOnly = { keys: { "2024-09": NEW } };
  assert.equal(await reasonOf(verifyToken(newOnly, old)), "unknown-key");
  // A key id cannot be swapped: the signature covers it.
  const swapped = fresh.replace("2024-09", "2024-06");
  assert.equal(await reasonOf(verifyToken(both, swapped)), "bad-signature");
  // Tokens without a key id need `secret`.
  const plain = await signToken(OLD, { producer: "jobs", expiresIn: 60_000 });
  assert.equal(await reasonOf(verifyToken(newOnly, plain)), "unknown-key");
  assert.equal((await verifyToken({ secret: OLD, keys: newOnly.keys }, plain)).kid, undefined);
});

test(
  "a live connection is closed with 4003 when its token expires; the client renews at once and loses nothing",
  TIMEOUT,
  async () => {
    const flow = await startFlow();
    let issued = 0;
    const worker = connectWorker({
      url: flow.server.workersUrl,
      token: () => {
        issued += 1;
        return signToken(SECRET, { producer: "jobs", worker: "w", expiresIn: 1500 });
      },
      producer: "jobs",
      name: "w",
      window: 10,
      handler: () => new Promise((resolve) => setTimeout(resolve, 2)),
    });
    const disconnects: DisconnectedEvent[] = [];
    worker.addEventListener("disconnected", (event) => disconnects.push(event));
    try {
      let feeding = true;
      const feed = (async () => {
        while (feeding) await flow.submit(50).confirmed;
      })();
      await waitFor(
        () => disconnects.some((e) => e.code === CloseCode.credentialExpired),
        "the expired connection to be closed with 4003",
        10_000,
      );
      const expired = disconnects.find((e) => e.code === CloseCode.credentialExpired)!;
      assert.equal(expired.retryIn, 0, "reconnect at once, no backoff");
      assert.ok(flow.net.some((e) => e.kind === "credential-expired" && e.worker === "w"));
      await waitFor(() => issued >= 2 && worker.connected === 1, "a renewed connection");
      const mark = worker.processed;
      await waitFor(() => worker.processed > mark + 20, "jobs to flow on the renewed token");
      feeding = false;
      await within(feed, "every submitted job to be confirmed", 30_000);
    } finally {
      await worker.close();
      await flow.close();
    }
  },
);

test(
  "a revoked token is refused at the upgrade and its live connection closed with 4003",
  TIMEOUT,
  async () => {
    const revoked = new Set<string>();
    const flow = await startFlow({}, {
      auth: { secret: SECRET, isRevoked: (claims) => revoked.has(claims.jti ?? "") },
      recheckInterval: 100,
    });
    try {
      const token = await signToken(SECRET, {
        producer: "jobs",
        worker: "w",
        expiresIn: 60_000,
        id: "token-1",
      });
      const open = await RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
      assert.equal(open.response.status, 101);
      revoked.add("token-1");
      await waitFor(() => open.ws.closeCode !== undefined, "the revoked connection to close");
      assert.equal(open.ws.closeCode, CloseCode.credentialExpired);
      assert.ok(flow.net.some((e) => e.kind === "credential-revoked"));
      const again = await RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
      assert.equal(again.response.status, 401);
      assert.ok(flow.net.some((e) => e.kind === "unauthorized" && e.reason === "revoked"));
      open.ws.destroy();
    } finally {
      await flow.close();
    }
  },
);

test(
  "with allowedOrigins, a foreign browser Origin gets 403; no Origin and listed ones pass",
  TIMEOUT,
  async () => {
    const flow = await startFlow({}, { allowedOrigins: ["https://app.example"] });
    try {
      const token = await flow.token("w");
      const statusWith = async (origin?: string) => {
        const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
          "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
          ...(origin ? { Origin: origin } : {}),
        });
        ws.destroy();
        return response.status;
      };
      assert.equal(await statusWith("https://evil.example"), 403);
      assert.equal(await statusWith("https://app.example"), 101);
      assert.equal(await statusWith(undefined), 101);
      assert.ok(flow.net.some((e) => e.kind === "forbidden-origin"));
      const client = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
      const post = await fetch(new URL("jobs", flow.server.url), {
        method: "POST",
        headers: {
          authorization: `Bearer ${client}`,
          "content-type": "application/json",
          origin: "https://evil.example",
        },
        body: JSON.stringify({ payload: 1 }),
      });
      assert.equal(post.status, 403);
      assert.equal(flow.producer.buffered, 0);
    } finally {
      await flow.close();
    }
  },
);
