/**
 * Serving the workpull app on Deno. The only module that imports `hono/deno` (deprecated for
 * Hono v5, whose replacement is not on npm yet): swapping it is a change here only.
 *
 * @module
 */

import { type Context, Hono } from "hono";
import type { WSEvents } from "hono/ws";
import { upgradeWebSocket } from "hono/deno";
import { buildWorkpullHono, type WebSocketUpgrader } from "./app.ts";
import {
  closeOnShutdown,
  idleSeconds,
  listenOptions,
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
  const app = buildWorkpullHono({
    ...options,
    upgradeWebSocket: denoUpgrader({ idleTimeout: listen.idleTimeoutSeconds * 1000 }),
  });
  const root = listen.basePath ? new Hono().route(listen.basePath, app) : app;
  const server = Deno.serve(
    { port: listen.port, hostname: listen.hostname, onListen() {} },
    root.fetch,
  );
  const { url, workersUrl } = serverUrls(listen.hostname, server.addr.port, listen.basePath);
  const close = closeOnShutdown(listen, options, () => server.shutdown());
  return {
    app,
    url,
    workersUrl,
    port: server.addr.port,
    close,
    [Symbol.asyncDispose]: close,
  };
}
