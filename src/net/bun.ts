/**
 * Serving the workpull app on Bun. The only module that imports `hono/bun` (deprecated for
 * Hono v5, whose replacement is not on npm yet): swapping it is a change here only.
 *
 * Bun enforces limits natively, before the app sees anything: a WebSocket frame larger than
 * `maxPayloadLength` (set to the app's `maxFrameBytes`) closes the socket with 1009 before it is
 * buffered; an HTTP connection idle for `httpIdleTimeout` between requests, or waiting that long
 * for an answer, is closed (Bun's `idleTimeout`); and a connection that has not completed a
 * request within about 10 s is closed whatever the options say (Bun's own header timeout,
 * measured at 12 s). Bun keeps accepting when accepts fail (out of descriptors), and closing a
 * socket with `terminate()` frees it at once. To reuse a connection Bun receives the whole body
 * of a request first, also one refused unread: `serveBun` answers those with `Connection: close`
 * (`unread_body.ts`).
 *
 * @module
 */

import type { Context } from "hono";
import type { WSEvents } from "hono/ws";
import { upgradeWebSocket, websocket } from "hono/bun";
import { buildWorkpullHono, DEFAULT_MAX_FRAME_BYTES, type WebSocketUpgrader } from "./app.ts";
import { closingUnreadBodies } from "./unread_body.ts";
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

/** The part of Bun's global this module uses (no dependency on Bun's type package). */
interface BunRuntime {
  serve(options: {
    port: number;
    hostname: string;
    idleTimeout: number;
    fetch: (request: Request, server: unknown) => Promise<Response | undefined>;
    websocket: BunWebSocketHandler;
  }): { readonly port?: number; stop(closeActiveConnections?: boolean): Promise<void> | void };
}

/** Options of {@linkcode bunWebSocket}. */
export interface BunWebSocketOptions {
  /** Ping a quiet WebSocket after this long and close it if it stays silent, ms. Default 30,000. */
  readonly idleTimeout?: number;
  /**
   * Frames larger than this are cut by Bun itself (close 1009) before they are buffered, bytes.
   * `serveBun` sets it to the app's `maxFrameBytes`. Default 65,536.
   */
  readonly maxPayloadLength?: number;
}

/** The `websocket` option of `Bun.serve`: Hono's handlers plus Bun's settings. */
export interface BunWebSocketHandler {
  /** Bun calls it when a socket opened. */
  open(ws: never): void;
  /** Bun calls it for every message. */
  message(ws: never, message: never): void;
  /** Bun calls it when a socket closed. */
  close(ws: never, code?: number, reason?: string): void;
  /** Seconds of silence before Bun pings and then closes. */
  idleTimeout: number;
  /** Largest frame in bytes; larger ones close the socket (1009). */
  maxPayloadLength: number;
  /** Whether Bun pings quiet sockets. */
  sendPings: boolean;
}

/**
 * Bun's WebSocket upgrade for `createWorkpullApp`. Bun also needs {@linkcode bunWebSocket} in
 * `Bun.serve`.
 *
 * @example Mount into an existing app on Bun
 * ```ts ignore
 * import { Hono } from "hono";
 * import { mountWorkpull } from "./app.ts";
 * import { bunUpgrader, bunWebSocket } from "./bun.ts";
 *
 * const app = new Hono();
 * mountWorkpull(app, "/workpull", { controller, upgradeWebSocket: bunUpgrader(), auth: { secret } });
 * Bun.serve({ fetch: app.fetch, websocket: bunWebSocket({ idleTimeout: 20_000 }) });
 * ```
 */
export function bunUpgrader(): WebSocketUpgrader {
  return (createEvents: (c: Context) => WSEvents | Promise<WSEvents>) =>
    upgradeWebSocket(createEvents);
}

/**
 * The `websocket` handler object for `Bun.serve`, with an idle timeout (Bun pings quiet
 * sockets and closes unresponsive ones) and a frame size ceiling.
 *
 * @example
 * ```ts ignore
 * Bun.serve({ fetch: app.fetch, websocket: bunWebSocket({ idleTimeout: 20_000 }) });
 * ```
 */
export function bunWebSocket(options: BunWebSocketOptions = {}): BunWebSocketHandler {
  return {
    ...websocket,
    idleTimeout: idleSeconds("bunWebSocket", options.idleTimeout),
    maxPayloadLength: options.maxPayloadLength ?? DEFAULT_MAX_FRAME_BYTES,
    sendPings: true,
  };
}

/**
 * Serve a controller on Bun: `GET /workers` (WebSocket), `POST /jobs` (with `producer`) and
 * `GET /stats` under `basePath`, on 127.0.0.1 by default.
 *
 * @example Serve on a free port and shut down
 * ```ts ignore
 * import { BufferedProducer, WorkPullingController } from "../../mod.ts";
 * import { serveBun } from "./bun.ts";
 *
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "jobs", producer });
 * await controller.start();
 * const server = serveBun({ controller, producer, auth: { secret: "a-secret-of-at-least-32-bytes-length!" } });
 * console.log("workers connect to", server.workersUrl.href);
 * await server.close();
 * await controller.close();
 * ```
 */
export function serveBun(options: ServeOptions): WorkpullServer {
  const listen = listenOptions("serveBun", options);
  const upgradeWebSocket = bunUpgrader();
  const apps = servedApps((app) =>
    buildWorkpullHono({ clientAddress: bunClientAddress, ...app, upgradeWebSocket })
  );
  const app = apps.build(options);
  const root = servedRoot("serveBun", listen, app, options, apps.build, bunClientAddress);
  const maxFrameBytes = options.maxFrameBytes ?? DEFAULT_MAX_FRAME_BYTES;
  const bun = (globalThis as unknown as { Bun?: BunRuntime }).Bun;
  if (!bun) throw new Error("Cannot serve with serveBun: this runtime is not Bun");
  const server = bun.serve({
    port: listen.port,
    hostname: listen.hostname,
    idleTimeout: listen.httpIdleTimeoutSeconds,
    // A refused body is not received to its end: its connection closes (unread_body.ts).
    fetch: closingUnreadBodies(root.fetch),
    websocket: bunWebSocket({
      idleTimeout: listen.idleTimeoutSeconds * 1000,
      maxPayloadLength: maxFrameBytes,
    }),
  });
  const port = server.port ?? listen.port;
  const { url, workersUrl } = serverUrls(listen.hostname, port, listen.basePath);
  const close = closeOnShutdown(
    listen,
    options,
    () => {
      apps.closeDashboardStreams();
      return Promise.resolve(server.stop(true)).then(() => {});
    },
  );
  return { app, url, workersUrl, port, close, [Symbol.asyncDispose]: close };
}

/** The client address Bun knows for a request (its server is the second `fetch` argument). */
function bunClientAddress(request: Request, env: unknown): string | undefined {
  const server = env as { requestIP?: (request: Request) => { address?: unknown } | null };
  const address = typeof server?.requestIP === "function"
    ? server.requestIP(request)?.address
    : undefined;
  return typeof address === "string" ? address : undefined;
}
