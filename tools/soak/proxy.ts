/**
 * The TCP proxies between the workers and the controller: one listener on 127.0.0.1 per worker
 * name, so that a cut hits exactly one worker's connections, and the port stays the same across
 * that worker's restarts.
 *
 * Each accepted connection is piped to the controller's fixed port. A cut destroys both sides of
 * every live connection of one worker, without a WebSocket close: the worker and the controller
 * each see the TCP connection drop, as on a network failure. While the controller is down the
 * upstream connect fails and the worker's connection is closed at once, so a worker retrying its
 * connection learns quickly that nobody is there.
 *
 * @module
 */

import net from "node:net";

/** A cuttable proxy for one worker. */
export class WorkerProxy {
  readonly #server: net.Server;
  readonly #sockets = new Set<net.Socket>();
  /** Connections accepted so far. */
  accepted = 0;

  private constructor(server: net.Server) {
    this.#server = server;
  }

  /** Listen on a free port of 127.0.0.1 and forward to `targetPort` there. */
  static async start(targetPort: number): Promise<WorkerProxy> {
    const server = net.createServer({ noDelay: true });
    const proxy = new WorkerProxy(server);
    server.on("connection", (client) => {
      proxy.accepted += 1;
      const upstream = net.connect({ port: targetPort, host: "127.0.0.1", noDelay: true });
      for (const socket of [client, upstream]) {
        proxy.#sockets.add(socket);
        socket.on("close", () => proxy.#sockets.delete(socket));
        socket.on("error", () => {});
      }
      client.pipe(upstream);
      upstream.pipe(client);
      client.on("close", () => upstream.destroy());
      upstream.on("close", () => client.destroy());
    });
    await new Promise<void>((resolve, reject) => {
      server.once("error", reject);
      server.listen(0, "127.0.0.1", () => resolve());
    });
    return proxy;
  }

  get port(): number {
    return (this.#server.address() as net.AddressInfo).port;
  }

  /** Drop every live connection of this worker; returns how many worker connections there were. */
  cut(): number {
    const count = Math.ceil(this.#sockets.size / 2);
    for (const socket of this.#sockets) socket.destroy();
    return count;
  }

  /** Cut everything and stop listening. */
  async close(): Promise<void> {
    this.cut();
    await new Promise<void>((resolve) => this.#server.close(() => resolve()));
  }
}

/** A free TCP port on 127.0.0.1 (listen on port 0, read it, close). */
export async function freePort(): Promise<number> {
  const server = net.createServer();
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => resolve());
  });
  const port = (server.address() as net.AddressInfo).port;
  await new Promise<void>((resolve) => server.close(() => resolve()));
  return port;
}
