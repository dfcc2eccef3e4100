/**
 * The transport seam. The controller and the worker endpoint speak to each other only through
 * a {@linkcode Link}: an ordered, bidirectional channel of text frames. A WebSocket is one; an
 * in-process pair and a `MessagePort` are others.
 *
 * The side that owns a link hands the protocol object the link and gets back a
 * {@linkcode LinkReceiver} to feed with whatever arrives.
 *
 * @module
 */

/** One end of an ordered channel of text frames. */
export interface Link {
  /** Send one frame. Sending on a closed link is a no-op. */
  send(frame: string): void;
  /** Close the channel; the peer's receiver gets `closed` with the code and reason. */
  close(code?: number, reason?: string): void;
  /** What the peer runs on, when the transport knows (for example `Deno 2.9.6`); for stats. */
  readonly runtime?: string;
}

/** What a transport calls when something arrives on a link. */
export interface LinkReceiver {
  /** One frame arrived. Never throws. */
  receive(frame: unknown): void;
  /** The link closed (by either side). Called at most once; never throws. */
  closed(code: number, reason: string): void;
  /**
   * Optional: the transport refused a frame before passing it on (for example one over its
   * byte limit). The receiver treats it like an undecodable frame: it reports why and ends the
   * link. Never throws.
   */
  refuse?(reason: "too-large" | "not-text", detail: string): void;
}

/** Close codes used by workpull (WebSocket close codes; the 4000 range is ours). */
export const CloseCode = {
  /** Normal closure. */
  normal: 1000,
  /** The frame was not valid data for the protocol (bad JSON, bad schema). */
  invalidFrame: 1007,
  /** A policy violation: wrong worker identity, a frame flood, no registration in time. */
  policy: 1008,
  /** A frame exceeded the size limit. */
  tooLarge: 1009,
  /** The controller shut down. */
  goingAway: 1001,
  /** The peer's outbound buffer passed its limit: it was not reading. */
  backpressure: 4000,
  /** No frame within the silence bound. */
  silent: 4001,
  /** Another connection took over this worker's binding. */
  superseded: 4002,
  /** The connection's credential expired or was revoked: get a new one and reconnect. */
  credentialExpired: 4003,
  /** The registration was refused (a `refused` frame says why to workers that understand it). */
  refused: 4004,
} as const;
