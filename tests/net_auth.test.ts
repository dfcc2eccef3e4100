import { test } from "node:test";
import assert from "node:assert/strict";
import { extractToken, signToken, TokenError, verifyToken } from "../server.ts";
import { createAuthenticator } from "../src/net/auth.ts";
import { backoffDelay, resolveBackoff } from "../src/net/backoff.ts";

const SECRET = "test-secret-0123456789-abcdefghijklmnopqrstuvwxyz";
const OTHER = "another-secret-0123456789-abcdefghijklmnopqrstuv";
const NOW = 1_700_000_000_000;

async function reasonOf(promise: Promise<unknown>): Promise<string> {
  const error = await promise.then(() => undefined, (e) => e);
  assert.ok(error instanceof TokenError, `expected a TokenError, got ${error}`);
  return error.reason;
}

test("a signed token verifies and carries its claims", async () => {
  const token = await signToken(SECRET, {
    producer: "jobs",
    worker: "w1",
    expiresIn: 60_000,
    now: NOW,
  });
  assert.match(token, /^wp1\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]+$/);
  const claims = await verifyToken(SECRET, token, { now: NOW });
  assert.deepEqual(claims, { producer: "jobs", worker: "w1", exp: (NOW + 60_000) / 1000 });
});

test("tokens are refused with a reason: wrong key, tampering, expiry, garbage", async () => {
  const token = await signToken(SECRET, {
    producer: "jobs",
    worker: "w1",
    expiresIn: 1000,
    now: NOW,
  });
  assert.equal(await reasonOf(verifyToken(OTHER, token, { now: NOW })), "bad-signature");
  const [version, claims, signature] = token.split(".");
  const forged = btoa(JSON.stringify({ producer: "jobs", worker: "admin", exp: 9e9 }))
    .replaceAll("=", "");
  assert.equal(
    await reasonOf(verifyToken(SECRET, `${version}.${forged}.${signature}`)),
    "bad-signature",
  );
  const flipped = signature.slice(0, -2) + (signature.endsWith("AA") ? "BB" : "AA");
  assert.equal(
    await reasonOf(verifyToken(SECRET, `${version}.${claims}.${flipped}`)),
    "bad-signature",
  );
  assert.equal(await reasonOf(verifyToken(SECRET, token, { now: NOW + 1000 })), "expired");
  for (const garbage of ["", "x", "wp1.a", "wp2.a.b", "wp1.!!.b", "wp1.a.b.c", "a".repeat(5000)]) {
    assert.equal(await reasonOf(verifyToken(SECRET, garbage)), "malformed", garbage.slice(0, 20));
  }
});

test("signing refuses short secrets, bad lifetimes and bad names", async () => {
  await assert.rejects(
    signToken("short", { producer: "jobs", expiresIn: 1000 }),
    RangeError,
  );
  await assert.rejects(signToken(SECRET, { producer: "jobs", expiresIn: 0 }), RangeError);
  await assert.rejects(signToken(SECRET, { producer: "", expiresIn: 1000 }), TypeError);
});

test("an undefined secret (an unset environment variable) is named, not a Web Crypto error", async () => {
  // Defect: signToken(undefined) failed deep in Web Crypto with a CryptoKey TypeError.
  await assert.rejects(
    signToken(undefined as never, { producer: "jobs", expiresIn: 1000 }),
    /token secret: .* got undefined \(an unset environment variable\?\)/,
  );
  assert.throws(
    () => createAuthenticator({ secret: undefined as never }, "jobs"),
    /option "auth\.secret" is undefined \(an unset environment variable\?\)/,
  );
});

test("the token is found in the Authorization header, the subprotocol list, or the query", () => {
  const at = (url: string, headers: Record<string, string> = {}) =>
    extractToken(new Request(url, { headers }));
  assert.equal(at("http://h/workers", { authorization: "Bearer abc" }), "abc");
  assert.equal(at("http://h/workers", { "sec-websocket-protocol": "workpull.v1, abc" }), "abc");
  assert.equal(at("http://h/workers", { "sec-websocket-protocol": "workpull.v1" }), undefined);
  assert.equal(at("http://h/workers?token=abc"), "abc");
  assert.equal(at("http://h/workers"), undefined);
  assert.equal(
    at("http://h/workers?token=query", { "sec-websocket-protocol": "workpull.v1, proto" }),
    "proto",
  );
});

