/**
 * The controller's typed events. Each is a plain `Event` subclass carrying read-only facts;
 * they are dispatched after the state change they describe, and a listener that throws is
 * contained (see `SafeEventTarget`).
 *
 * @module
 */

/** Where a terminal failure happened. */
export type FailureStage = "load" | "store" | "accept" | "confirm" | "protocol" | "lease";

/** Which side's controller failed. */
export type ControllerRole = "producer" | "consumer";

/** Why a binding ended. */
export type UnbindReason =
  | "replaced"
  | "disconnected"
  | "silent"
  | "illegal-demand"
  | "illegal-confirmation"
  | "malformed-frame"
  | "backpressure"
  | "job-age"
  | "controller-restart"
  | "controller-stopped";

/** Why an incoming frame or registration was refused. */
export type RejectReason =
  | "too-large"
  | "not-text"
  | "malformed-json"
  | "invalid-frame"
  | "wrong-producer"
  | "identity-mismatch"
  | "stale-incarnation"
  | "already-bound";

/**
 * Exactly one per controller incarnation: a terminal failure. The controller stops; the producer
 * lives on; recovery is `respawn()`.
 *
 * @example
 * ```ts
 * import { ReliableDeliveryFailedEvent } from "./events.ts";
 * const event = new ReliableDeliveryFailedEvent("jobs", "protocol", "producer", new Error("x"));
 * console.assert(event.type === "delivery-failed" && event.stage === "protocol");
 * ```
 */
export class ReliableDeliveryFailedEvent extends Event {
  /** Wall-clock time of the failure. */
  readonly timestamp: Date = new Date();
  /** Creates the event. */
  constructor(
    /** The producer (flow) name. */
    readonly endpoint: string,
    /** Where it failed. */
    readonly stage: FailureStage,
    /** Which controller failed. */
    readonly role: ControllerRole,
    /** The cause. */
    readonly error: unknown,
  ) {
    super("delivery-failed");
  }
}

/**
 * A worker endpoint bound: a fresh sub-flow exists for it.
 *
 * @example
 * ```ts
 * import { WorkerBoundEvent } from "./events.ts";
 * const event = new WorkerBoundEvent("w1", "inc-1", "b1");
 * console.assert(event.worker === "w1");
 * ```
 */
export class WorkerBoundEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The worker endpoint name. */
    readonly worker: string,
    /** Its incarnation. */
    readonly incarnation: string,
    /** The binding id. */
    readonly binding: string,
  ) {
    super("worker-bound");
  }
}

/**
 * A binding ended; its unconfirmed jobs went back to the head of the pool.
 *
 * @example
 * ```ts
 * import { WorkerUnboundEvent } from "./events.ts";
 * const event = new WorkerUnboundEvent("w1", "inc-1", "b1", "disconnected", 3);
 * console.assert(event.requeued === 3);
 * ```
 */
export class WorkerUnboundEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The worker endpoint name. */
    readonly worker: string,
    /** Its incarnation. */
    readonly incarnation: string,
    /** The binding id. */
    readonly binding: string,
    /** Why it ended. */
    readonly reason: UnbindReason,
    /** How many unconfirmed jobs were requeued. */
    readonly requeued: number,
  ) {
    super("worker-unbound");
  }
}

/**
 * Jobs returned to the head of the pending pool, in their old order.
 *
 * @example
 * ```ts
 * import { RequeuedEvent } from "./events.ts";
 * const event = new RequeuedEvent("w1", ["job-1", "job-2"]);
 * console.assert(event.messageIds.length === 2);
 * ```
 */
export class RequeuedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The worker whose binding ended. */
    readonly worker: string,
    /** The requeued MessageIDs, head first. */
    readonly messageIds: readonly string[],
  ) {
    super("requeued");
  }
}

/**
 * A frame or registration from a worker was refused. Malformed frames also end the sender's
 * binding and close its link; refused registrations change nothing.
 *
 * @example
 * ```ts
 * import { FrameRejectedEvent } from "./events.ts";
 * const event = new FrameRejectedEvent("w1", "malformed-json", "frame is not valid JSON");
 * console.assert(event.reason === "malformed-json");
 * ```
 */
export class FrameRejectedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The worker, when known (from the binding or the authenticated identity). */
    readonly worker: string | undefined,
    /** Why. */
    readonly reason: RejectReason,
    /** A short explanation. */
    readonly detail: string,
  ) {
    super("frame-rejected");
  }
}

/**
 * The controller restarted itself after a durable operation exhausted its retries: a new
 * session, state reloaded under a new epoch. No failure event accompanies it.
 *
 * @example
 * ```ts
 * import { ControllerRestartedEvent } from "./events.ts";
 * const event = new ControllerRestartedEvent("session-2", new Error("backend down"));
 * console.assert(event.session === "session-2");
 * ```
 */
export class ControllerRestartedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The new session. */
    readonly session: string,
    /** The error that exhausted the retries. */
    readonly cause: unknown,
  ) {
    super("restarted");
  }
}

/**
 * A job at a worker reported progress (feature `outcomes`; rate-limited by the worker, at most
 * 4,096 characters of JSON).
 *
 * @example
 * ```ts
 * import { ProgressEvent } from "./events.ts";
 * const event = new ProgressEvent("job-1", "w1", { percent: 40 });
 * console.assert(event.type === "progress");
 * ```
 */
export class ProgressEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The job's MessageID. */
    readonly messageId: string,
    /** The worker running it. */
    readonly worker: string,
    /** What the handler reported. */
    readonly value: unknown,
  ) {
    super("progress");
  }
}

/** The controller's events by name. */
export interface ControllerEventMap {
  /** A terminal failure (one per incarnation). */
  "delivery-failed": ReliableDeliveryFailedEvent;
  /** A worker endpoint bound. */
  "worker-bound": WorkerBoundEvent;
  /** A binding ended. */
  "worker-unbound": WorkerUnboundEvent;
  /** Jobs went back to the head of the pool. */
  "requeued": RequeuedEvent;
  /** A frame or registration was refused. */
  "frame-rejected": FrameRejectedEvent;
  /** The controller restarted itself after durable retries ran out. */
  "restarted": ControllerRestartedEvent;
  /** A job at a worker reported progress. */
  "progress": ProgressEvent;
}
