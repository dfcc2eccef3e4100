/**
 * Authentication of HTTP requests and WebSocket upgrades, before anything else happens.
 *
 * Where a credential is found, first match wins:
 * 1. `Authorization: Bearer <token>` (servers and non-browser clients);
 * 2. the `Sec-WebSocket-Protocol` entry right after `workpull.v1` (browsers cannot set headers
 *    on `new WebSocket()`, but they can offer subprotocols);
 * 3. the `token` query parameter (works everywhere; it may end up in access logs).
 *
 * Two ways to decide: the built-in signed tokens (`{ secret }`, or `{ keys }` by key id while
 * secrets rotate, with an optional revocation check `isRevoked(claims)`), or a user hook
 * (`{ authorize(request, route) }`) that returns the identity to enforce, or `null` to refuse.
 *
 * A successful outcome carries when the credential stops being valid (`expiresAt`): the socket
 * edge closes a live WebSocket at that moment, and re-runs the authenticator on the original
 * upgrade request now and then, so a revoked credential does not outlive its revocation.
 *
 * An optional Origin allow-list guards a deployment whose `authorize` hook trusts cookies: a
 * browser sends cookies with a cross-site WebSocket upgrade, and only the `Origin` header tells
 * the page that opened it.
 *
 * @module
 */

import type { LinkIdentity } from "../controller/controller.ts";
import { defaultLogger, type Logger } from "../core/logger.ts";
import { RecentMap } from "../core/recent_map.ts";
import { SUBPROTOCOL } from "../protocol/schemas.ts";
import {
  isTokenKeys,
  MIN_SECRET_BYTES,
  type TokenClaims,
  TokenError,
  type TokenKeys,
  type TokenSecret,
  verifyToken,
} from "./token.ts";

/** How many verified tokens, with their claims, an authenticator keeps (first in, first out). */
const VERIFIED_TOKENS = 1024;

/**
 * The routes of the workpull app, as the authenticator sees them: `stats` also stands for the
 * dashboard's live stream, `metrics` for `GET /metrics`.
 */
export type Route = "workers" | "jobs" | "stats" | "metrics";

/**
 * What an `authorize` hook admits: the identity to enforce and, optionally, when the credential
 * expires (Unix milliseconds; a live WebSocket is closed with 4003 then).
 */
export interface AuthorizedIdentity extends LinkIdentity {
  /** When the credential stops being valid, Unix milliseconds. Default: never. */
  readonly expiresAt?: number;
}

/**
 * A user authorization hook: return the identity to enforce (`{ worker }` restricts which
 * endpoint names a WebSocket link may register; `{}` allows any), or `null` to refuse with 401.
 * It is also re-run on the upgrade request of every live WebSocket (see the app's
 * `recheckInterval`): returning `null` then closes the socket with 4003.
 */
export type Authorize = (
  request: Request,
  route: Route,
) => AuthorizedIdentity | null | Promise<AuthorizedIdentity | null>;

/** A revocation check: true refuses the token (401, or 4003 on a live WebSocket). */
export type IsRevoked = (claims: TokenClaims) => boolean | Promise<boolean>;

