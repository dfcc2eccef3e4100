/**
 * The worker client against a scripted `WebSocket`: subprotocol and token, reconnects with the
 * same incarnation, ack coalescing, and a clean stop.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { createServer } from "node:http";
import type { AddressInfo } from "node:net";
import { connectWorker, type WebSocketConstructor } from "../client.ts";
import { settle } from "../testing.ts";
import { startFlow, waitFor, within } from "./fixtures/net_support.ts";

/** A WebSocket the test drives by hand. */
class ScriptedSocket {
  static instances: ScriptedSocket[] = [];
  readyState = 0;
  readonly sent: Record<string, unknown>[] = [];
  onopen: ((event: Event) => void) | null = null;
  onmessage: ((event: { data: string }) => void) | null = null;
  onclose: ((event: { code: number; reason: string }) => void) | null = null;
  onerror: ((event: Event) => void) | null = null;

  constructor(readonly url: string, readonly protocols: string[]) {
    ScriptedSocket.instances.push(this);
  }

  send(data: string): void {
    this.sent.push(JSON.parse(data));
  }

  close(code = 1000, reason = ""): void {
    if (this.readyState >= 2) return;
    this.readyState = 3;
    queueMicrotask(() => this.onclose?.({ code, reason }));
  }

  open(): void {
    this.readyState = 1;
    this.onopen?.(new Event("open"));
  }

  receive(frame: unknown): void {
    this.onmessage?.({ data: JSON.stringify(frame) });
  }

  /** The connection drops without a close handshake. */
  drop(): void {
    this.readyState = 3;
    this.onclose?.({ code: 1006, reason: "" });
  }

  types(): unknown[] {
    return this.sent.map((frame) => frame.type);
  }
}

function client(window = 4) {
  ScriptedSocket.instances = [];
  let tokens = 0;
  const handled: string[] = [];
  const connection = connectWorker({
    url: "http://example.test/workers",
    token: () => `tok${++tokens}`,
    producer: "jobs",
    name: "w",
    window,
    backoff: { initial: 1, max: 2 },
    handler: ({ messageId }) => void handled.push(messageId),
    WebSocket: ScriptedSocket as unknown as typeof WebSocket,
  });
  return { connection, handled, sockets: ScriptedSocket.instances };
}

test("the client offers workpull.v1 with the token and reconnects under the same incarnation", async () => {
  const { connection, sockets } = client();
  try {
    await waitFor(() => sockets.length === 1, "a first socket");
    assert.equal(sockets[0].url, "ws://example.test/workers");
    assert.deepEqual(sockets[0].protocols, ["workpull.v1", "tok1"]);
    sockets[0].open();
    const first = sockets[0].sent[0];
    assert.equal(first.type, "register");
    assert.equal(first.worker, "w");
    sockets[0].drop();
    await waitFor(() => sockets.length === 2, "a reconnect");
    assert.deepEqual(sockets[1].protocols, ["workpull.v1", "tok2"], "a fresh token per connect");
    sockets[1].open();
    const again = sockets[1].sent[0];
    assert.equal(again.incarnation, first.incarnation);
    assert.notEqual(again.nonce, first.nonce);
  } finally {
    await connection.close();
  }
  assert.equal(sockets.length, 2, "no reconnect after close");
  assert.equal(sockets[1].readyState, 3);
});

