/**
 * Authentication of HTTP requests and WebSocket upgrades, before anything else happens.
 *
 * Where a credential is found, first match wins:
 * 1. `Authorization: Bearer <token>` (servers and non-browser clients);
 * 2. the `Sec-WebSocket-Protocol` entry right after `workpull.v1` (browsers cannot set headers
 *    on `new WebSocket()`, but they can offer subprotocols);
 * 3. the `token` query parameter (works everywhere; it may end up in access logs).
 *
 * Two ways to decide: the built-in signed tokens (`{ secret }`), or a user hook
 * (`{ authorize(request, route) }`) that returns the identity to enforce, or `null` to refuse.
 *
 * @module
 */

import type { LinkIdentity } from "../controller/controller.ts";
import { SUBPROTOCOL } from "../protocol/schemas.ts";
import { MIN_SECRET_BYTES, TokenError, type TokenSecret, verifyToken } from "./token.ts";

/** The routes of the workpull app, as the authenticator sees them. */
export type Route = "workers" | "jobs" | "stats";

/**
 * A user authorization hook: return the identity to enforce (`{ worker }` restricts which
 * endpoint names a WebSocket link may register; `{}` allows any), or `null` to refuse with 401.
 */
export type Authorize = (
  request: Request,
  route: Route,
) => LinkIdentity | null | Promise<LinkIdentity | null>;

/** How the app authenticates: built-in signed tokens, or a hook. */
export type AuthOptions =
  | {
    /** Verify tokens made by `signToken` with this secret (at least 32 bytes) or key. */
    readonly secret: TokenSecret;
  }
  | {
    /** Decide yourself. */
    readonly authorize: Authorize;
  };

/** Why a request was refused. */
export type AuthFailureReason =
  | "missing-token"
  | "malformed-token"
  | "bad-signature"
  | "expired"
  | "wrong-producer"
  | "wrong-kind"
  | "refused";

/** The outcome of authenticating one request. */
export type AuthOutcome =
  | { readonly ok: true; readonly identity: LinkIdentity }
  | { readonly ok: false; readonly reason: AuthFailureReason };

/** Authenticates one request for one route. Never throws. */
export type Authenticator = (request: Request, route: Route) => Promise<AuthOutcome>;

/**
 * Find the credential a request carries (see the module documentation for the order).
 *
 * @example A browser-style upgrade request with the token as the second subprotocol
 * ```ts
 * import { extractToken } from "./auth.ts";
 * const request = new Request("http://localhost/workers", {
 *   headers: { "sec-websocket-protocol": "workpull.v1, wp1.abc.def" },
 * });
 * console.assert(extractToken(request) === "wp1.abc.def");
 * ```
 */
export function extractToken(request: Request): string | undefined {
  const authorization = request.headers.get("authorization");
  if (authorization) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(authorization);
    if (match) return match[1];
  }
  const protocols = offeredProtocols(request);
  const index = protocols.indexOf(SUBPROTOCOL);
  if (index >= 0 && protocols[index + 1]) return protocols[index + 1];
  const query = new URL(request.url).searchParams.get("token");
  return query || undefined;
}

/**
 * The subprotocols a WebSocket upgrade request offers, in order.
 *
 * @example
 * ```ts
 * import { offeredProtocols } from "./auth.ts";
 * const request = new Request("http://localhost/", { headers: { "sec-websocket-protocol": "a, b" } });
 * console.assert(offeredProtocols(request).join() === "a,b");
 * ```
 */
export function offeredProtocols(request: Request): string[] {
  const header = request.headers.get("sec-websocket-protocol");
  if (!header) return [];
  return header.split(",").map((entry) => entry.trim()).filter((entry) => entry !== "");
}

/**
 * Build the authenticator for a producer: with `{ secret }`, tokens must be validly signed,
 * unexpired and for this producer, and a WebSocket needs a worker token while the HTTP routes
 * need a client token (no `worker` claim). With `{ authorize }`, the hook decides; a hook that
 * throws refuses.
 *
 * @example
 * ```ts
 * import { createAuthenticator } from "./auth.ts";
 * import { signToken } from "./token.ts";
 * const secret = "a-secret-of-at-least-32-bytes-length!";
 * const authenticate = createAuthenticator({ secret }, "jobs");
 * const token = await signToken(secret, { producer: "jobs", worker: "w", expiresIn: 60_000 });
 * const request = new Request(`http://localhost/workers?token=${token}`);
 * const outcome = await authenticate(request, "workers");
 * console.assert(outcome.ok && outcome.identity.worker === "w");
 * ```
 */
export function createAuthenticator(options: AuthOptions, producer: string): Authenticator {
  if ("authorize" in options) {
    const authorize = options.authorize;
    if (typeof authorize !== "function") {
      throw new TypeError(
        'Cannot create the workpull app: option "auth.authorize" must be a function',
      );
    }
    return async (request, route) => {
      try {
        const identity = await authorize(request, route);
        if (identity === null || typeof identity !== "object") {
          return { ok: false, reason: "refused" };
        }
        return { ok: true, identity };
      } catch (error) {
        console.error("workpull: the authorize hook threw; the request is refused", error);
        return { ok: false, reason: "refused" };
      }
    };
  }
  const secret = options.secret;
  const bytes = typeof secret === "string" ? new TextEncoder().encode(secret) : secret;
  if (bytes instanceof Uint8Array && bytes.length < MIN_SECRET_BYTES) {
    throw new RangeError(
      `Cannot create the workpull app: option "auth.secret" must be at least ${MIN_SECRET_BYTES} bytes`,
    );
  }
  return async (request, route) => {
    const token = extractToken(request);
    if (token === undefined) return { ok: false, reason: "missing-token" };
    try {
      const claims = await verifyToken(secret, token);
      if (claims.producer !== producer) return { ok: false, reason: "wrong-producer" };
      const workerRoute = route === "workers";
      if (workerRoute !== (claims.worker !== undefined)) return { ok: false, reason: "wrong-kind" };
      return { ok: true, identity: workerRoute ? { worker: claims.worker } : {} };
    } catch (error) {
      if (!(error instanceof TokenError)) {
        console.error("workpull: token verification failed unexpectedly", error);
        return { ok: false, reason: "refused" };
      }
      return {
        ok: false,
        reason: error.reason === "malformed" ? "malformed-token" : error.reason,
      };
    }
  };
}
