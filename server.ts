/**
 * workpull over the network, server side and runtime-agnostic: the Hono app that serves a
 * controller to workers over WebSockets (plus `POST /jobs`, `GET /stats`, a live dashboard and
 * `GET /metrics`), and signed worker and client tokens.
 *
 * Serve it with `serveDeno` from `./deno.ts` or `serveBun` from `./bun.ts`, or mount it into
 * an existing Hono app with `mountWorkpull(app, "/prefix", options)`. Workers connect
 * with `connectWorker` from `./client.ts`. The wire protocol is specified in `docs/PROTOCOL.md`.
 *
 * @example Sign a worker token and a client token
 * ```ts
 * import { signToken } from "./server.ts";
 *
 * const secret = "a-secret-of-at-least-32-bytes-length!";
 * const workerToken = await signToken(secret, { producer: "emails", worker: "mailer", expiresIn: 86_400_000 });
 * const clientToken = await signToken(secret, { producer: "emails", expiresIn: 3_600_000 });
 * console.assert(workerToken.startsWith("wp1.") && clientToken !== workerToken);
 * ```
 *
 * @module
 */

export {
  createWorkpullApp,
  mountWorkpull,
  type RouteTarget,
  type WebSocketUpgrader,
  type WorkpullApp,
  type WorkpullAppOptions,
} from "./src/net/app.ts";
export {
  type AuthFailureReason,
  type AuthOptions,
  type Authorize,
  type AuthorizedIdentity,
  extractToken,
  type IsRevoked,
  type Route,
} from "./src/net/auth.ts";
export type { NetEvent, NetEventListener } from "./src/net/net_event.ts";
export type { DashboardOptions } from "./src/dashboard/options.ts";
export type { MetricsOptions } from "./src/metrics/metrics_route.ts";
export type { LinkIdentity } from "./src/controller/controller.ts";
export type { MountedAppOptions, ServeOptions, WorkpullServer } from "./src/net/serve.ts";
export {
  importTokenKey,
  signToken,
  type SignTokenOptions,
  type TokenClaims,
  TokenError,
  type TokenErrorReason,
  type TokenKeys,
  type TokenSecret,
  verifyToken,
  type VerifyTokenOptions,
} from "./src/net/token.ts";
