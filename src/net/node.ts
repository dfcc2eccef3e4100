/**
 * Serving the workpull app on Node: `@hono/node-server` turns Node's HTTP server into the app's
 * fetch handler, and the WebSocket upgrade is done here over `ws`, the library Node's WebSocket
 * servers are built on. The only module that imports either.
 *
 * Why not `@hono/node-ws`: it keeps each authenticated upgrade in a map until `ws` completes the
 * handshake, and `ws` never completes it for a client that left while the request was being
 * authenticated, so every such client leaks its request (about 7 KB, measured) for the life of
 * the server. Here the upgrade is one function: authenticate through the app, then hand the
 * socket to `ws` if it is still there; nothing is kept for a client that left.
 *
 * What Node gets so it behaves as the Deno and Bun adapters do:
 * - **A frame ceiling in `ws` itself** (`maxPayload`, default four times the app's
 *   `maxFrameBytes`, at least 1 MiB): a larger frame is refused at its header with 1009 instead
 *   of being buffered (`ws` would accept 100 MiB). The app's own `maxFrameBytes` check still
 *   reports frames between the two limits.
 * - **The subprotocol answer** is `workpull.v1` and never another offered entry (the token).
 * - **A ping-based idle timeout**: a socket quiet for `idleTimeout` is pinged and terminated if
 *   it is still silent one `idleTimeout` later (Deno and Bun do this themselves; `ws` does not).
 * - **Backpressure** is the socket edge's (`socket_link.ts`): a `ws` socket reports the bytes it
 *   has not yet written in `bufferedAmount`, and a connection past `maxBufferedBytes` is
 *   terminated, not closed politely behind a buffer its peer does not read.
 * - **Nothing escapes**: a socket error during the upgrade, an exception in a handler, a refused
 *   handshake: none can end the process.
 *
 * @module
 */

import type { IncomingMessage } from "node:http";
import { STATUS_CODES } from "node:http";
import type { Duplex } from "node:stream";
import { createAdaptorServer } from "@hono/node-server";
import { defineWebSocketHelper, WSContext, type WSEvents } from "hono/ws";
import { type RawData, type WebSocket, WebSocketServer } from "ws";
import { SUBPROTOCOL } from "../protocol/schemas.ts";
import { buildWorkpullHono, DEFAULT_MAX_FRAME_BYTES, type WebSocketUpgrader } from "./app.ts";
import { guard as guardAs } from "./safety.ts";
import { guardConnections } from "./connection_guard.ts";
import { loggedListener, report } from "./net_event.ts";
import { watchAccepts } from "./accept_watchdog.ts";
import { type Logger, loggerOption } from "../core/logger.ts";
import {
  closeOnShutdown,
  idleSeconds,
  listenOptions,
  servedApps,
  servedRoot,
  type ServeOptions,
  serverUrls,
  type WorkpullServer,
} from "./serve.ts";

/** Options of {@linkcode nodeWebSocket}. */
export interface NodeWebSocketOptions {
  /**
   * Ping a WebSocket that has been quiet this long and terminate it when it stays silent for as
   * long again, ms (rounded up to whole seconds). Default 30,000.
   */
  readonly idleTimeout?: number;
  /**
   * Frames larger than this are refused by `ws` itself (close 1009) at their header, bytes. Keep
   * it above the app's `maxFrameBytes` so the app can report oversized frames. Default 1 MiB.
   */
  readonly maxPayloadLength?: number;
  /** Where contained failures are reported. Default: `console.error`. */
  readonly logger?: Logger;
}

/**
 * A Node HTTP server (`http.Server`, `https.Server`, or what `serve` from `@hono/node-server`
 * returns): where upgrade requests arrive. Typed loosely so that no Node type is needed to
 * compile against workpull.
 */
export interface NodeUpgradeSource {
  /** Node's event registration; the adapter listens to `upgrade`. */
  // deno-lint-ignore no-explicit-any
  on(event: "upgrade", listener: (...args: any[]) => void): unknown;
}

/** The app that routes upgrade requests: a Hono app or a `WorkpullApp`. */
export interface NodeUpgradeApp {
  /** Hono's in-memory request, with the Node bindings as its environment. */
  request(input: URL, init: RequestInit, env: object): Response | Promise<Response>;
}

