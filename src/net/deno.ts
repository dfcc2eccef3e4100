/**
 * Serving the workpull app on Deno, upgrading WebSockets with `Deno.upgradeWebSocket` through
 * Hono's WebSocket helper (`hono/deno`'s own upgrade, deprecated for Hono v5, is not used).
 *
 * **The subprotocol is chosen here, not by Deno.** Deno checks a `protocol` option against the
 * offered list split at `", "` only, so an offer written `workpull.v1,<token>` (as Node's `ws`
 * writes it) would be refused with a TypeError; the upgrade takes no `protocol` and names
 * `workpull.v1` in the 101 response itself when the client offered it first (the app has
 * already refused any other first entry).
 *
 * **The accept loop is kept alive.** `Deno.serve` accepts connections in native code; when an
 * accept fails — typically "Too many open files" once idle connections hold every descriptor —
 * the whole serve loop ends, its `finished` promise rejects (unhandled, that ends the process)
 * and the port is closed for good, while the connections already accepted keep working.
 * `serveDeno` catches that, logs it, reports `accept-failed`, sheds new connections for a
 * while (the port is closed: clients are refused at once) and listens again on the same port,
 * backing off from 100 ms to 5 s while the failure repeats. Established WebSockets never notice.
 *
 * What Deno does not allow (see `docs/SECURITY.md`): `Deno.serve` exposes no per-connection
 * hook, so a TCP connection that never sends a request cannot be timed out or counted here (a
 * reverse proxy in front can), and a WebSocket's frames arrive whole, buffered up to Deno's own
 * 64 MiB ceiling, before the app can refuse one over `maxFrameBytes`.
 *
 * @module
 */

import type { Context } from "hono";
import { defineWebSocketHelper, WSContext, type WSEvents } from "hono/ws";
import { offeredProtocols } from "./auth.ts";
import { SUBPROTOCOL } from "../protocol/schemas.ts";
import { buildWorkpullHono, type WebSocketUpgrader } from "./app.ts";
import { type NetEventListener, report } from "./net_event.ts";
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

/** Options of {@linkcode denoUpgrader}. */
export interface DenoUpgraderOptions {
  /**
   * Ping a quiet WebSocket after this long and close it when the pong does not come, ms
   * (rounded up to whole seconds). Default 30,000.
   */
  readonly idleTimeout?: number;
}

/**
 * Deno's WebSocket upgrade for `createWorkpullApp`, with Deno's ping-based idle timeout.
 *
 * @example
 * ```ts
 * import { BufferedProducer, WorkPullingController } from "../../mod.ts";
 * import { createWorkpullApp } from "./app.ts";
 * import { denoUpgrader } from "./deno.ts";
 *
 * const controller = new WorkPullingController({ name: "jobs", producer: new BufferedProducer() });
 * const app = createWorkpullApp({
 *   controller,
 *   upgradeWebSocket: denoUpgrader({ idleTimeout: 20_000 }),
 *   auth: { secret: "a-secret-of-at-least-32-bytes-length!" },
 * });
 * console.assert((await app.request("/workers")).status === 426); // not an upgrade
 * ```
 */
export function denoUpgrader(options: DenoUpgraderOptions = {}): WebSocketUpgrader {
  const idleTimeout = idleSeconds("denoUpgrader", options.idleTimeout);
  return (createEvents: (c: Context) => WSEvents | Promise<WSEvents>) =>
    upgradeWebSocket(createEvents, { idleTimeout });
}

const upgradeWebSocket = defineWebSocketHelper<WebSocket, Deno.UpgradeWebSocketOptions>(
  (c, events, options) => {
    if (c.req.header("upgrade")?.toLowerCase() !== "websocket") return;
    const { response, socket } = Deno.upgradeWebSocket(c.req.raw, options);
    if (offeredProtocols(c.req.raw)[0] === SUBPROTOCOL) {
      response.headers.set("sec-websocket-protocol", SUBPROTOCOL);
    }
    const context = new WSContext<WebSocket>({
      close: (code, reason) => socket.close(code, reason),
      get protocol() {
        return socket.protocol;
      },
      raw: socket,
      get readyState() {
        return socket.readyState as 0 | 1 | 2 | 3;
      },
      url: socket.url ? new URL(socket.url) : null,
      send: (source) => socket.send(source),
    });
    socket.onopen = (event) => events.onOpen?.(event, context);
    socket.onmessage = (event) => events.onMessage?.(event, context);
    socket.onclose = (event) => events.onClose?.(event, context);
    socket.onerror = (event) => events.onError?.(event, context);
    return response;
  },
);

