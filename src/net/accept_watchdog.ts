/**
 * Keeping a `node:http` server on Deno accepting connections.
 *
 * When an accept fails on Deno — typically "Too many open files" while idle connections hold
 * every descriptor — the accept loop under Deno's `node:http` server ends without a word: no
 * `error` event, `listening` still true, the port still open, and connections wait in the
 * kernel's backlog forever (measured with Deno 2.9.6; Node's own loop survives the same). So the
 * server is probed instead:
 *
 * 1. Every `interval` the watchdog connects to the server itself over loopback and waits for the
 *    server's `connection` event of that very socket (matched by its local port).
 * 2. Seen within `timeout`: the loop is alive. A probe that cannot even connect (the process is
 *    out of descriptors itself) tells nothing and is tried again next time.
 * 3. Not seen: the loop is dead. The watchdog reports it (`onDead`), stops listening and listens
 *    again on the same port, backing off from 100 ms to 5 s while that fails. Connections already
 *    accepted (workers' WebSockets) are not touched.
 *
 * @module
 */

import net from "node:net";

/** A Node HTTP server as the watchdog sees it. */
export interface WatchedServer {
  // deno-lint-ignore no-explicit-any
  on(event: "connection", listener: (socket: any) => void): unknown;
  close(): unknown;
  listen(port: number, hostname: string, callback: () => void): unknown;
  // deno-lint-ignore no-explicit-any
  once(event: "error", listener: (error: any) => void): unknown;
  // deno-lint-ignore no-explicit-any
  off(event: "error", listener: (error: any) => void): unknown;
}

/** Options of {@linkcode watchAccepts}. */
export interface AcceptWatchdogOptions {
  /** The port the server listens on. */
  readonly port: number;
  /** The interface it listens on. */
  readonly hostname: string;
  /** Probe this often, ms. Default 5,000. */
  readonly interval?: number;
  /** A probe not accepted within this long means the loop is dead, ms. Default 2,000. */
  readonly timeout?: number;
  /** The loop was found dead; listening again in `retryIn` ms. */
  readonly onDead: (retryIn: number) => void;
  /** Listening again failed; trying again in `retryIn` ms. */
  readonly onRetry?: (error: unknown, retryIn: number) => void;
}

/** The first and the longest pause before listening again, ms. */
const RESTART_DELAY = { first: 100, max: 5000 } as const;

/**
 * Probe `server` until the returned function is called.
 *
 * @example
 * ```ts ignore
 * const stop = watchAccepts(server, { port, hostname, onDead: () => logger.error("...") });
 * // at shutdown:
 * stop();
 * ```
 */
export function watchAccepts(server: WatchedServer, options: AcceptWatchdogOptions): () => void {
  const interval = options.interval ?? 5000;
  const timeout = options.timeout ?? 2000;
  const probeHost = loopbackFor(options.hostname);
  /** While a probe is out: the remote ports of every connection accepted from loopback. */
  let seen: Set<number> | undefined;
  let stopped = false;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let delay: number = RESTART_DELAY.first;

  // The server may accept the probe before the probe's own "connect" names its port: every
  // port accepted while a probe is out is remembered, and the probe's looked up afterwards.
  server.on("connection", (socket: { remotePort?: number }) => {
    if (seen && socket.remotePort !== undefined) seen.add(socket.remotePort);
  });

  const schedule = (ms: number, body: () => void) => {
    if (stopped) return;
    timer = setTimeout(body, ms);
    (timer as { unref?: () => void }).unref?.();
  };

  const probe = () => {
    seen = new Set();
    const socket = net.connect(options.port, probeHost);
    socket.on("error", () => {});
    let localPort: number | undefined;
    // Gone at once: the server still accepts it (the kernel completed the handshake), and it
    // holds no place in the server's budget of connections waiting for their heads.
    socket.once("connect", () => {
      localPort = socket.localPort;
      socket.destroy();
    });
    schedule(timeout, () => {
      const connected = localPort !== undefined;
      const accepted = connected && seen!.has(localPort!);
      seen = undefined;
      socket.destroy();
      // Not connected: this process is out of descriptors itself, or the port is busy; no verdict.
      if (!connected || accepted) return schedule(interval, probe);
      restart();
    });
  };

  const restart = () => {
    const retryIn = delay;
    delay = Math.min(delay * 2, RESTART_DELAY.max);
    options.onDead(retryIn);
    try {
      server.close();
    } catch {
      // not listening: listen again all the same
    }
    schedule(retryIn, listenAgain);
  };

  const listenAgain = () => {
    const failed = (error: unknown) => {
      const retryIn = delay;
      delay = Math.min(delay * 2, RESTART_DELAY.max);
      options.onRetry?.(error, retryIn);
      schedule(retryIn, listenAgain);
    };
    server.once("error", failed);
    server.listen(options.port, options.hostname, () => {
      server.off("error", failed);
      delay = RESTART_DELAY.first;
      schedule(interval, probe);
    });
  };

  schedule(interval, probe);
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

/** Where to reach a server listening on `hostname` from this machine. */
function loopbackFor(hostname: string): string {
  if (hostname === "0.0.0.0" || hostname === "") return "127.0.0.1";
  if (hostname === "::" || hostname === "[::]") return "::1";
  return hostname;
}
