/**
 * What the network edge reports about requests and connections it refused or cut, beside the
 * controller's own events (which still say which binding ended and why).
 *
 * @module
 */

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
  /** A frame larger than `maxFrameBytes` arrived: the connection was closed with 1009. */
  | {
    readonly kind: "frame-too-large";
    readonly worker: string | undefined;
    readonly bytes: number;
    readonly limit: number;
  }
  /**
   * The connection's outbound buffer passed `maxBufferedBytes` (or the runtime dropped a frame):
   * it was closed with 4000 and its binding ended with reason "backpressure".
   */
  | {
    readonly kind: "backpressure";
    readonly worker: string | undefined;
    readonly bufferedBytes: number;
    readonly limit: number;
  };

/** Receives {@linkcode NetEvent}s. Exceptions it throws are logged and contained. */
export type NetEventListener = (event: NetEvent) => void;

/** Call `listener` without letting it throw into the edge. */
export function report(listener: NetEventListener | undefined, event: NetEvent): void {
  if (!listener) return;
  try {
    listener(event);
  } catch (error) {
    console.error("workpull: the onEvent listener threw", error);
  }
}
