/**
 * The workpull worker client over the standard `WebSocket`: the same code on Deno, Bun and in
 * browsers. It imports no runtime module and no server code, so it bundles for the browser.
 *
 * @example A browser tab joins the pool
 * ```ts ignore
 * import { connectWorker } from "./client.ts";
 *
 * const worker = connectWorker<{ imageUrl: string }>({
 *   url: "wss://jobs.example.com/workers",
 *   token: () => fetch("/api/worker-token").then((response) => response.text()),
 *   producer: "thumbnails",
 *   name: `tab-${crypto.randomUUID()}`,
 *   handler: async ({ payload }) => {
 *     await renderThumbnail(payload.imageUrl);
 *   },
 * });
 * addEventListener("pagehide", () => void worker.close());
 * ```
 *
 * @module
 */

export type { BackoffOptions } from "./src/net/backoff.ts";
export {
  ConnectedEvent,
  connectWorker,
  type ConnectWorkerOptions,
  DisconnectedEvent,
  UpgradeRefusedError,
  UpgradeRefusedEvent,
  type WebSocketConstructor,
  type WebSocketLike,
  WorkerConnection,
  type WorkerConnectionEventMap,
} from "./src/net/client.ts";
export type { Delivery } from "./src/worker/worker_endpoint.ts";
export { SUBPROTOCOL } from "./src/protocol/schemas.ts";