/**
 * Serve a controller on Deno: `GET /workers` (WebSocket), `POST /jobs` (with `producer`) and
 * `GET /stats` under `basePath`, on 127.0.0.1 by default.
 *
 * @example Serve on a free port and shut down
 * ```ts
 * import { BufferedProducer, WorkPullingController } from "../../mod.ts";
 * import { serveDeno } from "./deno.ts";
 *
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "jobs", producer });
 * await controller.start();
 * const server = serveDeno({ controller, producer, auth: { secret: "a-secret-of-at-least-32-bytes-length!" } });
 * console.log("workers connect to", server.workersUrl.href);
 * await server.close();
 * await controller.close();
 * ```
 */
export function serveDeno(options: ServeOptions): WorkpullServer {
  const listen = listenOptions("serveDeno", options);
  const upgradeWebSocket = denoUpgrader({ idleTimeout: listen.idleTimeoutSeconds * 1000 });
  const apps = servedApps((app) =>
    buildWorkpullHono({ clientAddress: denoClientAddress, ...app, upgradeWebSocket })
  );
  const app = apps.build(options);
  const root = servedRoot("serveDeno", listen, app, options, apps.build, denoClientAddress);
  const logger = loggerOption("serveDeno", options.logger);
  const loop = new ServeLoop(listen.hostname, listen.port, root.fetch, options.onEvent, logger);
  const { url, workersUrl } = serverUrls(listen.hostname, loop.port, listen.basePath);
  const close = closeOnShutdown(listen, options, () => {
    apps.closeDashboardStreams(); // Deno.serve's shutdown waits for open responses
    return loop.close();
  });
  return { app, url, workersUrl, port: loop.port, close, [Symbol.asyncDispose]: close };
}

/** The client address Deno gives a handler (its second argument). */
function denoClientAddress(_request: Request, env: unknown): string | undefined {
  const address = (env as { remoteAddr?: { hostname?: unknown } } | undefined)?.remoteAddr;
  return typeof address?.hostname === "string" ? address.hostname : undefined;
}

/** The first and the longest pause before listening again after the accept loop failed, ms. */
const RESTART_DELAY = { first: 100, max: 5000 } as const;

/**
 * `Deno.serve` on one port, listening again whenever its accept loop fails. Every server it
 * started stays until `close()`: a failed one still serves the connections it had accepted.
 */
class ServeLoop {
  readonly port: number;
  readonly #hostname: string;
  readonly #handler: Deno.ServeHandler<Deno.NetAddr>;
  readonly #onEvent: NetEventListener | undefined;
  readonly #logger: Logger;
  readonly #servers = new Set<Deno.HttpServer<Deno.NetAddr>>();
  #delay: number = RESTART_DELAY.first;
  #retry: ReturnType<typeof setTimeout> | undefined;
  #healthy: ReturnType<typeof setTimeout> | undefined;
  #closed = false;

  constructor(
    hostname: string,
    port: number,
    handler: Deno.ServeHandler<Deno.NetAddr>,
    onEvent: NetEventListener | undefined,
    logger: Logger,
  ) {
    this.#hostname = hostname;
    this.#logger = logger;
    this.#handler = handler;
    this.#onEvent = onEvent;
    this.port = this.#listen(port).addr.port; // the first bind's errors reach the caller
  }

  #listen(port: number): Deno.HttpServer<Deno.NetAddr> {
    const server = Deno.serve(
      {
        port,
        hostname: this.#hostname,
        onListen() {},
        onError: (error) => internalError(error, this.#logger),
      },
      this.#handler,
    );
    this.#servers.add(server);
    server.finished.then(
      () => this.#servers.delete(server),
      (error) => this.#failed(error),
    );
    return server;
  }

  /** The accept loop ended with an error: log, shed new connections for a while, listen again. */
  #failed(error: unknown): void {
    if (this.#closed) return;
    clearTimeout(this.#healthy);
    const retryIn = this.#delay;
    this.#delay = Math.min(this.#delay * 2, RESTART_DELAY.max);
    this.#logger.error(
      `the server stopped accepting connections (${
        String(error)
      }); listening again in ${retryIn} ms`,
    );
    report(this.#onEvent, { kind: "accept-failed", error: String(error), retryIn }, this.#logger);
    clearTimeout(this.#retry);
    this.#retry = setTimeout(() => this.#restart(), retryIn);
  }

  #restart(): void {
    this.#retry = undefined;
    if (this.#closed) return;
    try {
      this.#listen(this.port);
    } catch (error) {
      return this.#failed(error); // descriptors still exhausted, or the port taken meanwhile
    }
    // Listening for a while without failing resets the backoff.
    this.#healthy = setTimeout(() => (this.#delay = RESTART_DELAY.first), RESTART_DELAY.max);
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retry);
    clearTimeout(this.#healthy);
    await Promise.all([...this.#servers].map((server) => server.shutdown().catch(() => {})));
  }
}

/** Deno's answer when a handler throws (the app catches its own errors first). */
function internalError(error: unknown, logger: Logger): Response {
  logger.error("a request handler failed", error);
  return new Response(JSON.stringify({ error: "internal" }), {
    status: 500,
    headers: { "content-type": "application/json" },
  });
}