/** WebSockets on a Node HTTP server; see {@linkcode nodeWebSocket}. */
export interface NodeWebSocket {
  /** The upgrade for `createWorkpullApp` and `mountWorkpull`. */
  readonly upgradeWebSocket: WebSocketUpgrader;
  /** Take the upgrade requests of `server` and route them through `app` (the app served). */
  injectWebSocket(server: NodeUpgradeSource, app: NodeUpgradeApp): void;
  /** Terminate every WebSocket and stop pinging. The HTTP server is left as it is. */
  close(): void;
}

/** Where an upgrade request's route leaves its WebSocket handlers (private to this module). */
const PENDING = Symbol("workpull.pendingUpgrade");
type PendingUpgrade = { events?: WSEvents<WebSocket> };
type UpgradeEnv = { incoming: IncomingMessage; [PENDING]: PendingUpgrade };

/** Per-socket liveness for the idle timeout. */
interface Liveness {
  /** A frame or a pong arrived since the last tick. */
  heard: boolean;
  /** A ping went out and nothing has come since. */
  pinged: boolean;
}

/**
 * Node's WebSocket upgrade for `createWorkpullApp` and `mountWorkpull`: give the app
 * `upgradeWebSocket`, then `injectWebSocket(server, app)` once the server exists.
 *
 * @example Mount into an existing Hono app on Node
 * ```ts ignore
 * import { Hono } from "hono";
 * import { serve } from "@hono/node-server";
 * import { mountWorkpull } from "workpull/server";
 * import { nodeWebSocket } from "workpull/node";
 *
 * const app = new Hono();
 * const sockets = nodeWebSocket({ idleTimeout: 20_000 });
 * mountWorkpull(app, "/workpull", { controller, upgradeWebSocket: sockets.upgradeWebSocket, auth: { secret } });
 * const server = serve({ fetch: app.fetch, port: 8080 });
 * sockets.injectWebSocket(server, app);
 * ```
 */
export function nodeWebSocket(options: NodeWebSocketOptions = {}): NodeWebSocket {
  const idleMs = idleSeconds("nodeWebSocket", options.idleTimeout) * 1000;
  const maxPayload = options.maxPayloadLength ?? 1024 * 1024;
  if (!Number.isSafeInteger(maxPayload) || maxPayload < 1) {
    throw new RangeError(
      `Cannot create nodeWebSocket: option "maxPayloadLength" must be a positive integer, got ${maxPayload}`,
    );
  }
  const wss = new WebSocketServer({
    noServer: true,
    maxPayload,
    perMessageDeflate: false,
    handleProtocols: (offered) => offered.has(SUBPROTOCOL) ? SUBPROTOCOL : false,
  });
  const liveness = new Map<WebSocket, Liveness>();
  const logger = loggerOption("nodeWebSocket", options.logger);
  const guard = (what: string, body: () => void) => guardAs(what, body, logger);
  let ticker: ReturnType<typeof setInterval> | undefined;

  /** One idle-timeout tick: ping the quiet, terminate the silent after a ping. */
  const tick = () => {
    for (const [ws, state] of liveness) {
      if (state.heard) {
        state.heard = false;
        state.pinged = false;
      } else if (!state.pinged) {
        state.pinged = true;
        guard("a WebSocket ping", () => ws.ping());
      } else {
        ws.terminate();
      }
    }
  };

  const upgradeWebSocket = defineWebSocketHelper<WebSocket>((c, events) => {
    const pending = (c.env as Partial<UpgradeEnv> | undefined)?.[PENDING];
    // Not through `injectWebSocket` (an in-memory request): nothing to upgrade, the route goes on.
    if (!pending || c.req.header("upgrade")?.toLowerCase() !== "websocket") return;
    pending.events = events;
    return new Response(null, { status: 200 });
  });

  /** Authenticate and route one upgrade request through the app, then complete or refuse it. */
  const upgrade = async (
    app: NodeUpgradeApp,
    request: IncomingMessage,
    socket: Duplex,
    head: Buffer,
  ) => {
    const pending: PendingUpgrade = {};
    let response: Response;
    try {
      const env: UpgradeEnv = { incoming: request, [PENDING]: pending };
      response = await app.request(requestUrl(request), { headers: headersOf(request) }, env);
    } catch {
      response = new Response(null, { status: 400 });
    }
    const events = pending.events;
    if (!events || response.status !== 200) return refuse(socket, response);
    // The client left while it was authenticated: nothing to complete, nothing kept.
    if (socket.destroyed || !socket.writable) return socket.destroy();
    wss.handleUpgrade(request, socket, head, (ws) => open(ws, events, request));
  };

  /** Wire a completed WebSocket to the route's handlers. */
  const open = (ws: WebSocket, events: WSEvents<WebSocket>, request: IncomingMessage) => {
    const context = new WSContext<WebSocket>({
      raw: ws,
      url: requestUrl(request),
      protocol: ws.protocol,
      get readyState() {
        return ws.readyState as 0 | 1 | 2 | 3;
      },
      send: (data, sendOptions) => ws.send(data, { compress: sendOptions.compress }),
      close: (code, reason) => ws.close(code, reason),
    });
    const state: Liveness = { heard: true, pinged: false };
    liveness.set(ws, state);
    ws.on("pong", () => (state.heard = true));
    ws.on("message", (data: RawData, isBinary: boolean) => {
      state.heard = true;
      const message = isBinary ? arrayBufferOf(data) : data.toString();
      guard(
        "a WebSocket message handler",
        () => events.onMessage?.(new MessageEvent("message", { data: message }), context),
      );
    });
    ws.on("close", (code: number, reason: Buffer) => {
      liveness.delete(ws);
      guard(
        "a WebSocket close handler",
        () => events.onClose?.(closeEvent(code, reason.toString()), context),
      );
    });
    ws.on("error", () => {
      // A close event follows (ws closes the socket on every error, 1009 for a large frame).
      guard("a WebSocket error handler", () => events.onError?.(new Event("error"), context));
    });
    guard("a WebSocket open handler", () => events.onOpen?.(new Event("open"), context));
  };

  return {
    upgradeWebSocket,
    injectWebSocket(server, app) {
      server.on("upgrade", (request: IncomingMessage, socket: Duplex, head: Buffer) => {
        // Until ws owns the socket, a reset would be an 'error' event nobody listens to.
        socket.on("error", () => {});
        upgrade(app, request, socket, head).catch(() => socket.destroy());
      });
      ticker ??= setInterval(tick, idleMs);
      // The server keeps the process alive, not the idle timer.
      (ticker as { unref?: () => void }).unref?.();
    },
    close() {
      clearInterval(ticker);
      ticker = undefined;
      for (const ws of wss.clients) ws.terminate();
      liveness.clear();
      wss.close();
    },
  };
}

