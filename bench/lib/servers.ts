/**
 * The server side of the network benchmarks, on the runtime running the benchmark: the
 * workpull server (`serveDeno` / `serveBun` / `serveNode`) and the raw WebSocket baseline
 * server (on Node: `ws`).
 *
 * @module
 */

import type { BufferedProducer, JobQueue, WorkPullingController } from "../../mod.ts";
import { signToken } from "../../server.ts";
import type { WorkpullServer } from "../../server.ts";
import { runtime } from "./runtime.ts";

/** The HMAC secret of every benchmark server (loopback only). */
export const SECRET = "workpull-bench-secret-0123456789-abcdefghij";

/** A worker token for `name` on the flow "bench". */
export function workerToken(name: string): Promise<string> {
  return signToken(SECRET, { producer: "bench", worker: name, expiresIn: 3_600_000 });
}

/** Serve `controller` on 127.0.0.1, a free port, with the runtime's adapter. */
export async function serveWorkpull(
  controller: WorkPullingController,
  producer: BufferedProducer<unknown>,
): Promise<WorkpullServer> {
  if (runtime === "node") {
    const { serveNode } = await import("../../node.ts");
    return await serveNode({ controller, producer, auth: { secret: SECRET } });
  }
  const serve = runtime === "deno"
    ? (await import("../../deno.ts")).serveDeno
    : (await import("../../bun.ts")).serveBun;
  return await serve({ controller, producer, auth: { secret: SECRET } });
}

/** Serve a job queue on 127.0.0.1, a free port, with the runtime's adapter. */
export async function serveJobQueue(queue: JobQueue): Promise<WorkpullServer> {
  if (runtime === "node") {
    const { serveNode } = await import("../../node.ts");
    return await serveNode({ queue, auth: { secret: SECRET } });
  }
  const serve = runtime === "deno"
    ? (await import("../../deno.ts")).serveDeno
    : (await import("../../bun.ts")).serveBun;
  return await serve({ queue, auth: { secret: SECRET } });
}

/**
 * The raw baseline server. Each job is one text message
 * `{"type":"job","id":<random UUID>,"payload":{"n":i}}`; each confirmation is one text message
 * from the client, parsed with `JSON.parse`. Per socket at most `window` jobs are unconfirmed:
 * every confirmation releases the next job (when none is left, `{"type":"heard"}`, which the client
 * ignores). Nothing else: no queue, no redelivery, no validation, no bookkeeping beyond counters.
 */
export interface RawServer {
  readonly port: number;
  /** Sockets connected so far. */
  readonly sockets: number;
  /** Send `jobs` jobs over every connected socket; resolves when all are confirmed. */
  run(jobs: number): Promise<void>;
  close(): Promise<void>;
}

type Send = (text: string) => void;

/**
 * What both raw baselines send for a frame they answer with no job, as workpull's controller does
 * (feature `heard`): a client with Nagle's algorithm on (Deno's) otherwise holds its next frame
 * for the delayed ACK, 40 ms, at the end of every run.
 */
export const HEARD = '{"type":"heard"}';

/** Start the raw baseline server with the given per-socket window. */
export async function rawServer(window: number): Promise<RawServer> {
  const sockets: Send[] = [];
  let total = 0;
  let sent = 0;
  let confirmed = 0;
  let finish: (() => void) | undefined;
  const sendJob = (send: Send) => {
    sent += 1;
    send(`{"type":"job","id":"${crypto.randomUUID()}","payload":${JSON.stringify({ n: sent })}}`);
  };
  const onConfirmation = (send: Send, data: unknown) => {
    JSON.parse(data as string);
    confirmed += 1;
    if (sent < total) sendJob(send);
    else send(HEARD);
    if (confirmed === total) finish?.();
  };
  const run = (jobs: number) =>
    new Promise<void>((resolve) => {
      total = jobs;
      sent = 0;
      confirmed = 0;
      finish = resolve;
      for (const send of sockets) {
        for (let i = 0; i < window && sent < total; i++) sendJob(send);
      }
    });

  if (runtime === "node") {
    // Node: a `ws` server, the library serveNode's WebSockets are built on.
    const { WebSocketServer } = await import("ws");
    const server = new WebSocketServer({ port: 0, host: "127.0.0.1", perMessageDeflate: false });
    server.on("connection", (socket) => {
      const send: Send = (text) => socket.send(text);
      sockets.push(send);
      socket.on("message", (data) => onConfirmation(send, data.toString()));
    });
    await new Promise((resolve) => server.once("listening", resolve));
    return {
      port: (server.address() as { port: number }).port,
      get sockets() {
        return sockets.length;
      },
      run,
      close: () =>
        new Promise<void>((resolve) => {
          for (const client of server.clients) client.terminate();
          server.close(() => resolve());
        }),
    };
  }
  if (runtime === "deno") {
    const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (request) => {
      const { socket, response } = Deno.upgradeWebSocket(request);
      const send: Send = (text) => socket.send(text);
      socket.onopen = () => sockets.push(send);
      socket.onmessage = (event) => onConfirmation(send, event.data);
      return response;
    });
    return {
      port: server.addr.port,
      get sockets() {
        return sockets.length;
      },
      run,
      close: () => server.shutdown(),
    };
  }
  type BunSocket = { send(text: string): number; data: { send: Send } };
  const bun = (globalThis as unknown as {
    Bun: {
      serve(options: unknown): { port: number; stop(force: boolean): Promise<void> | void };
    };
  }).Bun;
  const server = bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: (request: Request, srv: { upgrade(request: Request, options: unknown): boolean }) =>
      srv.upgrade(request, { data: {} }) ? undefined : new Response("upgrade", { status: 426 }),
    websocket: {
      open: (ws: BunSocket) => {
        ws.data.send = (text) => void ws.send(text);
        sockets.push(ws.data.send);
      },
      message: (ws: BunSocket, message: string) => onConfirmation(ws.data.send, message),
    },
  });
  return {
    port: server.port,
    get sockets() {
      return sockets.length;
    },
    run,
    close: async () => void await server.stop(true),
  };
}
