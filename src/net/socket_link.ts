/**
 * The server side of one WebSocket as a core {@linkcode Link}: Hono's WebSocket events in, the
 * controller's frames out.
 *
 * What this edge adds to the socket, in the order a frame meets it:
 * - **Inbound rate limit**: each connection has a token bucket (`frameRate` a second, `frameBurst`
 *   at once), and draws from its credential's shared one too (`takeSharedFrame`). A connection
 *   that runs either dry is flooding: it is closed with 1008 before the frame is even measured,
 *   so a flood costs the server one comparison a frame until the close.
 * - **Inbound size limit**: a frame over `maxFrameBytes` (UTF-8 bytes) is not parsed; the
 *   connection closes with 1009. (Bun cuts larger frames before buffering them, see `bun.ts`;
 *   Deno hands over whole frames up to its own 64 MiB ceiling.)
 * - **Registration deadline**: a connection that has not registered (the controller has not
 *   answered `registered`) within `registrationTimeout` is closed with 1008, however chatty.
 * - **Credential lifetime**: the connection is closed with 4003 when its credential expires, and
 *   when a periodic re-check (`recheck`, every `recheckInterval`) says it is no longer valid;
 *   the client gets a fresh token and reconnects.
 * - **Outbound backpressure**: the runtime is handed at most `writeHighWater` bytes beyond what
 *   it has written; further frames wait in this edge's queue and are written as the socket
 *   drains. When the queue and the runtime's buffer together pass `maxBufferedBytes` (or the
 *   runtime dropped a frame, as Bun does past its own limit) the connection closes with 4000,
 *   which ends the binding with reason "backpressure" and requeues its jobs. The queue is then
 *   dropped: a peer that never reads pins at most `writeHighWater` in the runtime (Deno keeps a
 *   closed socket's unsent data until the peer goes away; it has no way to abort a socket).
 *   All the app's sockets also share one budget (`budget`, `maxPinnedBytes`): past it, the
 *   sockets whose backlog stalled longest are dropped the same way, and so is a socket whose
 *   backlog has not shrunk for 10 s whatever the total (`outbound_budget.ts`).
 * - **No escaping exceptions**: every handler is wrapped (on Deno an exception escaping
 *   `onMessage` ends the process).
 * - **Closed exactly once**: the receiver's `closed` is called once, at the first of: the
 *   controller closing the link, this edge closing it, or the socket's close event; `onFinish`
 *   follows, and every timer is cleared. `onGone` waits for the runtime's close event: a socket
 *   is counted against its caps (admission) until its connection is really gone.
 *
 * Per-connection state lives in the closure of {@linkcode socketEvents}; Hono's `WSContext` is
 * only used to reach the runtime socket (Bun makes a new context per event; `raw` is stable).
 *
 * @module
 */

import type { WSContext, WSEvents, WSMessageReceive } from "hono/ws";
import { utf8Length } from "../core/utf8.ts";
import { CloseCode, type Link, type LinkReceiver } from "../transport/link.ts";
import { type NetEventListener, report } from "./net_event.ts";
import { closeReason, guard as guardAs } from "./safety.ts";
import { defaultLogger, type Logger } from "../core/logger.ts";
import { TokenBucket } from "./token_bucket.ts";
import type { OutboundBudget } from "./outbound_budget.ts";

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
  /** Largest outbound backlog (this edge's queue plus the runtime's buffer) before the connection is closed with 4000, in bytes. */
  readonly maxBufferedBytes: number;
  /** Bytes the runtime may hold unwritten before frames wait in this edge's queue. Default 1 MiB. */
  readonly writeHighWater?: number;
  /** Sustained inbound frames a second (token bucket). Default: no limit. */
  readonly frameRate?: number;
  /** Inbound frames at once (the bucket's size). Default: `frameRate`. */
  readonly frameBurst?: number;
  /** A token from the budget this connection shares with others (its credential's); false: none left. */
  readonly takeSharedFrame?: () => boolean;
  /** Close (1008) a connection that has not registered within this long, ms. Default: never. */
  readonly registrationTimeout?: number;
  /** When the connection's credential expires, Unix ms: it is closed with 4003 then. */
  readonly expiresAt?: number;
  /** Whether the credential is still valid (re-run every `recheckInterval`); false closes with 4003. */
  readonly recheck?: () => Promise<boolean>;
  /** How often to run `recheck`, ms. Default 60,000. */
  readonly recheckInterval?: number;
  /** The worker the connection authenticated as (for reports). */
  readonly worker?: string;
  /** What the peer runs on (from the upgrade's `User-Agent`), passed on as `Link.runtime`. */
  readonly runtime?: string;
  /**
   * The budget this socket's backlog shares with the app's other sockets (`maxPinnedBytes`):
   * when the total passes it, the sockets stalled longest are dropped. Default: none.
   */
  readonly budget?: OutboundBudget;
  /** Receives reports of refused frames and the connections this edge closed. */
  readonly onEvent?: NetEventListener;
  /** Called once when the link is finished, however it ended (this edge may still be closing the socket). */
  readonly onFinish?: () => void;
  /**
   * Called once when the runtime reports the socket closed (the close handshake finished, or
   * the connection was dropped), or the upgrade failed: what the connection held is free only
   * then. A socket this edge closed whose peer never reads is not gone until the runtime drops it.
   */
  readonly onGone?: () => void;
  /** Where contained failures are reported. Default: `console.error`. */
  readonly logger?: Logger;
}