/**
 * Serve a controller on Node: `GET /workers` (WebSocket), `POST /jobs` (with `producer`) and
 * `GET /stats` under `basePath`, on 127.0.0.1 by default. Resolves once the server listens (and
 * rejects if it cannot, for example when the port is taken).
 *
 * @example Serve on a free port and shut down
 * ```ts ignore
 * import { BufferedProducer, WorkPullingController } from "workpull";
 * import { serveNode } from "workpull/node";
 *
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "jobs", producer });
 * await controller.start();
 * const server = await serveNode({ controller, producer, auth: { secret: process.env.WORKPULL_SECRET! } });
 * console.log("workers connect to", server.workersUrl.href);
 * await server.close();
 * await controller.close();
 * ```
 */
export function serveNode(options: ServeOptions): Promise<WorkpullServer> {
  return serveOverNodeHttp("serveNode", options);
}

/**
 * Serve the app over the runtime's `node:http` server: `serveNode` on Node, and `serveDeno` on
 * Deno, whose `node:http` gives each connection a socket that can be dropped (a WebSocket whose
 * peer stopped reading, a head that never ends), which `Deno.serve` does not.
 */
export async function serveOverNodeHttp(
  owner: string,
  options: ServeOptions,
): Promise<WorkpullServer> {
  const listen = listenOptions(owner, options);
  const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  const logger = loggerOption(owner, options.logger);
  const sockets = nodeWebSocket({
    idleTimeout: listen.idleTimeoutSeconds * 1000,
    maxPayloadLength: Math.max(4 * maxFrameBytes, 1024 * 1024),
    logger,
  });
  const apps = servedApps((app) =>
    buildWorkpullHono({
      clientAddress: nodeClientAddress,
      ...app,
      upgradeWebSocket: sockets.upgradeWebSocket,
    })
  );
  const app = apps.build(options);
  const root = servedRoot(owner, listen, app, options, apps.build, nodeClientAddress);
  // overrideGlobalObjects: false: serving must not replace the process's Request and Response.
  const server = createAdaptorServer({ fetch: root.fetch, overrideGlobalObjects: false });
  const heads = guardConnections(server, {
    headTimeout: listen.headTimeout,
    maxPendingHeads: listen.maxPendingHeads,
    onEvent: loggedListener(options.onEvent, logger),
  });
  sockets.injectWebSocket(server, root);
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(listen.port, listen.hostname, () => {
      server.off("error", reject);
      resolve();
    });
  }).catch((error) => {
    sockets.close();
    heads.close();
    throw new Error(
      `Cannot serve with ${owner} on ${listen.hostname}:${listen.port}: ${error.message}`,
      { cause: error },
    );
  });
  // A server error after listening (rare: the listening socket failed) must not end the process.
  server.on("error", (error) => logger.error("the HTTP server failed", error));
  const address = server.address();
  const port = typeof address === "object" && address ? address.port : listen.port;
  const { url, workersUrl } = serverUrls(listen.hostname, port, listen.basePath);
  // Deno's node:http ends its accept loop silently when an accept fails (out of descriptors).
  const stopWatching = "Deno" in globalThis
    ? watchAccepts(server, {
      port,
      hostname: listen.hostname,
      onDead(retryIn) {
        const error = "its accept loop ended (out of file descriptors?)";
        logger.error(
          `the server stopped accepting connections (${error}); listening again in ${retryIn} ms`,
        );
        report(options.onEvent, { kind: "accept-failed", error, retryIn }, logger);
      },
      onRetry: (error, retryIn) =>
        logger.error(`listening again failed (${String(error)}); next try in ${retryIn} ms`),
    })
    : () => {};
  const close = closeOnShutdown(listen, options, () =>
    new Promise<void>((resolve) => {
      stopWatching();
      apps.closeDashboardStreams();
      sockets.close();
      heads.close();
      server.close(() => resolve());
      // Idle keep-alive connections would hold close() open until they time out.
      (server as { closeAllConnections?: () => void }).closeAllConnections?.();
    }));
  return { app, url, workersUrl, port, close, [Symbol.asyncDispose]: close };
}

