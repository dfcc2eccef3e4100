/**
 * Deadlines and a budget for TCP connections that have not yet sent a whole request head, on a
 * Node HTTP server (`node:http`, also what `serveDeno` serves through).
 *
 * A connection costs a descriptor and a little memory from the moment it is accepted, but the
 * app sees it only once its request head has arrived. Someone who opens connections and then
 * says nothing, or trickles a head one header line at a time, holds those costs for free:
 * Deno's HTTP server has no header timeout at all, and Node's (`headersTimeout`, 60 s by default)
 * is checked only every `connectionsCheckingInterval`. So, in the order a connection meets it:
 *
 * 1. **Accepted**: when `maxPendingHeads` connections are already waiting for their heads, the
 *    new one is dropped at once (`connection-refused`, reason `too-many-pending-heads`): the
 *    budget bounds what heads in progress can hold, and connections already serving (workers'
 *    WebSockets, answered requests) are not touched.
 * 2. **Waiting for its head**: a connection whose first request head has not arrived within
 *    `headTimeout` is dropped (`head-timeout`), however many bytes of head it trickled.
 * 3. **Head arrived** (a `request` or an `upgrade` event names its socket): it leaves the budget;
 *    from then on the body deadline (`bodyTimeout`, in the app) and the WebSocket edge apply.
 *
 * Later requests on a kept-alive connection are left to the runtime's keep-alive timeout.
 *
 * @module
 */

import { type NetEventListener, report } from "./net_event.ts";

/** A connection as the guard sees it (a Node `net.Socket`). */
export interface GuardedSocket {
  destroy(): void;
  once(event: "close", listener: () => void): unknown;
  readonly remoteAddress?: string;
}

/** The events of a Node HTTP server the guard listens to. */
export interface GuardedServer {
  // deno-lint-ignore no-explicit-any
  on(event: "connection" | "request" | "upgrade", listener: (...args: any[]) => void): unknown;
}

/** Options of {@linkcode guardConnections}. */
export interface ConnectionGuardOptions {
  /** Drop a connection whose first request head has not arrived within this long, ms. */
  readonly headTimeout: number;
  /** Connections waiting for their first request head at most; past it new ones are dropped. */
  readonly maxPendingHeads: number;
  /** Receives `head-timeout` and `connection-refused` reports. */
  readonly onEvent?: NetEventListener;
}

/** What {@linkcode guardConnections} returns. */
export interface ConnectionGuard {
  /** Connections waiting for their first request head now. */
  readonly pending: number;
  /** Stop every deadline (the server is closing). */
  close(): void;
}

/**
 * Apply head deadlines and the pending-head budget to `server`'s connections.
 *
 * @example
 * ```ts ignore
 * import { createServer } from "node:http";
 * const server = createServer(handler);
 * const guard = guardConnections(server, { headTimeout: 10_000, maxPendingHeads: 256 });
 * ```
 */
export function guardConnections(
  server: GuardedServer,
  options: ConnectionGuardOptions,
): ConnectionGuard {
  const waiting = new Map<GuardedSocket, ReturnType<typeof setTimeout>>();
  const arrived = (socket: GuardedSocket | undefined) => {
    if (!socket) return;
    const timer = waiting.get(socket);
    if (timer === undefined) return;
    clearTimeout(timer);
    waiting.delete(socket);
  };
  server.on("connection", (socket: GuardedSocket) => {
    if (waiting.size >= options.maxPendingHeads) {
      report(options.onEvent, {
        kind: "connection-refused",
        reason: "too-many-pending-heads",
        address: socket.remoteAddress,
        worker: undefined,
      });
      return socket.destroy();
    }
    const timer = setTimeout(() => {
      if (!waiting.delete(socket)) return;
      report(options.onEvent, { kind: "head-timeout", address: socket.remoteAddress });
      socket.destroy();
    }, options.headTimeout);
    waiting.set(socket, timer);
    socket.once("close", () => arrived(socket));
  });
  const onHead = (request: { socket?: GuardedSocket }) => arrived(request.socket);
  server.on("request", onHead);
  server.on("upgrade", onHead);
  return {
    get pending() {
      return waiting.size;
    },
    close() {
      for (const timer of waiting.values()) clearTimeout(timer);
      waiting.clear();
    },
  };
}
