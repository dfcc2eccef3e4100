/**
 * What the network edge reports about requests and connections it refused or cut, beside the
 * controller's own events (which still say which binding ended and why).
 *
 * @module
 */

import { defaultLogger, type Logger } from "../core/logger.ts";
import type { AuthFailureReason, Route } from "./auth.ts";

/** One report from the network edge, passed to the app's `onEvent` option. */
export type NetEvent =
  /** A request or upgrade was refused with 401 before anything else happened. */
  | {
    readonly kind: "unauthorized";
    readonly route: Route;
    readonly reason: AuthFailureReason;
  }
  /** An upgrade was refused with 400 (for example a subprotocol other than `workpull.v1`). */
  | { readonly kind: "bad-upgrade"; readonly detail: string }
  /** A request carried an `Origin` outside `allowedOrigins`: refused with 403. */
  | { readonly kind: "forbidden-origin"; readonly origin: string }
  /**
   * A request or upgrade was refused with 503 (`too-many-connections`: the server's total,
   * `too-many-from-address`: the client address's share) or 429 (`too-many-endpoints`: the
   * worker credential's share; `cooling-down`: the credential was caught flooding) before
   * anything else happened; or a new TCP connection was dropped at once because
   * `maxPendingHeads` connections were already waiting for their request heads
   * (`too-many-pending-heads`, `serveDeno` and `serveNode`).
   */
  | {
    readonly kind: "connection-refused";
    readonly reason:
      | "too-many-connections"
      | "too-many-from-address"
      | "too-many-endpoints"
      | "cooling-down"
      | "too-many-pending-heads";
    readonly address: string | undefined;
    readonly worker: string | undefined;
  }
  /** A connection sent no whole request head within `headTimeout`: dropped (`serveDeno`, `serveNode`). */
  | { readonly kind: "head-timeout"; readonly address: string | undefined }
  /** A request body did not arrive whole within `bodyTimeout`: answered 408, connection closed. */
  | { readonly kind: "body-timeout"; readonly address: string | undefined }
  /**
   * The runtime failed to accept connections (on Deno: out of file descriptors). The server
   * logged it, sheds new connections for `retryIn` ms and then listens again.
   */
  | { readonly kind: "accept-failed"; readonly error: string; readonly retryIn: number }
  /**
   * A frame larger than `maxFrameBytes` arrived: the connection was closed with 1009. `bytes` is
   * undefined when the runtime cut the frame before buffering it (Bun).
   */
  | {
    readonly kind: "frame-too-large";
    readonly worker: string | undefined;
    readonly bytes: number | undefined;
    readonly limit: number;
  }
  /** A connection sent frames faster than `frameRate` (beyond `frameBurst`): closed with 1008. */
  | { readonly kind: "rate-limited"; readonly worker: string | undefined }
  /** A connection did not register within `registrationTimeout`: closed with 1008. */
  | { readonly kind: "registration-timeout"; readonly worker: string | undefined }
  /** A connection's credential expired: closed with 4003. */
  | { readonly kind: "credential-expired"; readonly worker: string | undefined }
  /** A connection's credential failed its periodic re-check (revoked): closed with 4003. */
  | { readonly kind: "credential-revoked"; readonly worker: string | undefined }
  /**
   * The connection was dropped with 4000 and its binding ended with reason "backpressure": its
   * outbound backlog (`queuedBytes` waiting here plus `bufferedBytes` in the runtime) passed
   * `maxBufferedBytes`, or the runtime dropped a frame (`cause: "socket-limit"`, `limit` is
   * `maxBufferedBytes`); or the backlogs of all sockets together passed `maxPinnedBytes` and
   * this one had stalled longest (`"server-budget"`); or its backlog had not shrunk for 10 s, a
   * peer that stopped reading (`"stalled"`; `limit` is `maxPinnedBytes` for both).
   */
  | {
    readonly kind: "backpressure";
    readonly worker: string | undefined;
    readonly bufferedBytes: number;
    readonly queuedBytes: number;
    readonly limit: number;
    readonly cause?: "socket-limit" | "server-budget" | "stalled";
  };

/** Receives {@linkcode NetEvent}s. Exceptions it throws are logged and contained. */
export type NetEventListener = (event: NetEvent) => void;

/** Call `listener` without letting it throw into the edge. */
export function report(
  listener: NetEventListener | undefined,
  event: NetEvent,
  logger: Logger = defaultLogger,
): void {
  if (!listener) return;
  try {
    listener(event);
  } catch (error) {
    logger.error("the onEvent listener threw", error);
  }
}

/** `listener` made safe to call: what it throws goes to `logger`. */
export function loggedListener(
  listener: NetEventListener | undefined,
  logger: Logger,
): NetEventListener | undefined {
  return listener && ((event) => report(listener, event, logger));
}
