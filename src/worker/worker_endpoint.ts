/**
 * The worker endpoint: the user's handler plus the worker's half of a sub-flow.
 *
 * How a worker behaves, in order:
 *
 * 1. On every new link it **registers** (producer, worker name, incarnation, fresh nonce). The
 *    `registered` answer names a session and a binding; a session or binding it has not seen is
 *    **adopted**: the sub-flow restarts at `nextSeq`, the buffer is cleared. Then it grants
 *    demand: `request {confirmed, upTo: confirmed + window}`.
 * 2. Jobs arrive in `jobs` frames with contiguous sequences. Duplicates below the expected
 *    sequence are re-acknowledged, jobs beyond the granted demand are dropped, the rest are
 *    buffered (at most `window`).
 * 3. **One job at a time**, in sequence order, goes to the handler. Only when the handler
 *    resolves is the job confirmed: a top-up `request` when at most half the window remains,
 *    otherwise an `ack` once the buffer is drained (confirmations are cumulative).
 * 4. A handler that rejects is retried on this worker after the resend interval (the job stays
 *    in flight; it is never run twice at once), and an `error` event reports it.
 * 5. Every resend interval a **tick**: with no session or no controller traffic since the last
 *    tick it re-registers (a liveness probe that also recovers a lost registration); with a gap
 *    in the buffer it asks for a resend; if it sent nothing since the last tick it sends an
 *    `ack` as a heartbeat, so the controller always hears from it within one interval.
 *
 * A job whose binding ended while its handler was running (the controller requeued it) is not
 * confirmed; if it comes back to this worker, the remembered completion confirms it without
 * running the handler again.
 *
 * @module
 */

import { type Clock, systemClock, type TimerHandle } from "../core/clock.ts";
import {
  durationOption,
  functionOption,
  identifierOption,
  integerOption,
  optionsObject,
} from "../core/options.ts";
import { RecentMap } from "../core/recent_map.ts";
import { SafeEventTarget } from "../core/safe_event_target.ts";
import { decodeControllerFrame, encodeFrame } from "../protocol/codec.ts";
import {
  type JobsFrame,
  MAX_WINDOW,
  type RegisteredFrame,
  type WorkerFrame,
} from "../protocol/schemas.ts";
import { CloseCode, type Link, type LinkReceiver } from "../transport/link.ts";

/** One job handed to the handler. */
export interface Delivery<T = unknown> {
  /** The stable deduplication key: commit it with your side effects for exactly-once effects. */
  readonly messageId: string;
  /** The sequence in this worker's sub-flow (changes when a job is redelivered; never dedupe by it). */
  readonly seq: number;
  /** The job's payload, decoded fresh for this delivery. */
  readonly payload: T;
  /** 1 for the first run on this worker, then 2, 3... after the handler rejected. */
  readonly attempt: number;
  /** Aborted when the endpoint closes. */
  readonly signal: AbortSignal;
}

/** Options of {@linkcode WorkerEndpoint}. */
export interface WorkerEndpointOptions<T> {
  /** The producer (flow) name to serve. */
  readonly producer: string;
  /** This endpoint's stable name: its identity, and what an auth token names. */
  readonly name: string;
  /** Processes one job; the job is confirmed when the returned promise resolves. */
  readonly handler: (delivery: Delivery<T>) => unknown;
  /** Jobs granted per request and buffered at most. Default 50 (1..10,000). */
  readonly window?: number;
  /** Tick interval: heartbeat, re-registration and resend cadence, ms. Default 2000. */
  readonly resendInterval?: number;
  /**
   * Close the link after this many ticks without any controller traffic (a dead or half-open
   * link), so a reconnecting transport can open a new one. Default: never.
   */
  readonly silenceIntervals?: number;
  /** This start's incarnation id. Default: a random UUID. */
  readonly incarnation?: string;
  /** The time source. Default: the system clock. */
  readonly clock?: Clock;
}

/**
 * The handler rejected; the job stays in flight and runs again after the resend interval.
 *
 * @example
 * ```ts
 * import { HandlerErrorEvent } from "./worker_endpoint.ts";
 * const event = new HandlerErrorEvent("job-1", 1, new Error("boom"));
 * console.assert(event.type === "handler-error");
 * ```
 */
