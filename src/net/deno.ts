/**
 * Serving the workpull app on Deno.
 *
 * **`serveDeno` serves through Deno's `node:http`, not `Deno.serve`.** `Deno.serve` hands the
 * app a request and, after an upgrade, a WebSocket, but never the TCP connection under them, and
 * three things need it (measured with Deno 2.9 against peers on loopback):
 * - A WebSocket whose peer stopped reading cannot be dropped: `close()` queues a close frame
 *   behind data the peer never reads, the ping of `idleTimeout` waits behind it too, and the
 *   connection (with everything Deno had not written) stays until the peer goes — a stopped
 *   (SIGSTOP) worker holds it for as long as it is stopped.
 * - A connection that never finishes its request head is not timed out, nor even seen.
 * - A body trickled a byte at a time holds its request until the client stops.
 * Deno's `node:http` gives each connection a socket that can be destroyed, so `serveDeno` gets
 * the same edge as `serveNode` (`node.ts`): `ws` WebSockets terminated when the edge drops them,
 * head deadlines and a budget of connections waiting for their heads (`connection_guard.ts`).
 *
 * **`denoUpgrader`** is for mounting the app on your own `Deno.serve` (Deno Deploy): it upgrades
 * with `Deno.upgradeWebSocket` through Hono's WebSocket helper (`hono/deno`'s own upgrade,
 * deprecated for Hono v5, is not used). There the limits above are Deno's (`docs/SECURITY.md`).
 * The subprotocol is chosen here, not by Deno: Deno checks a `protocol` option against the
 * offered list split at `", "` only, so an offer written `workpull.v1,<token>` (as Node's `ws`
 * writes it) would be refused with a TypeError; the upgrade takes no `protocol` and names
 * `workpull.v1` in the 101 response itself when the client offered it first (the app has already
 * refused any other first entry).
 *
 * @module
 */

import type { Context } from "hono";
import { defineWebSocketHelper, WSContext, type WSEvents } from "hono/ws";
import { offeredProtocols } from "./auth.ts";
import { SUBPROTOCOL } from "../protocol/schemas.ts";
import type { WebSocketUpgrader } from "./app.ts";
import { idleSeconds, type ServeOptions, type WorkpullServer } from "./serve.ts";
import { serveOverNodeHttp } from "./node.ts";

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
 * Serve a controller or a job queue on Deno: `GET /workers` (WebSocket), `POST /jobs` and
 * `GET /stats` under `basePath`, on 127.0.0.1 by default. Resolves once the server listens (and
 * rejects if it cannot, for example when the port is taken).
 *
 * It serves through Deno's `node:http` (the server `serveNode` uses on Node), not `Deno.serve`:
 * only there does each connection have a socket that can be dropped, so a WebSocket whose peer
 * stopped reading gives its memory back at once, and a head or a body that never ends is cut at
 * its deadline (see the module documentation).
 *
 * @example Serve on a free port and shut down
 * ```ts
 * import { BufferedProducer, WorkPullingController } from "../../mod.ts";
 * import { serveDeno } from "./deno.ts";
 *
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "jobs", producer });
 * await controller.start();
 * const server = await serveDeno({ controller, producer, auth: { secret: "a-secret-of-at-least-32-bytes-length!" } });
 * console.log("workers connect to", server.workersUrl.href);
 * await server.close();
 * await controller.close();
 * ```
 */
export function serveDeno(options: ServeOptions): Promise<WorkpullServer> {
  return serveOverNodeHttp("serveDeno", options);
}
