/**
 * The server side of one WebSocket as a core {@linkcode Link}: Hono's WebSocket events in, the
 * controller's frames out.
 *
 * What this edge adds to the socket:
 * - **Inbound size limit**: a frame over `maxFrameBytes` (UTF-8 bytes) is not parsed; the
 *   connection closes with 1009.
 * - **Outbound backpressure**: before and after every send the socket's buffered amount is
 *   compared with `maxBufferedBytes`; past it (or when the runtime dropped a frame, as Bun does
 *   past its own 16 MiB) the connection closes with 4000, which ends the binding with reason
 *   "backpressure" and requeues its jobs. The protocol's credits bound what is sent at all.
 * - **No escaping exceptions**: every handler is wrapped (on Deno an exception escaping
 *   `onMessage` ends the process).
 * - **Closed exactly once**: the receiver's `closed` is called once, at the first of: the
 *   controller closing the link, this edge closing it, or the socket's close event.
 *
 * Per-connection state lives in the closure of {@linkcode socketEvents}; Hono's `WSContext` is
 * only used to reach the runtime socket (Bun makes a new context per event; `raw` is stable).
 *
 * @module
 */

import type { WSContext, WSEvents, WSMessageReceive } from "hono/ws";
import { utf8Length } from "../controller/durable_lane.ts";
import { CloseCode, type Link, type LinkReceiver } from "../transport/link.ts";
import { type NetEventListener, report } from "./net_event.ts";
import { closeReason, guard as guardAs } from "./safety.ts";

/** What the edge needs from a server-side socket, whatever the runtime. */
export interface ServerSocket {
  /** Send one text frame: "dropped" when the runtime discarded it, "closed" when not open. */
  send(frame: string): "sent" | "dropped" | "closed";
  /** Bytes queued for the peer and not yet written. */
  bufferedAmount(): number;
  /** Close with a code and a reason; `abort` also drops the connection without waiting. */
  close(code: number, reason: string, abort: boolean): void;
}

interface RawSocket {
  send(data: string): unknown;
  close(code?: number, reason?: string): void;
  readonly readyState: number;
  readonly bufferedAmount?: number;
  getBufferedAmount?(): number;
  terminate?(): void;
}

const OPEN = 1;

/**
 * The runtime socket behind a Hono `WSContext`: Bun's `ServerWebSocket` (whose `send` reports
 * backpressure and drops), a WHATWG `WebSocket` (Deno) or a `ws` socket (Node), or the context
 * itself as a fallback.
 */
export function serverSocketOf(ws: WSContext): ServerSocket {
  const raw = ws.raw as RawSocket | undefined;
  if (raw && typeof raw.send === "function" && typeof raw.getBufferedAmount === "function") {
    // Bun: send() returns the bytes written, -1 when queued under backpressure, 0 when dropped.
    return {
      send: (frame) =>
        raw.readyState !== OPEN ? "closed" : raw.send(frame) === 0 ? "dropped" : "sent",
      bufferedAmount: () => raw.getBufferedAmount!(),
      close(code, reason, abort) {
        raw.close(code, reason);
        if (abort) raw.terminate?.();
      },
    };
  }
  if (raw && typeof raw.send === "function" && typeof raw.bufferedAmount === "number") {
    // Deno (a WHATWG WebSocket) and Node's `ws`: both buffer without bound, so bufferedAmount is
    // the signal. `ws` can also drop the connection at once (its close frame would wait behind
    // the buffer a peer that stopped reading never drains).
    return {
      send: (frame) => raw.readyState !== OPEN ? "closed" : (raw.send(frame), "sent"),
      bufferedAmount: () => raw.bufferedAmount ?? 0,
      close(code, reason, abort) {
        raw.close(code, reason);
        if (abort) raw.terminate?.();
      },
    };
  }
  return {
    send: (frame) => ws.readyState !== OPEN ? "closed" : (ws.send(frame), "sent"),
    bufferedAmount: () => 0,
    close: (code, reason) => ws.close(code, reason),
  };
}

