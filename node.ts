/**
 * Serve workpull on Node (`@hono/node-server` for HTTP, `ws` for WebSockets). Workers on Node 22
 * and later use the global `WebSocket` with `connectWorker` from `./client.ts`; on older Node,
 * pass `WebSocket` from `ws`.
 *
 * @example Serve a controller on Node; a worker joins with a signed token
 * ```ts ignore
 * import { BufferedProducer, WorkPullingController } from "workpull";
 * import { serveNode } from "workpull/node";
 * import { signToken } from "workpull/server";
 *
 * const secret = process.env.WORKPULL_SECRET!; // at least 32 bytes
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "jobs", producer });
 * await controller.start();
 * const server = await serveNode({ controller, producer, auth: { secret }, port: 8080 });
 * const token = await signToken(secret, { producer: "jobs", worker: "w1", expiresIn: 60_000 });
 * console.log(`connectWorker({ url: "${server.workersUrl}", token: "${token}", ... })`);
 * ```
 *
 * @module
 */

export {
  type NodeUpgradeApp,
  type NodeUpgradeSource,
  type NodeWebSocket,
  nodeWebSocket,
  type NodeWebSocketOptions,
  serveNode,
} from "./src/net/node.ts";
export type { MountedAppOptions, ServeOptions, WorkpullServer } from "./src/net/serve.ts";