test("the built-in authenticator enforces producer, kind and validity", async () => {
  const authenticate = createAuthenticator({ secret: SECRET }, "jobs");
  const request = (token?: string) => new Request(`http://h/x${token ? `?token=${token}` : ""}`);
  const worker = await signToken(SECRET, { producer: "jobs", worker: "w", expiresIn: 60_000 });
  const client = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
  const otherFlow = await signToken(SECRET, { producer: "other", worker: "w", expiresIn: 60_000 });
  const foreign = await signToken(OTHER, { producer: "jobs", worker: "w", expiresIn: 60_000 });
  const expired = await signToken(SECRET, {
    producer: "jobs",
    worker: "w",
    expiresIn: 1000,
    now: Date.now() - 10_000,
  });

  const expiresAt = async (token: string) => (await verifyToken(SECRET, token)).exp * 1000;
  assert.deepEqual(await authenticate(request(worker), "workers"), {
    ok: true,
    identity: { worker: "w" },
    expiresAt: await expiresAt(worker),
  });
  assert.deepEqual(await authenticate(request(client), "jobs"), {
    ok: true,
    identity: {},
    expiresAt: await expiresAt(client),
  });
  const refusals: [string | undefined, "workers" | "jobs" | "stats", string][] = [
    [undefined, "workers", "missing-token"],
    [client, "workers", "wrong-kind"],
    [worker, "jobs", "wrong-kind"],
    [worker, "stats", "wrong-kind"],
    [otherFlow, "workers", "wrong-producer"],
    [foreign, "workers", "bad-signature"],
    [expired, "workers", "expired"],
    ["not-a-token", "workers", "malformed-token"],
    ["wp1.zzw.zzw", "workers", "bad-signature"],
    ["wp1.zzz.zzz", "workers", "malformed-token"], // not canonical: unused bits set
  ];
  for (const [token, route, reason] of refusals) {
    assert.deepEqual(await authenticate(request(token), route), { ok: false, reason }, reason);
  }
});

test("the built-in authenticator checks a token's signature once, and its validity every time", async () => {
  const authenticate = createAuthenticator({ secret: SECRET }, "jobs");
  const request = (token: string) => new Request(`http://h/x?token=${token}`);
  const subtle = crypto.subtle;
  const verify = subtle.verify;
  let verified = 0;
  subtle.verify = function (...args: Parameters<SubtleCrypto["verify"]>) {
    verified += 1;
    return verify.apply(subtle, args);
  };
  const realNow = Date.now;
  try {
    const client = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
    for (let i = 0; i < 3; i++) {
      assert.equal((await authenticate(request(client), "jobs")).ok, true);
    }
    assert.equal(verified, 1, "one signature check for three requests");
    assert.deepEqual(await authenticate(request(client), "workers"), {
      ok: false,
      reason: "wrong-kind",
    });
    const [version, claims, signature] = client.split(".");
    const tampered = `${version}.${claims}.${signature.slice(0, -2)}${
      signature.endsWith("AA") ? "BB" : "AA"
    }`;
    for (let i = 0; i < 2; i++) {
      assert.deepEqual(await authenticate(request(tampered), "jobs"), {
        ok: false,
        reason: "bad-signature",
      });
    }
    assert.equal(verified, 3, "a token that failed is checked again each time");
    Date.now = () => realNow() + 120_000; // the remembered token has expired meanwhile
    assert.deepEqual(await authenticate(request(client), "jobs"), {
      ok: false,
      reason: "expired",
    });
  } finally {
    subtle.verify = verify;
    Date.now = realNow;
  }
});

test("the built-in authenticator refuses short secrets up front", () => {
  assert.throws(() => createAuthenticator({ secret: "short" }, "jobs"), RangeError);
  assert.throws(() => createAuthenticator({ secret: new Uint8Array(16) }, "jobs"), RangeError);
});

test("an authorize hook decides; one that throws refuses", async () => {
  const hook = createAuthenticator({
    authorize: (request) => {
      const key = new URL(request.url).searchParams.get("key");
      if (key === "boom") throw new Error("hook bug");
      return key === "good" ? { worker: "w" } : null;
    },
  }, "jobs");
  assert.deepEqual(await hook(new Request("http://h/?key=good"), "workers"), {
    ok: true,
    identity: { worker: "w" },
  });
  assert.deepEqual(await hook(new Request("http://h/?key=bad"), "workers"), {
    ok: false,
    reason: "refused",
  });
  const errors: unknown[] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => void errors.push(args);
  try {
    assert.deepEqual(await hook(new Request("http://h/?key=boom"), "workers"), {
      ok: false,
      reason: "refused",
    });
  } finally {
    console.error = original;
  }
  assert.equal(errors.length, 1);
});

test("reconnect backoff doubles up to the maximum, jitter taking up to its fraction off", () => {
  const backoff = resolveBackoff("test", { initial: 100, max: 1000, jitter: 0.5 });
  assert.deepEqual([1, 2, 3, 4, 5, 6].map((n) => backoffDelay(n, backoff, 0)), [
    100,
    200,
    400,
    800,
    1000,
    1000,
  ]);
  assert.equal(backoffDelay(4, backoff, 0.999999), 400);
  assert.equal(backoffDelay(1000, backoff, 0), 1000);
  assert.throws(() => resolveBackoff("test", { jitter: 2 }), RangeError);
  assert.throws(() => resolveBackoff("test", { initial: 500, max: 100 }), RangeError);
});