/** Limits and reporting for {@linkcode socketEvents}. */
export interface SocketLinkOptions {
  /** Largest inbound frame, in UTF-8 bytes. */
  readonly maxFrameBytes: number;
  /** Largest outbound buffer before the connection is closed with 4000, in bytes. */
  readonly maxBufferedBytes: number;
  /** The worker the connection authenticated as (for reports). */
  readonly worker?: string;
  /** Receives reports of oversized frames and backpressure closes. */
  readonly onEvent?: NetEventListener;
}

/**
 * Hono WebSocket event handlers that turn one socket into a {@linkcode Link} attached through
 * `accept` (for example `(link) => controller.attach(link, identity)`).
 *
 * @example With a Deno upgrade
 * ```ts ignore
 * import { upgradeWebSocket } from "hono/deno";
 * app.get("/workers", upgradeWebSocket(() =>
 *   socketEvents((link) => controller.attach(link), { maxFrameBytes: 65_536, maxBufferedBytes: 8 << 20 })
 * ));
 * ```
 */
export function socketEvents(
  accept: (link: Link) => LinkReceiver,
  options: SocketLinkOptions,
): WSEvents {
  const { maxFrameBytes, maxBufferedBytes, worker, onEvent } = options;
  let socket: ServerSocket | undefined;
  let receiver: LinkReceiver | undefined;
  let closed = false;

  /** The link is gone: tell the receiver, once. */
  const finish = (code: number, reason: string) => {
    if (closed) return;
    closed = true;
    const target = receiver;
    if (target) guard(() => target.closed(code, reason));
  };
  const shut = (code: number, reason: string, abort = false) => {
    if (closed) return;
    guard(() => socket?.close(code, closeReason(reason), abort));
    finish(code, reason);
  };
  const overflow = () => {
    const buffered = socket?.bufferedAmount() ?? 0;
    report(onEvent, {
      kind: "backpressure",
      worker,
      bufferedBytes: buffered,
      limit: maxBufferedBytes,
    });
    shut(CloseCode.backpressure, "outbound buffer limit exceeded", true);
  };

  const link: Link = {
    send(frame) {
      if (closed || !socket) return;
      if (socket.bufferedAmount() > maxBufferedBytes) return overflow();
      const outcome = socket.send(frame);
      if (outcome === "dropped" || socket.bufferedAmount() > maxBufferedBytes) overflow();
    },
    close(code = CloseCode.normal, reason = "") {
      shut(code, reason);
    },
  };

  return {
    onOpen(_event, ws) {
      guard(() => {
        if (socket) return;
        socket = serverSocketOf(ws);
        receiver = accept(link);
      });
    },
    onMessage(event, _ws) {
      guard(() => {
        if (closed || !receiver) return;
        const data = event.data;
        const bytes = frameBytes(data, maxFrameBytes);
        if (bytes > maxFrameBytes) {
          report(onEvent, { kind: "frame-too-large", worker, bytes, limit: maxFrameBytes });
          const detail = `frame exceeds ${maxFrameBytes} bytes`;
          // The controller reports it as a rejected frame and closes the link with 1009.
          if (receiver.refuse) return receiver.refuse("too-large", detail);
          return shut(CloseCode.tooLarge, detail);
        }
        receiver.receive(data);
      });
    },
    onClose(event, _ws) {
      guard(() => finish(event.code, event.reason));
    },
    onError() {
      // A close event follows; nothing to do here, and nothing may escape.
    },
  };
}

/**
 * The UTF-8 size of a frame, counted exactly only when it could exceed `limit` (a string of
 * `n` UTF-16 units takes between `n` and `3n` bytes).
 */
function frameBytes(data: WSMessageReceive, limit: number): number {
  if (typeof data === "string") {
    if (data.length > limit) return data.length;
    return data.length * 3 <= limit ? data.length : utf8Length(data);
  }
  if (data instanceof Blob) return data.size;
  return data.byteLength;
}

function guard(body: () => void): void {
  guardAs("a WebSocket handler", body);
}
