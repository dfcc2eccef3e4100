/**
 * Serve workpull on Bun (`Bun.serve` and `hono/bun`).
 *
 * @example Serve a controller on Bun
 * ```ts ignore
 * import { BufferedProducer, WorkPullingController } from "./mod.ts";
 * import { serveBun } from "./bun.ts";
 *
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "jobs", producer });
 * await controller.start();
 * const server = serveBun({ controller, producer, auth: { secret: process.env.WORKPULL_SECRET! }, port: 8080 });
 * console.log("workers connect to", server.workersUrl.href);
 * ```
 *
 * @module
 */

export {
  bunUpgrader,
  bunWebSocket,
  type BunWebSocketHandler,
  type BunWebSocketOptions,
  serveBun,
} from "./src/net/bun.ts";
export type { MountedAppOptions, ServeOptions, WorkpullServer } from "./src/net/serve.ts";