/** How the app authenticates: built-in signed tokens, or a hook. */
export type AuthOptions =
  | {
    /** Verify tokens without a key id made by `signToken` with this secret (at least 32 bytes) or key. */
    readonly secret: TokenSecret;
    /** Verify tokens with a key id by these keys (rotation with overlap). */
    readonly keys?: Readonly<Record<string, TokenSecret>>;
    /** Refuse tokens this says are revoked (for example by `jti` or `worker`). */
    readonly isRevoked?: IsRevoked;
  }
  | {
    /** Verify tokens without a key id with this secret. */
    readonly secret?: TokenSecret;
    /** Verify tokens with a key id by these keys (rotation with overlap). */
    readonly keys: Readonly<Record<string, TokenSecret>>;
    /** Refuse tokens this says are revoked (for example by `jti` or `worker`). */
    readonly isRevoked?: IsRevoked;
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
  | "unknown-key"
  | "expired"
  | "revoked"
  | "wrong-producer"
  | "wrong-kind"
  | "refused";

/** The outcome of authenticating one request. */
export type AuthOutcome =
  | {
    readonly ok: true;
    readonly identity: LinkIdentity;
    /** When the credential stops being valid, Unix milliseconds (undefined: never). */
    readonly expiresAt?: number;
  }
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
 * Build the authenticator for a producer: with `{ secret }` (or `{ keys }`), tokens must be
 * validly signed, canonical, unexpired, not revoked and for this producer, and a WebSocket needs
 * a worker token while the HTTP routes need a client token (no `worker` claim). With
 * `{ authorize }`, the hook decides; a hook that throws refuses.
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
export function createAuthenticator(
  options: AuthOptions,
  producer: string,
  logger: Logger = defaultLogger,
): Authenticator {
  if ("authorize" in options) {
    const authorize = options.authorize;
    if (typeof authorize !== "function") {
      throw new TypeError(
        'Cannot create the workpull app: option "auth.authorize" must be a function',
      );
    }
    return async (request, route) => {
      try {
        const admitted = await authorize(request, route);
        if (admitted === null || typeof admitted !== "object") {
          return { ok: false, reason: "refused" };
        }
        const { expiresAt, ...identity } = admitted;
        if (expiresAt !== undefined && !Number.isFinite(expiresAt)) {
          logger.warn("the authorize hook returned a non-numeric expiresAt; refused");
          return { ok: false, reason: "refused" };
        }
        if (expiresAt !== undefined && expiresAt <= Date.now()) {
          return { ok: false, reason: "expired" };
        }
        return expiresAt === undefined ? { ok: true, identity } : { ok: true, identity, expiresAt };
      } catch (error) {
        logger.error("the authorize hook threw; the request is refused", error);
        return { ok: false, reason: "refused" };
      }
    };
  }
  const keys = verifierKeys(options);
  const isRevoked = options.isRevoked;
  if (isRevoked !== undefined && typeof isRevoked !== "function") {
    throw new TypeError(
      'Cannot create the workpull app: option "auth.isRevoked" must be a function',
    );
  }
  // A client sends the same token with every request: its signature is checked once (an HMAC
  // verification costs tens of microseconds) and its claims kept. Only tokens that verified are
  // kept; expiry, producer, kind and revocation are checked on every use.
  const verified = new RecentMap<string, TokenClaims>(VERIFIED_TOKENS);
  return async (request, route) => {
    const token = extractToken(request);
    if (token === undefined) return { ok: false, reason: "missing-token" };
    try {
      let claims = verified.get(token);
      if (claims === undefined || claims.exp * 1000 <= Date.now()) {
        verified.delete(token);
        claims = await verifyToken(keys, token); // an expired token is refused here, by name
        verified.set(token, claims);
      }
      if (claims.producer !== producer) return { ok: false, reason: "wrong-producer" };
      const workerRoute = route === "workers";
      if (workerRoute !== (claims.worker !== undefined)) return { ok: false, reason: "wrong-kind" };
      if (isRevoked && await isRevoked(claims)) return { ok: false, reason: "revoked" };
      return {
        ok: true,
        identity: workerRoute ? { worker: claims.worker } : {},
        expiresAt: claims.exp * 1000,
      };
    } catch (error) {
      if (!(error instanceof TokenError)) {
        logger.error("token verification failed unexpectedly", error);
        return { ok: false, reason: "refused" };
      }
      return {
        ok: false,
        reason: error.reason === "malformed" ? "malformed-token" : error.reason,
      };
    }
  };
}

/** Check the secrets of `{ secret, keys }` up front, so a bad one fails at construction. */
function verifierKeys(options: { secret?: TokenSecret; keys?: unknown }): TokenKeys {
  const { secret, keys } = options;
  if ("secret" in options && secret === undefined && keys === undefined) {
    throw new TypeError(
      'Cannot create the workpull app: option "auth.secret" is undefined (an unset environment ' +
        "variable?); give a secret of at least 32 bytes",
    );
  }
  if (secret === undefined && keys === undefined) {
    throw new TypeError(
      'Cannot create the workpull app: option "auth" must be { secret }, { keys } or { authorize }',
    );
  }
  if (isTokenKeys(secret as TokenSecret)) {
    throw new TypeError('Cannot create the workpull app: option "auth.secret" must be one secret');
  }
  const checkSecret = (name: string, value: unknown) => {
    const bytes = typeof value === "string" ? new TextEncoder().encode(value) : value;
    if (bytes instanceof Uint8Array && bytes.length < MIN_SECRET_BYTES) {
      throw new RangeError(
        `Cannot create the workpull app: option "${name}" must be at least ${MIN_SECRET_BYTES} bytes`,
      );
    }
  };
  if (secret !== undefined) checkSecret("auth.secret", secret);
  if (keys !== undefined) {
    if (typeof keys !== "object" || keys === null) {
      throw new TypeError(
        'Cannot create the workpull app: option "auth.keys" must be an object of secrets by key id',
      );
    }
    for (const [kid, value] of Object.entries(keys)) {
      if (!/^[A-Za-z0-9_-]{1,64}$/.test(kid)) {
        throw new TypeError(
          `Cannot create the workpull app: option "auth.keys" has an invalid key id ${
            JSON.stringify(kid.slice(0, 80))
          }`,
        );
      }
      checkSecret(`auth.keys.${kid}`, value);
    }
  }
  return { secret, keys: keys as Record<string, TokenSecret> | undefined };
}

/**
 * Whether a request's `Origin` passes the allow-list: requests without an `Origin` header
 * (servers, workers outside a browser) always pass; browsers send one on every WebSocket
 * upgrade and cross-site POST.
 *
 * @example
 * ```ts
 * import { originAllowed } from "./auth.ts";
 * const request = new Request("http://localhost/", { headers: { origin: "https://evil.example" } });
 * console.assert(!originAllowed(request, ["https://app.example"]));
 * ```
 */
export function originAllowed(
  request: Request,
  allowed: readonly string[] | ((origin: string) => boolean) | undefined,
  logger: Logger = defaultLogger,
): boolean {
  if (allowed === undefined) return true;
  const origin = request.headers.get("origin");
  if (origin === null) return true;
  try {
    return typeof allowed === "function" ? allowed(origin) === true : allowed.includes(origin);
  } catch (error) {
    logger.error("the allowedOrigins function threw; the request is refused", error);
    return false;
  }
}
