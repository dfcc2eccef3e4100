/**
 * Test support: a scripted worker that speaks raw frames, a recording producer, and a way to
 * let queued in-process deliveries run.
 */

import {
  type ControllerFrame,
  decodeControllerFrame,
  type Link,
  type LinkReceiver,
  type ProducerEndpoint,
  type ProducerPort,
  type RequestNext,
  type Stored,
  type WorkerFrame,
  type WorkPullingController,
} from "../../mod.ts";
import type { Accepted, DeliveryConfirmed } from "../../mod.ts";

/** Let every queued microtask (in-process frame deliveries, promise continuations) run. */
export function quiesce(): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, 0));
}

/** A worker driven frame by frame by the test. */
export class ScriptedWorker {
  readonly received: ControllerFrame[] = [];
  closedWith: { code: number; reason: string } | undefined;
  readonly #receiver: LinkReceiver;
  session = "";
  nonce = "";
  binding = "";

  constructor(
    controller: WorkPullingController,
    readonly worker: string,
    readonly incarnation = `${worker}-inc-1`,
    identity: { worker?: string } = {},
  ) {
    const link: Link = {
      send: (frame) => {
        const decoded = decodeControllerFrame(frame);
        if (!decoded.ok) throw new Error(`controller sent a bad frame: ${decoded.detail}`);
        this.received.push(decoded.frame);
        if (decoded.frame.type === "registered") {
          this.session = decoded.frame.session;
          this.binding = decoded.frame.binding;
        }
      },
      close: (code = 1000, reason = "") => {
        this.closedWith = { code, reason };
      },
    };
    this.#receiver = controller.attach(link, identity);
  }

  sendRaw(frame: unknown): void {
    this.#receiver.receive(frame);
  }

  /** The transport refused a frame before passing it on. */
  refuse(detail = "frame exceeds 65536 bytes"): void {
    this.#receiver.refuse?.("too-large", detail);
  }

  send(frame: WorkerFrame): void {
    this.#receiver.receive(JSON.stringify(frame));
  }

  register(
    nonce: string = crypto.randomUUID(),
    producer = "jobs",
    incarnation = this.incarnation,
    features?: string[],
  ): void {
    this.nonce = nonce;
    this.send({
      type: "register",
      producer,
      worker: this.worker,
      incarnation,
      nonce,
      resendInterval: 2000,
      ...(features ? { features } : {}),
    });
  }

  /** Hand back everything after `upTo` (feature `release`). */
  release(confirmed: number, upTo: number): void {
    this.send({ type: "release", session: this.session, nonce: this.nonce, confirmed, upTo });
  }

  request(confirmed: number, upTo: number, resend = false): void {
    this.send({
      type: "request",
      session: this.session,
      nonce: this.nonce,
      confirmed,
      upTo,
      resend,
    });
  }

  ack(confirmed: number): void {
    this.send({ type: "ack", session: this.session, nonce: this.nonce, confirmed });
  }

  disconnect(code = 1006): void {
    this.#receiver.closed(code, "gone");
  }

  /** Every job received so far, as [seq, messageId, payload]. */
  jobs(): { seq: number; id: string; payload: unknown }[] {
    return this.received.flatMap((frame) =>
      frame.type === "jobs"
        ? frame.jobs.map((job, i) => ({ seq: frame.seq + i, id: job.id, payload: job.payload }))
        : []
    );
  }

  jobIds(): string[] {
    return this.jobs().map((job) => job.id);
  }
}

/** A producer that records the controller's messages and answers only when told to. */
export class ManualProducer implements ProducerEndpoint {
  port!: ProducerPort;
  readonly requests: RequestNext[] = [];
  readonly stored: Stored[] = [];
  readonly accepted: Accepted[] = [];
  readonly confirmed: DeliveryConfirmed[] = [];
  attach(port: ProducerPort): void {
    this.port = port;
  }
  onRequestNext(message: RequestNext): void {
    this.requests.push(message);
  }
  onStored(message: Stored): void {
    this.stored.push(message);
  }
  onAccepted(message: Accepted): void {
    this.accepted.push(message);
  }
  onDeliveryConfirmed(message: DeliveryConfirmed): void {
    this.confirmed.push(message);
  }
  get lastRequest(): RequestNext {
    return this.requests[this.requests.length - 1];
  }
  /** Answer the latest grant with `jobs` and acknowledge the resulting Stored. */
  produce(jobs: { messageId: string; payload: unknown }[]): void {
    const { session, token } = this.lastRequest;
    this.port.produced({ session, token, jobs });
    const stored = this.stored[this.stored.length - 1];
    if (stored?.token === token) this.port.storedAck({ session, token });
  }
}

/**
 * Connect like `connectInProcess`, but pass every worker-to-controller frame through `tap`,
 * which may rewrite it (to simulate a buggy worker on a live link).
 */
export function connectTapped(
  controller: WorkPullingController,
  worker: { attach(link: Link): LinkReceiver },
  tap: (frame: string) => string,
): { close(): void } {
  let closed = false;
  const peers: { controller?: LinkReceiver; worker?: LinkReceiver } = {};
  const close = (code = 1000, reason = "") => {
    if (closed) return;
    closed = true;
    queueMicrotask(() => {
      peers.controller?.closed(code, reason);
      peers.worker?.closed(code, reason);
    });
  };
  peers.controller = controller.attach({
    send: (frame) => queueMicrotask(() => !closed && peers.worker?.receive(frame)),
    close,
  });
  peers.worker = worker.attach({
    send: (frame) => queueMicrotask(() => !closed && peers.controller?.receive(tap(frame))),
    close,
  });
  return { close };
}

/** The controller side of a link to a real worker endpoint, driven frame by frame. */
export class ScriptedController {
  readonly sent: WorkerFrame[] = [];
  readonly #receiver: LinkReceiver;
  closedWith: { code: number; reason: string } | undefined;

  constructor(worker: { attach(link: Link): LinkReceiver }) {
    this.#receiver = worker.attach({
      send: (frame) => this.sent.push(JSON.parse(frame)),
      close: (code = 1000, reason = "") => void (this.closedWith = { code, reason }),
    });
  }

  /** The worker's latest registration. */
  get registration(): Extract<WorkerFrame, { type: "register" }> {
    const frame = this.sent.findLast((f) => f.type === "register");
    if (!frame || frame.type !== "register") throw new Error("the worker has not registered");
    return frame;
  }

  ofType<K extends WorkerFrame["type"]>(type: K): Extract<WorkerFrame, { type: K }>[] {
    return this.sent.filter((f): f is Extract<WorkerFrame, { type: K }> => f.type === type);
  }

  registered(session = "s1", binding = "b1", nextSeq = 1, features?: string[]): void {
    this.send({
      type: "registered",
      session,
      binding,
      nextSeq,
      nonce: this.registration.nonce,
      ...(features ? { features } : {}),
    });
  }

  jobs(seq: number, ids: string[], session = "s1"): void {
    this.send({ type: "jobs", session, seq, jobs: ids.map((id) => ({ id, payload: id })) });
  }

  send(frame: ControllerFrame): void {
    this.#receiver.receive(JSON.stringify(frame));
  }

  close(): void {
    this.#receiver.closed(1006, "gone");
  }
}
