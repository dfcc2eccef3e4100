/**
 * On Bun a request refused with its body unread closes its connection (`src/net/unread_body.ts`):
 * `serveBun` answers `Connection: close`, and Bun closes the socket instead of receiving the body
 * it refused. A request whose body was read keeps its connection, on every runtime.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { BufferedProducer, WorkPullingController } from "../mod.ts";
import { createWorkpullApp, signToken } from "../server.ts";
import { runtime, SECRET, startFlow, within } from "./fixtures/net_support.ts";
import { closingUnreadBodies, leavesBodyUnread } from "../src/net/unread_body.ts";

const TIMEOUT = { timeout: 60_000 };

/** What a raw HTTP/1.1 exchange gave: the answer's head, and whether the server closed. */
interface Exchange {
  readonly status: number;
  readonly connection: string | undefined;
  readonly closedByServer: boolean;
}

/**
 * Send a `POST /jobs` head declaring `declared` bytes, then `sent` bytes of body, over a raw
 * socket. Resolves once the server closed the socket, or (`closedByServer` false) once the
 * answer's head is in and `waitForClose` is false.
 */
function postRaw(
  url: URL,
  options: { token?: string; declared: number; body: string; waitForClose: boolean },
): Promise<Exchange> {
  return within(
    new Promise<Exchange>((resolve, reject) => {
      const socket = net.connect(Number(url.port), "127.0.0.1");
      let text = "";
      const exchange = (closedByServer: boolean): Exchange | undefined => {
        const head = text.split("\r\n\r\n")[0];
        const status = /^HTTP\/1\.1 (\d{3})/.exec(head)?.[1];
        if (!status) return undefined;
        const connection = /\r\nconnection: *([^\r]*)/i.exec(head)?.[1]?.toLowerCase();
        return { status: Number(status), connection, closedByServer };
      };
      socket.on("data", (chunk) => {
        text += chunk.toString();
        if (options.waitForClose || !text.includes("\r\n\r\n")) return;
        const answer = exchange(false);
        if (!answer) return;
        socket.destroy();
        resolve(answer);
      });
      socket.on("error", () => {}); // a reset after the answer: the close below decides
      socket.on("close", () => {
        const answer = exchange(true);
        if (answer) resolve(answer);
        else reject(new Error(`the server closed without an answer: ${JSON.stringify(text)}`));
      });
      const auth = options.token ? `authorization: Bearer ${options.token}\r\n` : "";
      socket.write(
        `POST ${url.pathname} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n` +
          `${auth}content-length: ${options.declared}\r\n\r\n${options.body}`,
      );
    }),
    "the server's answer",
    20_000,
  );
}

test(
  "over real sockets on Bun, a body refused unread gets Connection: close and the socket closes",
  {
    ...TIMEOUT,
    skip: runtime !== "bun" && "serveBun's: Deno's and Node's servers are left as they are",
  },
  async () => {
    const flow = await startFlow();
    try {
      const url = new URL("jobs", flow.server.url);
      const token = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
      const partial = `{"jobs":[${"1,".repeat(32 * 1024)}`; // 64 KiB of a body declared far larger

      // Over the body limit with a client token; any size without one.
      for (
        const refused of [
          { status: 413, token, declared: 64 << 20 },
          { status: 401, token: undefined, declared: 1 << 20 },
        ]
      ) {
        const { status, ...head } = refused;
        const answer = await postRaw(url, { ...head, body: partial, waitForClose: true });
        assert.deepEqual(answer, { status, connection: "close", closedByServer: true });
      }

      assert.equal(flow.controller.stats().totals.stored, 0);
    } finally {
      await flow.close();
    }
  },
);

test("over real sockets, a body read to its end keeps the connection", TIMEOUT, async () => {
  const flow = await startFlow({}, { submitTimeout: 50 });
  try {
    const url = new URL("jobs", flow.server.url);
    const token = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
    const body = JSON.stringify({ payload: { n: 1 } });
    const answer = await postRaw(url, {
      token,
      declared: body.length,
      body,
      waitForClose: false,
    });
    assert.equal(answer.status, 503, "accepted, waiting for a worker");
    assert.notEqual(answer.connection, "close");
  } finally {
    await flow.close();
  }
});

test("which of the app's answers leave a body unread", async () => {
  const producer = new BufferedProducer<unknown>();
  const controller = new WorkPullingController({ name: "jobs", producer });
  await controller.start();
  try {
    const app = createWorkpullApp({
      controller,
      producer,
      upgradeWebSocket: () => async (_c: unknown, next: () => Promise<void>) => await next(),
      auth: { secret: SECRET },
      submitTimeout: 20,
    });
    const token = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
    // In memory nothing sets Content-Length (a runtime's server does from the wire): say it.
    const fetch = closingUnreadBodies(app.fetch);
    const request = (path: string, init?: RequestInit) =>
      fetch(new Request(`http://localhost${path}`, init), undefined) as Promise<Response>;
    const post = (headers: Record<string, string>, body: string) =>
      request("/jobs", {
        method: "POST",
        headers: {
          "content-type": "application/json",
          "content-length": String(body.length),
          ...headers,
        },
        body,
      });
    const connection = (response: Response) => response.headers.get("connection");
    // Refused before a byte is read: no credentials, a declared length over the limit.
    assert.equal(connection(await post({}, '{"payload":1}')), "close");
    const large = await post(
      { authorization: `Bearer ${token}`, "content-length": String(64 << 20) },
      '{"payload":1}',
    );
    assert.equal(large.status, 413);
    assert.equal(connection(large), "close");
    // Refused while being read: malformed.
    const malformed = await post({ authorization: `Bearer ${token}` }, '{"payload":');
    assert.equal(malformed.status, 400);
    assert.equal(connection(malformed), "close");
    // Read to its end: the connection stays.
    const read = await post({ authorization: `Bearer ${token}` }, '{"payload":1}');
    assert.equal(read.status, 503);
    assert.equal(connection(read), null);
    assert.equal(connection(await request("/stats")), null, "no body: nothing to close for");
  } finally {
    await controller.close();
  }

  const request = (headers: Record<string, string>) =>
    new Request("http://localhost/jobs", { method: "POST", headers, body: "{}" });
  assert.equal(leavesBodyUnread(request({ "content-length": "2" }), 401), true);
  assert.equal(leavesBodyUnread(request({ "transfer-encoding": "chunked" }), 401), true);
  assert.equal(leavesBodyUnread(request({ "content-length": "0" }), 401), false);
  assert.equal(leavesBodyUnread(new Request("http://localhost/stats"), 401), false);
  const consumed = request({ "content-length": "2" });
  await consumed.text();
  assert.equal(leavesBodyUnread(consumed, 503), false);
  assert.equal(leavesBodyUnread(consumed, 413), true, "refused while read: maybe cut short");
});