export class HandlerErrorEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The job's MessageID. */
    readonly messageId: string,
    /** Which attempt failed. */
    readonly attempt: number,
    /** What the handler threw. */
    readonly error: unknown,
  ) {
    super("handler-error");
  }
}

/**
 * The endpoint adopted a binding (a fresh sub-flow) from the controller.
 *
 * @example
 * ```ts
 * import { BoundEvent } from "./worker_endpoint.ts";
 * const event = new BoundEvent("session-1", "b1");
 * console.assert(event.binding === "b1");
 * ```
 */
export class BoundEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The controller session. */
    readonly session: string,
    /** The binding id. */
    readonly binding: string,
  ) {
    super("bound");
  }
}

interface InFlight {
  readonly seq: number;
  readonly messageId: string;
  readonly payload: unknown;
  attempt: number;
}

/** How many completed MessageIDs a worker remembers, to confirm a returning job without rerunning it. */
const REMEMBERED_COMPLETIONS = 1024;

/**
 * A worker endpoint. Attach it to a link (in-process, `MessagePort`, or the WebSocket client).
 *
 * @example
 * ```ts
 * import { BufferedProducer, connectInProcess, WorkerEndpoint, WorkPullingController } from "../../mod.ts";
 *
 * const controller = new WorkPullingController({ name: "jobs", producer: new BufferedProducer() });
 * await controller.start();
 * const worker = new WorkerEndpoint<{ url: string }>({
 *   producer: "jobs",
 *   name: "fetcher-1",
 *   window: 10,
 *   handler: async ({ payload, messageId }) => {
 *     console.log("processing", messageId, payload.url);
 *   },
 * });
 * connectInProcess(controller, worker);
 * await worker.close();
 * await controller.close();
 * ```
 */
export class WorkerEndpoint<T = unknown> extends SafeEventTarget<WorkerEndpointEventMap> {
  /** The producer (flow) name. */
  readonly producer: string;
  /** The endpoint name. */
  readonly name: string;
  /** This start's incarnation id. */
  readonly incarnation: string;
  /** The demand window. */
  readonly window: number;
  readonly #handler: (delivery: Delivery<T>) => unknown;
  readonly #resendInterval: number;
  readonly #silenceIntervals: number | undefined;
  readonly #clock: Clock;

  #link: Link | undefined;
  #linkChanged = false;
  #session = "";
  #binding = "";
  #nonce = "";
  #expectedSeq = 1;
  #confirmedSeq = 0;
  #requestUpTo = 0;
  readonly #buffer = new Map<number, { messageId: string; payload: unknown }>();
  #inFlight: InFlight | undefined;
  #running = false;
  readonly #completed = new RecentMap<string, true>(REMEMBERED_COMPLETIONS);
  #sawTraffic = false;
  #sentSinceTick = false;
  #quietTicks = 0;
  #lastGapRequest = Number.NEGATIVE_INFINITY;
  #tick: TimerHandle | undefined;
  #retry: TimerHandle | undefined;
  readonly #abort = new AbortController();
  #idle: (() => void) | undefined;
  #processed = 0;