test("an ack followed at once by a request is sent as the request alone", async () => {
  const { connection, sockets, handled } = client(4);
  try {
    await waitFor(() => sockets.length === 1, "a socket");
    const socket = sockets[0];
    socket.open();
    const nonce = socket.sent[0].nonce;
    socket.receive({ type: "registered", session: "s", binding: "b", nextSeq: 1, nonce });
    assert.deepEqual(socket.sent[1], {
      type: "request",
      session: "s",
      nonce,
      confirmed: 0,
      upTo: 4,
      resend: true,
    });
    const job = (seq: number) => ({
      type: "jobs",
      session: "s",
      seq,
      jobs: [{ id: `m${seq}`, payload: seq }],
    });
    socket.receive(job(1)); // done: 3 of 4 still granted, buffer empty -> an ack, held
    await settle();
    assert.deepEqual(handled, ["m1"]);
    assert.equal(socket.sent.length, 2, "the ack is held");
    socket.receive(job(2)); // done: 2 left -> a top-up request, which supersedes the ack
    await settle();
    assert.deepEqual(socket.types(), ["register", "request", "request"]);
    assert.equal(socket.sent[2].confirmed, 2);
    socket.receive(job(3)); // done: 3 left of 6, buffer empty -> an ack, sent after a moment
    await settle();
    await waitFor(() => socket.sent.length === 4, "the ack");
    // Had the first ack survived, its timer (set earlier) would have put it before this one.
    assert.deepEqual(socket.types(), ["register", "request", "request", "ack"]);
    assert.deepEqual(socket.sent[3], { type: "ack", session: "s", nonce, confirmed: 3 });
  } finally {
    await connection.close();
  }
});

test("concurrency N opens N sockets for the endpoints name#1..#N", async () => {
  ScriptedSocket.instances = [];
  const connection = connectWorker({
    url: "ws://example.test/workers",
    token: "t",
    tokenIn: "query",
    producer: "jobs",
    name: "pool",
    concurrency: 3,
    handler: () => {},
    WebSocket: ScriptedSocket as unknown as typeof WebSocket,
  });
  try {
    await waitFor(() => ScriptedSocket.instances.length === 3, "three sockets");
    for (const socket of ScriptedSocket.instances) {
      assert.equal(socket.url, "ws://example.test/workers?token=t");
      assert.deepEqual(socket.protocols, ["workpull.v1"]);
      socket.open();
    }
    assert.deepEqual(
      ScriptedSocket.instances.map((socket) => socket.sent[0].worker),
      ["pool#1", "pool#2", "pool#3"],
    );
    assert.equal(connection.connected, 3);
  } finally {
    await connection.close();
  }
});

test("an error before the socket opens is a failed attempt, without waiting for a close event", async () => {
  // Node 22's WebSocket fires only `error` (and stays CONNECTING) when the handshake is refused;
  // the client waited for its connect timeout (10 s by default) before trying again.
  const { connection, sockets } = client();
  try {
    await waitFor(() => sockets.length === 1, "a first socket");
    sockets[0].onerror?.(new Event("error"));
    await waitFor(() => sockets.length === 2, "a second attempt after the error", 2000);
    sockets[1].open();
    assert.equal(sockets[1].sent[0].type, "register");
  } finally {
    await connection.close();
  }
});

test("a refused handshake over a real socket is retried long before the connect timeout", async () => {
  // 503 is a refusal that retrying can heal (a 401 stops the worker: tests/net_refused.test.ts).
  const server = createServer((_request, response) => {
    response.writeHead(503, { "content-type": "application/json", "retry-after": "1" });
    response.end('{"error":"too-many-connections"}');
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const { port } = server.address() as AddressInfo;
  const disconnects: number[] = [];
  const connection = connectWorker({
    url: `ws://127.0.0.1:${port}/workers`,
    token: "t",
    producer: "jobs",
    name: "w",
    handler: () => {},
    connectTimeout: 60_000,
    backoff: { initial: 1, max: 2 },
    drainOnSignals: false,
  });
  connection.addEventListener("disconnected", (event) => disconnects.push(event.code));
  try {
    await waitFor(() => disconnects.length >= 2, "two refused attempts", 5000);
  } finally {
    await connection.close();
    await new Promise((resolve) => server.close(resolve));
  }
});

test("a worker on the ws package (Node before 22), which offers `workpull.v1,<token>` without a space, works against this runtime's server", async () => {
  const { WebSocket } = await import("ws");
  const flow = await startFlow();
  const connection = connectWorker({
    url: flow.server.workersUrl,
    token: await flow.token("w"),
    producer: "jobs",
    name: "w",
    handler: () => {},
    WebSocket: WebSocket as unknown as WebSocketConstructor,
    drainOnSignals: false,
  });
  try {
    await within(flow.submit(3).confirmed, "3 jobs confirmed by the ws worker");
    assert.equal(flow.controller.stats().totals.confirmed, 3);
  } finally {
    await connection.close();
    await flow.close();
  }
});
