/**
 * A TCP proxy on 127.0.0.1 that holds every chunk for `delayMs` before passing it on, in each
 * direction: a network with a round trip of `2 × delayMs` between processes on one machine. Order
 * is kept (one queue and one timer per direction); when either side closes, both go.
 *
 * @module
 */

import net from "node:net";

/** A running proxy. */
export interface DelayProxy {
  /** The port to connect to instead of the target's. */
  readonly port: number;
  /** Stop listening and drop every connection. */
  close(): Promise<void>;
}

/** Forward `from` to `to`, each chunk `delayMs` after it arrived. */
function delayedPipe(from: net.Socket, to: net.Socket, delayMs: number): void {
  const queue: { at: number; chunk: Uint8Array }[] = [];
  let timer: ReturnType<typeof setTimeout> | undefined;
  const release = () => {
    timer = undefined;
    const now = performance.now();
    while (queue.length > 0 && queue[0].at <= now) to.write(queue.shift()!.chunk);
    if (queue.length > 0) timer = setTimeout(release, queue[0].at - now);
  };
  from.on("data", (chunk: Uint8Array) => {
    queue.push({ at: performance.now() + delayMs, chunk });
    timer ??= setTimeout(release, delayMs);
  });
  from.on("close", () => {
    clearTimeout(timer);
    to.destroy();
  });
  from.on("error", () => to.destroy());
}

/**
 * Listen on a free port of 127.0.0.1 and proxy each connection to `targetPort` with `delayMs`
 * added each way.
 *
 * @example
 * ```ts ignore
 * const proxy = await delayProxy(server.port, 10); // a 20 ms round trip
 * connectWorker({ url: `ws://127.0.0.1:${proxy.port}/workers`, ... });
 * await proxy.close();
 * ```
 */
export async function delayProxy(targetPort: number, delayMs: number): Promise<DelayProxy> {
  const sockets = new Set<net.Socket>();
  const server = net.createServer((inbound) => {
    const outbound = net.connect({ host: "127.0.0.1", port: targetPort });
    for (const socket of [inbound, outbound]) {
      socket.setNoDelay(true);
      sockets.add(socket);
      socket.on("close", () => sockets.delete(socket));
    }
    delayedPipe(inbound, outbound, delayMs);
    delayedPipe(outbound, inbound, delayMs);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  return {
    port: (server.address() as net.AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        for (const socket of sockets) socket.destroy();
        server.close(() => resolve());
      }),
  };
}