  /** Validates `options`, throwing an error that names a bad option. */
  constructor(options: WorkerEndpointOptions<T>) {
    super();
    const owner = "WorkerEndpoint";
    optionsObject(owner, options);
    this.producer = identifierOption(owner, "producer", options.producer);
    this.name = identifierOption(owner, "name", options.name);
    this.#handler = functionOption(owner, "handler", options.handler, true);
    this.window = integerOption(owner, "window", options.window, 50, 1, MAX_WINDOW);
    this.#resendInterval = durationOption(
      owner,
      "resendInterval",
      options.resendInterval,
      2000,
      1,
      3_600_000,
    );
    this.#silenceIntervals = options.silenceIntervals === undefined
      ? undefined
      : integerOption(owner, "silenceIntervals", options.silenceIntervals, 4, 2, 1000);
    this.incarnation = options.incarnation === undefined
      ? crypto.randomUUID()
      : identifierOption(owner, "incarnation", options.incarnation);
    this.#clock = options.clock ?? systemClock;
  }

  /** Jobs this endpoint's handler completed. */
  get processed(): number {
    return this.#processed;
  }

  /** True after {@linkcode WorkerEndpoint.close}. */
  get closed(): boolean {
    return this.#abort.signal.aborted;
  }

  /** Attach a link to the controller; the endpoint registers at once. */
  attach(link: Link): LinkReceiver {
    if (this.closed) {
      link.close(CloseCode.normal, "worker closed");
      return { receive() {}, closed() {} };
    }
    this.#link = link;
    this.#linkChanged = true;
    this.#quietTicks = 0;
    this.#register();
    this.#scheduleTick();
    return {
      receive: (frame) => {
        if (this.#link === link) this.#guard(() => this.#onFrame(frame));
      },
      closed: () => {
        if (this.#link === link) this.#link = undefined;
      },
    };
  }

  /**
   * Stop: close the link (the controller requeues what this worker has not confirmed), abort
   * `delivery.signal`, and resolve once the running handler settled.
   */
  close(): Promise<void> {
    if (!this.closed) {
      this.#abort.abort(new Error("the worker endpoint closed"));
      this.#tick?.cancel();
      this.#retry?.cancel();
      const link = this.#link;
      this.#link = undefined;
      link?.close(CloseCode.normal, "worker closed");
    }
    if (!this.#running) return Promise.resolve();
    return new Promise((resolve) => (this.#idle = resolve));
  }

  /** Same as {@linkcode WorkerEndpoint.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // ------------------------------------------------------------------------------------------

  #guard(body: () => void): void {
    try {
      body();
    } catch (error) {
      console.error("workpull: worker endpoint handler failed", error);
    }
  }

  #send(frame: WorkerFrame): void {
    if (!this.#link) return;
    this.#sentSinceTick = true;
    this.#link.send(encodeFrame(frame));
  }

  #register(): void {
    this.#nonce = crypto.randomUUID();
    this.#send({
      type: "register",
      producer: this.producer,
      worker: this.name,
      incarnation: this.incarnation,
      nonce: this.#nonce,
      resendInterval: Math.max(1, Math.round(this.#resendInterval)),
    });
  }

  #request(resend: boolean): void {
    this.#requestUpTo = this.#confirmedSeq + this.window;
    this.#send({
      type: "request",
      session: this.#session,
      nonce: this.#nonce,
      confirmed: this.#confirmedSeq,
      upTo: this.#requestUpTo,
      resend,
    });
  }

  #ack(): void {
    this.#send({
      type: "ack",
      session: this.#session,
      nonce: this.#nonce,
      confirmed: this.#confirmedSeq,
    });
  }

  #scheduleTick(): void {
    if (this.#tick || this.closed) return;
    this.#tick = this.#clock.setTimeout(() => {
      this.#tick = undefined;
      this.#guard(() => this.#onTick());
      this.#scheduleTick();
    }, this.#resendInterval);
  }

  #onTick(): void {
    if (!this.#link) return;
    if (this.#sawTraffic) this.#quietTicks = 0;
    else this.#quietTicks += 1;
    if (this.#silenceIntervals !== undefined && this.#quietTicks >= this.#silenceIntervals) {
      const link = this.#link;
      this.#link = undefined;
      link.close(CloseCode.silent, "no controller traffic within the silence bound");
      return;
    }
    if (!this.#session || !this.#sawTraffic) this.#register();
    else if (this.#gapOpen()) this.#request(true);
    else if (!this.#sentSinceTick) this.#ack();
    this.#sawTraffic = false;
    this.#sentSinceTick = false;
  }

  #onFrame(data: unknown): void {
    const decoded = decodeControllerFrame(data);
    if (!decoded.ok) {
      // The controller is not speaking our protocol: drop the link; a reconnecting transport
      // will try again.
      const link = this.#link;
      this.#link = undefined;
      link?.close(CloseCode.invalidFrame, decoded.reason);
      return;
    }
    const frame = decoded.frame;
    if (frame.type === "registered") return this.#onRegistered(frame);
    if (frame.type === "jobs") return this.#onJobs(frame);
    if (frame.session !== this.#session) this.#register(); // reset: the controller restarted
  }

  #onRegistered(frame: RegisteredFrame): void {
    if (frame.nonce !== this.#nonce) return;
    this.#sawTraffic = true;
    if (frame.session !== this.#session || frame.binding !== this.#binding) {
      // A fresh sub-flow. A job still running belongs to the old one: it will not be confirmed.
      this.#session = frame.session;
      this.#binding = frame.binding;
      this.#expectedSeq = frame.nextSeq;
      this.#confirmedSeq = frame.nextSeq - 1;
      this.#buffer.clear();
      this.#inFlight = undefined;
      this.#retry?.cancel();
      this.dispatchEvent(new BoundEvent(frame.session, frame.binding));
    }
    // After a new link, ask for everything unconfirmed again: frames may have been lost with
    // the old link. On the same link nothing is lost, so this only re-asserts demand.
    this.#request(this.#linkChanged);
    this.#linkChanged = false;
    this.#drain();
  }

  #onJobs(frame: JobsFrame): void {
    if (frame.session !== this.#session) return;
    this.#sawTraffic = true;
    let duplicate = false;
    frame.jobs.forEach((job, i) => {
      const seq = frame.seq + i;
      if (seq > this.#requestUpTo) return; // beyond the demand granted
      if (seq < this.#expectedSeq) return void (duplicate = true);
      if (seq === this.#inFlight?.seq || this.#buffer.has(seq)) return;
      if (this.#buffer.size >= this.window) return; // full: keep the lower ones
      this.#buffer.set(seq, { messageId: job.id, payload: job.payload });
    });
    if (duplicate) this.#ack(); // heals a confirmation the controller did not see
    this.#drain();
    if (this.#gapOpen() && this.#clock.now() - this.#lastGapRequest >= this.#resendInterval) {
      this.#lastGapRequest = this.#clock.now();
      this.#request(true);
    }
  }

  /** The buffer holds jobs, but not the next one needed. */
  #gapOpen(): boolean {
    if (this.#buffer.size === 0) return false;
    const next = this.#inFlight ? this.#inFlight.seq + 1 : this.#expectedSeq;
    return !this.#buffer.has(next);
  }

  /** Hand the next job to the handler if nothing is running. */
  #drain(): void {
    if (this.#running || this.#inFlight || this.closed) return;
    const next = this.#buffer.get(this.#expectedSeq);
    if (!next) return;
    this.#buffer.delete(this.#expectedSeq);
    this.#inFlight = {
      seq: this.#expectedSeq,
      messageId: next.messageId,
      payload: next.payload,
      attempt: 1,
    };
    this.#run(this.#inFlight);
  }

  #run(job: InFlight): void {
    if (this.#completed.has(job.messageId)) {
      // Completed here already (its earlier binding ended before the confirmation landed).
      queueMicrotask(() => this.#guard(() => this.#handled(job)));
      return;
    }
    this.#running = true;
    const delivery: Delivery<T> = {
      messageId: job.messageId,
      seq: job.seq,
      payload: job.payload as T,
      attempt: job.attempt,
      signal: this.#abort.signal,
    };
    new Promise((resolve) => resolve(this.#handler(delivery))).then(
      () => {
        this.#finish();
        this.#processed += 1;
        this.#completed.set(job.messageId, true);
        this.#guard(() => this.#handled(job));
      },
      (error) => {
        this.#finish();
        this.dispatchEvent(new HandlerErrorEvent(job.messageId, job.attempt, error));
        this.#guard(() => this.#failed(job));
      },
    );
  }

  #finish(): void {
    this.#running = false;
    if (this.closed) {
      this.#idle?.();
      this.#idle = undefined;
    }
  }

  /** The handler resolved: confirm if the job still belongs to the current sub-flow. */
  #handled(job: InFlight): void {
    if (this.#inFlight !== job) return this.#drain(); // its binding ended meanwhile
    this.#inFlight = undefined;
    this.#confirmedSeq = job.seq;
    this.#expectedSeq = job.seq + 1;
    if (this.#requestUpTo - this.#confirmedSeq <= Math.floor(this.window / 2)) this.#request(false);
    else if (this.#buffer.size === 0) this.#ack();
    this.#drain();
    if (this.#gapOpen()) this.#request(true);
  }

  /** The handler rejected: run the same job again after the resend interval. */
  #failed(job: InFlight): void {
    if (this.#inFlight !== job) return this.#drain();
    this.#retry = this.#clock.setTimeout(() => {
      this.#retry = undefined;
      if (this.#inFlight !== job || this.closed) return this.#guard(() => this.#drain());
      job.attempt += 1;
      this.#guard(() => this.#run(job));
    }, this.#resendInterval);
  }
}

/** The worker endpoint's events by name. */
export interface WorkerEndpointEventMap {
  /** The handler rejected; the job runs again after the resend interval. */
  "handler-error": HandlerErrorEvent;
  /** A fresh binding was adopted. */
  "bound": BoundEvent;
}