/** The request's URL (Node gives a path; a malformed one becomes "/", which routes nowhere). */
function requestUrl(request: IncomingMessage): URL {
  try {
    return new URL(request.url ?? "/", "http://localhost");
  } catch {
    return new URL("http://localhost/");
  }
}

/** The request's headers as Web `Headers` (repeated headers joined as Node joins them). */
function headersOf(request: IncomingMessage): Headers {
  const headers = new Headers();
  for (const [name, value] of Object.entries(request.headers)) {
    if (value === undefined) continue;
    headers.set(name, Array.isArray(value) ? value.join(", ") : value);
  }
  return headers;
}

/** Answer an upgrade that is not completed with the app's response (status, headers, body). */
async function refuse(socket: Duplex, response: Response): Promise<void> {
  const body = new Uint8Array(await response.arrayBuffer().catch(() => new ArrayBuffer(0)));
  if (socket.destroyed || !socket.writable) return void socket.destroy();
  const status = response.status;
  const lines = [`HTTP/1.1 ${status} ${STATUS_CODES[status] ?? ""}`];
  for (const [name, value] of response.headers) {
    if (!/^(connection|content-length|transfer-encoding)$/i.test(name)) {
      lines.push(`${name}: ${value}`);
    }
  }
  lines.push("Connection: close", `Content-Length: ${body.byteLength}`);
  const message = Buffer.concat([Buffer.from(lines.join("\r\n") + "\r\n\r\n", "latin1"), body]);
  // Close both ways once written: a client waiting for the end of the connection gets it.
  socket.end(message, () => socket.destroy());
}

/** A binary message as one `ArrayBuffer` (ws hands a Buffer, or fragments as an array). */
function arrayBufferOf(data: RawData): ArrayBuffer {
  const buffer = Array.isArray(data)
    ? Buffer.concat(data)
    : data instanceof ArrayBuffer
    ? Buffer.from(data)
    : data;
  return buffer.buffer.slice(
    buffer.byteOffset,
    buffer.byteOffset + buffer.byteLength,
  ) as ArrayBuffer;
}

/** A close event (Node before 23 has no global `CloseEvent`). */
function closeEvent(code: number, reason: string): CloseEvent {
  return Object.assign(new Event("close"), { code, reason, wasClean: code !== 1006 }) as CloseEvent;
}

/** The peer's address, from the Node request @hono/node-server passes as `env.incoming`. */
function nodeClientAddress(_request: Request, env: unknown): string | undefined {
  const incoming = (env as { incoming?: { socket?: { remoteAddress?: unknown } } } | undefined)
    ?.incoming;
  const address = incoming?.socket?.remoteAddress;
  return typeof address === "string" ? address : undefined;
}
