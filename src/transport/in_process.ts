/**
 * In-process transports: a controller and worker endpoints in one process (or in Web Workers
 * over a `MessagePort`) exchange the same text frames they would over a WebSocket, so the same
 * decoding and validation apply.
 *
 * @module
 */

import type { Link, LinkReceiver } from "./link.ts";

/** Something that accepts a link and returns where to deliver what arrives on it. */
export interface LinkAcceptor {
  /** Attach a link; the returned receiver gets the peer's frames. */
  attach(link: Link): LinkReceiver;
}

/** A connected in-process pair; closing either end closes both. */
export interface InProcessConnection {
  /** Close the connection from the worker side (as a socket close would). */
  close(code?: number, reason?: string): void;
  /** True once either side closed. */
  readonly closed: boolean;
}

/**
 * Connect a worker endpoint to a controller in the same process. Frames are delivered
 * asynchronously (one microtask later) and in order, like a socket would, so neither side is
 * re-entered while it handles a frame. As on a socket, a close comes after the frames sent before
 * it: the side that did not close receives them, then the close; frames sent after it are
 * dropped, and so are frames still on their way to the side that closed.
 *
 * @example
 * ```ts
 * import { BufferedProducer, connectInProcess, WorkerEndpoint, WorkPullingController } from "../../mod.ts";
 *
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "jobs", producer });
 * await controller.start();
 * const worker = new WorkerEndpoint({ producer: "jobs", name: "w1", handler: () => {} });
 * const connection = connectInProcess(controller, worker);
 * const receipt = await producer.submit({ hello: "world" });
 * console.assert(receipt.seq === 1);
 * connection.close();
 * await worker.close();
 * await controller.close();
 * ```
 */
export function connectInProcess(
  controller: LinkAcceptor,
  worker: LinkAcceptor,
): InProcessConnection {
  type Side = "controller" | "worker";
  /** The side that closed the connection first, once it is closed. */
  let closedBy: Side | undefined;
  // Filled right below; the links only use them after both sides attached.
  const receivers: { controller?: LinkReceiver; worker?: LinkReceiver } = {};
  const closeBoth = (by: Side, code: number, reason: string) => {
    if (closedBy) return;
    closedBy = by;
    // Queued behind the frames already sent, so they arrive first.
    queueMicrotask(() => {
      receivers.controller?.closed(code, reason);
      receivers.worker?.closed(code, reason);
    });
  };
  const linkFor = (from: Side, to: Side): Link => ({
    send(frame) {
      if (closedBy) return;
      queueMicrotask(() => {
        if (closedBy !== to) receivers[to]?.receive(frame);
      });
    },
    close: (code = 1000, reason = "") => closeBoth(from, code, reason),
  });
  receivers.controller = controller.attach(linkFor("controller", "worker"));
  receivers.worker = worker.attach(linkFor("worker", "controller"));
  return {
    close: (code = 1000, reason = "") => closeBoth("worker", code, reason),
    get closed() {
      return closedBy !== undefined;
    },
  };
}

/** The control message that tells the other side of a port the link closed. */
interface PortClose {
  readonly workpullClose: { readonly code: number; readonly reason: string };
}

function isPortClose(data: unknown): data is PortClose {
  return typeof data === "object" && data !== null && "workpullClose" in data;
}

/**
 * Attach one side (controller or worker endpoint) to a `MessagePort`, for example one end of a
 * `MessageChannel` transferred to a Web Worker. Call it on both sides with their own port.
 *
 * @example Controller in the main thread, worker endpoint on the other port
 * ```ts
 * import { attachPort, BufferedProducer, WorkerEndpoint, WorkPullingController } from "../../mod.ts";
 *
 * const controller = new WorkPullingController({ name: "jobs", producer: new BufferedProducer() });
 * await controller.start();
 * const { port1, port2 } = new MessageChannel();
 * const main = attachPort(controller, port1);
 * // In a real app port2 is transferred to a Web Worker that runs this line:
 * const side = attachPort(new WorkerEndpoint({ producer: "jobs", name: "w1", handler: () => {} }), port2);
 * side.close();
 * main.close();
 * await controller.close();
 * ```
 */
export function attachPort(
  side: LinkAcceptor,
  port: MessagePort,
): InProcessConnection {
  let closed = false;
  const attached: { receiver?: LinkReceiver } = {};
  const finish = (code: number, reason: string, notifyPeer: boolean) => {
    if (closed) return;
    closed = true;
    if (notifyPeer) port.postMessage({ workpullClose: { code, reason } } satisfies PortClose);
    port.close();
    attached.receiver?.closed(code, reason);
  };
  port.onmessage = (event: MessageEvent) => {
    if (closed) return;
    if (isPortClose(event.data)) {
      finish(event.data.workpullClose.code, event.data.workpullClose.reason, false);
    } else attached.receiver?.receive(event.data);
  };
  attached.receiver = side.attach({
    send: (frame) => {
      if (!closed) port.postMessage(frame);
    },
    close: (code = 1000, reason = "") => finish(code, reason, true),
  });
  port.start();
  return {
    close: (code = 1000, reason = "") => finish(code, reason, true),
    get closed() {
      return closed;
    },
  };
}