/** Timers beyond this many ms are re-armed in steps (setTimeout holds a 32-bit delay). */
const MAX_TIMER = 2 ** 31 - 1;
/** How often a queued outbound backlog is offered to the runtime again, ms. */
const DRAIN_POLL = 4;
const REGISTERED_PREFIX = '{"type":"registered"';

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
  const logger = options.logger ?? defaultLogger;
  const guard = (body: () => void) => guardAs("a WebSocket handler", body, logger);
  const highWater = Math.min(options.writeHighWater ?? 1024 * 1024, maxBufferedBytes);
  const bucket = options.frameRate === undefined ? undefined : new TokenBucket(
    options.frameRate,
    options.frameBurst ?? options.frameRate,
    performance.now(),
  );
  let socket: ServerSocket | undefined;
  let receiver: LinkReceiver | undefined;
  let closed = false;
  let registered = false;
  /** Frames waiting for the runtime's buffer to drain, and their size in characters. */
  let queue: string[] = [];
  let queued = 0;
  const timers: ReturnType<typeof setTimeout>[] = [];
  let drainTimer: ReturnType<typeof setTimeout> | undefined;
  let leaveBudget: (() => void) | undefined;
  let gone = false;
  const goneNow = () => {
    if (gone) return;
    gone = true;
    if (options.onGone) guard(options.onGone);
  };

  /** The link is gone: tell the receiver, once, and stop every timer. */
  const finish = (code: number, reason: string) => {
    if (closed) return;
    closed = true;
    queue = [];
    queued = 0;
    clearTimeout(drainTimer);
    for (const timer of timers) clearTimeout(timer);
    leaveBudget?.();
    const target = receiver;
    if (target) guard(() => target.closed(code, reason));
    if (options.onFinish) guard(options.onFinish);
  };
  const shut = (code: number, reason: string, abort = false) => {
    if (closed) return;
    guard(() => socket?.close(code, closeReason(reason), abort));
    finish(code, reason);
  };
  const overflow = () => {
    report(onEvent, {
      kind: "backpressure",
      worker,
      bufferedBytes: socket?.bufferedAmount() ?? 0,
      queuedBytes: queued,
      limit: maxBufferedBytes,
      cause: "socket-limit",
    });
    shut(CloseCode.backpressure, "outbound buffer limit exceeded", true);
  };
  const policy = (kind: "rate-limited" | "registration-timeout", detail: string) => {
    report(onEvent, { kind, worker });
    shut(CloseCode.policy, detail, true);
  };
  const write = (frame: string): boolean => {
    if (frame.startsWith(REGISTERED_PREFIX)) registered = true;
    if (socket!.send(frame) === "dropped" || socket!.bufferedAmount() > maxBufferedBytes) {
      overflow();
      return false;
    }
    return true;
  };
  const drain = () => {
    drainTimer = undefined;
    if (closed || !socket) return;
    while (queue.length > 0 && socket.bufferedAmount() <= highWater) {
      const frame = queue.shift()!;
      queued -= frame.length;
      if (!write(frame)) return;
    }
    if (queue.length > 0) drainTimer = setTimeout(drain, DRAIN_POLL);
  };
  const after = (delay: number, body: () => void) => {
    timers.push(setTimeout(() => guard(body), Math.min(Math.max(0, delay), MAX_TIMER)));
  };
  const watchExpiry = (expiresAt: number) => {
    const remaining = expiresAt - Date.now();
    if (remaining > MAX_TIMER) return after(MAX_TIMER, () => watchExpiry(expiresAt));
    after(remaining, () => {
      report(onEvent, { kind: "credential-expired", worker });
      shut(CloseCode.credentialExpired, "credential expired: get a new token");
    });
  };
  const watchCredential = (recheck: () => Promise<boolean>, interval: number) => {
    after(interval, () => {
      recheck().then(
        (valid) => {
          if (closed) return;
          if (valid) return watchCredential(recheck, interval);
          report(onEvent, { kind: "credential-revoked", worker });
          shut(CloseCode.credentialExpired, "credential no longer valid: get a new token");
        },
        (error) => logger.warn("re-checking a credential failed", error),
      );
    });
  };

  const link: Link = {
    runtime: options.runtime,
    send(frame) {
      if (closed || !socket) return;
      if (queue.length === 0 && socket.bufferedAmount() <= highWater) {
        write(frame);
        return;
      }
      queue.push(frame);
      queued += frame.length;
      if (queued + socket.bufferedAmount() > maxBufferedBytes) return overflow();
      drainTimer ??= setTimeout(drain, DRAIN_POLL);
    },
    close(code = CloseCode.normal, reason = "") {
      shut(code, reason);
    },
  };

  return {
    onOpen(_event, ws) {
      guard(() => {
        if (socket || closed) return;
        socket = serverSocketOf(ws);
        const open = socket;
        leaveBudget = options.budget?.join({
          pinned: () => queued + open.bufferedAmount(),
          drop: (cause, total) => {
            report(onEvent, {
              kind: "backpressure",
              worker,
              bufferedBytes: open.bufferedAmount(),
              queuedBytes: queued,
              limit: options.budget!.limit,
              cause,
            });
            shut(
              CloseCode.backpressure,
              cause === "stalled"
                ? "the peer stopped reading: nothing sent was taken for 10 s"
                : `the server's outbound budget is spent (${total} bytes unsent); this socket stalled longest`,
              true,
            );
          },
        });
        if (options.expiresAt !== undefined) watchExpiry(options.expiresAt);
        if (options.recheck) watchCredential(options.recheck, options.recheckInterval ?? 60_000);
        const deadline = options.registrationTimeout;
        if (deadline !== undefined && deadline > 0) {
          after(deadline, () => {
            if (!registered) policy("registration-timeout", "no registration within the deadline");
          });
        }
        receiver = accept(link);
      });
    },
    onMessage(event, _ws) {
      guard(() => {
        if (closed || !receiver) return;
        if (
          (bucket && !bucket.take(performance.now())) ||
          (options.takeSharedFrame && !options.takeSharedFrame())
        ) {
          return policy("rate-limited", "frame rate limit exceeded");
        }
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
      guard(() => {
        // The runtime cut an oversized frame before buffering it (Bun reports 1006 "Received too
        // big message" on its side and sends the peer 1009).
        if (!closed && (event.code === CloseCode.tooLarge || /too big/i.test(event.reason ?? ""))) {
          report(onEvent, {
            kind: "frame-too-large",
            worker,
            bytes: undefined,
            limit: maxFrameBytes,
          });
        }
        finish(event.code, event.reason);
        goneNow();
      });
    },
    onError() {
      // After an open, a close event follows. Before it (Deno: the upgrade failed) none will:
      // finish here so the connection's places are given back.
      guard(() => {
        if (!socket) {
          finish(1006, "the upgrade failed");
          goneNow();
        }
      });
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
