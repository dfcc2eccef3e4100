/**
 * The worker endpoint: the user's handler plus the worker's half of a sub-flow.
 *
 * How a worker behaves, in order:
 *
 * 1. On every new link it **registers** (producer, worker name, incarnation, fresh nonce, the
 *    protocol features it understands). The `registered` answer names a session and a binding; a
 *    session or binding it has not seen is **adopted**: the sub-flow restarts at `nextSeq`, the
 *    buffer is cleared. Then it grants demand: `request {confirmed, upTo: confirmed + window}`.
 * 2. Jobs arrive in `jobs` frames with contiguous sequences. Duplicates below the expected
 *    sequence are re-acknowledged, jobs beyond the granted demand are dropped, the rest are
 *    buffered (at most `window`).
 * 3. **One job at a time**, in sequence order, goes to the handler, and only while the binding is
 *    **live** (registered on the current link): a worker that lost its link, or was told its
 *    binding ended, starts nothing more, because the controller has given those jobs to others.
 * 4. Only when the handler resolves is the job confirmed: a top-up `request` when at most half the
 *    window remains, otherwise an `ack` within `ackDelay` (completions in that delay share one
 *    cumulative ack; `ackDelay: 0` acks each at once), so a finished job is never left
 *    unconfirmed for long.
 * 5. A handler that rejects is retried on this worker after the resend interval (the job stays in
 *    flight; it is never run twice at once), and a `handler-error` event reports it.
 * 6. Every resend interval a **tick**: with no session or no controller traffic since the last
 *    tick it re-registers (a liveness probe that also recovers a lost registration); with a gap in
 *    the buffer it asks for a resend; if it sent nothing since the last tick it sends a heartbeat,
 *    so the controller always hears from it within one interval: an `ack`, or, when it is idle
 *    with open demand and no job came for the whole interval, a `request` with `resend` (so a
 *    lost jobs frame cannot stall it: the controller sends again whatever it has not seen
 *    confirmed).
 * 7. **A frozen worker asks before it starts anything more.** When more than twice the resend
 *    interval (at least the interval plus half a second) passed since the endpoint last ticked,
 *    read or sent a frame, or saw a handler settle — the process was stopped, its machine slept —
 *    the controller may have ended the binding meanwhile and given its jobs to others, and a jobs
 *    frame it sent before that may still be waiting in the socket. So the binding stops being live
 *    and the endpoint registers again on the same link: the answer either keeps the binding (it
 *    goes on) or names a new one (the buffer is dropped). Nothing buffered starts in between. (A
 *    synchronous handler that blocks the event loop is noticed at the next frame sent or read.)
 * 8. **Closing drains**: no new job starts, buffered jobs are handed back at once (`release`, when
 *    the controller supports it), the running handler may finish (up to `drainTimeout`) and is
 *    confirmed, then the link closes. Finished work is never handed back.
 *
 * A job whose binding ended while its handler was running (the controller requeued it) is not
 * confirmed; if it comes back to this worker, the remembered completion confirms it without
 * running the handler again.
 *
 * With a job queue's controller (feature `outcomes`) a try's end is reported instead of retried
 * here: a handler's return value goes back in a `done` frame, a rejection in a `fail` frame and
 * the job leaves this worker at once (the queue decides on a retry, elsewhere, after a backoff).
 * A try with a timeout is aborted at its deadline (`signal.reason` is a `TimeoutError`) and
 * reported failed; a `cancel` aborts the running job or skips a buffered one. In both cases the
 * worker moves on without waiting for a handler that ignores its signal, and never confirms it.
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
import { type Logger, loggerOption } from "../core/logger.ts";
import { SafeEventTarget } from "../core/safe_event_target.ts";
import { decodeControllerFrame, encodeFrame } from "../protocol/codec.ts";
import {
  FEATURES,
  type JobsFrame,
  MAX_ERROR_MESSAGE,
  MAX_ERROR_NAME,
  MAX_WINDOW,
  type RefusalReason,
  type RefusedFrame,
  type RegisteredFrame,
  type UnboundFrame,
  type WireJob,
  type WorkerFrame,
} from "../protocol/schemas.ts";
import { CloseCode, type Link, type LinkReceiver } from "../transport/link.ts";
import { RecentCompletions } from "./recent_completions.ts";

/** How long `close()` lets a running handler finish by default, ms. */
export const DEFAULT_DRAIN_TIMEOUT = 10_000;
/** The longest `drainTimeout`, ms. */
export const MAX_DRAIN_TIMEOUT = 3_600_000;
import { SeqBuffer } from "./seq_buffer.ts";

/** One job handed to the handler. */
export interface Delivery<T = unknown> {
  /** The stable deduplication key: commit it with your side effects for exactly-once effects. */
  readonly messageId: string;
  /** The sequence in this worker's sub-flow (changes when a job is redelivered; never dedupe by it). */
  readonly seq: number;
  /** The job's payload, decoded fresh for this delivery. */
  readonly payload: T;
  /**
   * Which try this is: with a job queue, counted across the pool (1 for the first); otherwise 1
   * for the first run on this worker, then 2, 3... after the handler rejected.
   */
  readonly attempt: number;
  /**
   * Aborted when the job should stop: the endpoint closed and the drain time ran out, or the
   * controller ended the binding (the job was given to another worker). `signal.reason` says why.
   */
  readonly signal: AbortSignal;
  /**
   * Report progress (any JSON value of at most 4,096 characters, else a RangeError): with a job
   * queue it is visible as an event and in the job's status; sent at most every 100 ms (the
   * latest value wins). A no-op without a job queue or once the try ended.
   */
  progress(value: unknown): void;
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
  /**
   * Longest wait between a handler resolving and its confirmation being sent, ms; completions
   * within it share one cumulative `ack`. 0 sends an ack after every job. Default 5 (0..1000).
   */
  readonly ackDelay?: number;
  /** How long `close()` lets the running handler finish before aborting it, ms. Default 10,000. */
  readonly drainTimeout?: number;
  /**
   * With a job queue: the largest handler result sent back, in characters of JSON; a larger one
   * fails the try (`ResultTooLargeError`). Default 16,384 (0..60,000).
   */
  readonly maxResultChars?: number;
  /** This start's incarnation id. Default: a random UUID. */
  readonly incarnation?: string;
  /** The time source. Default: the system clock. */
  readonly clock?: Clock;
  /** Where contained failures are reported. Default: `console.error` (see `createLogger`). */
  readonly logger?: Logger;
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

/**
 * The controller refused a registration. With `retry` false registering again cannot succeed
 * (for example a newer process registered under the same worker name): the endpoint closes.
 *
 * @example
 * ```ts
 * import { RegistrationRefusedError } from "./worker_endpoint.ts";
 * const error = new RegistrationRefusedError("w1", "stale-incarnation", false, "replaced");
 * console.assert(error.name === "RegistrationRefusedError" && !error.retry);
 * ```
 */
export class RegistrationRefusedError extends Error {
  /** Creates the error. */
  constructor(
    /** The endpoint name. */
    readonly endpoint: string,
    /** Why. */
    readonly reason: RefusalReason,
    /** Whether registering again can succeed. */
    readonly retry: boolean,
    /** The controller's explanation. */
    readonly detail: string,
  ) {
    super(`The controller refused worker "${endpoint}" (${reason}): ${detail}`);
    this.name = "RegistrationRefusedError";
  }
}

/**
 * A registration was refused; `error` says why. When `error.retry` is false the endpoint has
 * closed itself.
 *
 * @example
 * ```ts
 * import { RefusedEvent, RegistrationRefusedError } from "./worker_endpoint.ts";
 * const event = new RefusedEvent(new RegistrationRefusedError("w1", "wrong-producer", false, ""));
 * console.assert(event.error.reason === "wrong-producer");
 * ```
 */
export class RefusedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The refusal. */
    readonly error: RegistrationRefusedError,
  ) {
    super("refused");
  }
}

/** A received job, as its jobs frame carried it (`attempt` and `timeout` with feature `outcomes`). */
type Buffered = WireJob;

/** The job taken from the buffer: running, or waiting to run again. */
interface InFlight {
  readonly messageId: string;
  readonly payload: unknown;
  /** Its try number across the pool (feature `outcomes`). */
  readonly attempt: number | undefined;
  /** Its timeout, ms (feature `outcomes`). */
  readonly timeout: number | undefined;
  readonly seq: number;
  /** Made when the handler first reads `delivery.signal` (most never do). */
  abort: AbortController | undefined;
  /** Why the try was stopped, when that happened before its signal was made. */
  stopped: Error | undefined;
  /** Local tries (without outcomes): 1, then 2, 3... after rejections. */
  localAttempt: number;
  /** Whether its latest try runs with outcomes (reported, not retried here). */
  outcomes: boolean;
  /** The deadline timer of a try with a timeout. */
  deadline: TimerHandle | undefined;
  /** Its try ended without the handler (timeout, cancel): whatever the handler does is ignored. */
  abandoned: boolean;
  /** Progress waiting for its turn (rate limit), and when progress was last sent. */
  pendingProgress: { value: unknown; timer: TimerHandle } | undefined;
  lastProgressAt: number | undefined;
}

/** The job's abort signal, made on first use (aborted at once if the try was stopped already). */
function signalOf(job: InFlight): AbortSignal {
  if (!job.abort) {
    job.abort = new AbortController();
    if (job.stopped) job.abort.abort(job.stopped);
  }
  return job.abort.signal;
}

/** Abort the job's signal, or remember why for when it is made. */
function stopTry(job: InFlight, reason: Error): void {
  if (job.abort) job.abort.abort(reason);
  else job.stopped ??= reason;
}

/**
 * What a handler gets. `signal` and `progress` are made on first use (they are accessors, so
 * they also work destructured): a no-op handler costs no abort controller and no closure.
 */
class JobDelivery<T> implements Delivery<T> {
  readonly messageId: string;
  readonly seq: number;
  readonly payload: T;
  readonly attempt: number;
  readonly #job: InFlight;
  readonly #report: (job: InFlight, value: unknown) => void;
  #progress: ((value: unknown) => void) | undefined = undefined;

  constructor(job: InFlight, attempt: number, report: (job: InFlight, value: unknown) => void) {
    this.messageId = job.messageId;
    this.seq = job.seq;
    this.payload = job.payload as T;
    this.attempt = attempt;
    this.#job = job;
    this.#report = report;
  }

  get signal(): AbortSignal {
    return signalOf(this.#job);
  }

  get progress(): (value: unknown) => void {
    const job = this.#job;
    const report = this.#report;
    return this.#progress ??= (value) => report(job, value);
  }
}

/** Whether a handler returned a promise (or another thenable) rather than a plain value. */
function isThenable(value: unknown): boolean {
  return value !== null && (typeof value === "object" || typeof value === "function") &&
    typeof (value as { then?: unknown }).then === "function";
}

/** Sent at most this often per job, ms. */
const PROGRESS_INTERVAL = 100;
/** The largest progress value, characters of JSON. */
const MAX_PROGRESS_CHARS = 4096;

/** How many completed MessageIDs a worker remembers, to confirm a returning job without rerunning it. */
const REMEMBERED_COMPLETIONS = 1024;
/** What this endpoint announces at registration. */
const OFFERED_FEATURES: readonly string[] = FEATURES;

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
  readonly #ackDelay: number;
  readonly #drainTimeout: number;
  readonly #clock: Clock;

  #link: Link | undefined;
  #linkChanged = false;
  /** Registered on the current link: the binding is live and jobs may start. */
  #live = false;
  #session = "";
  #binding = "";
  #nonce = "";
  #features: ReadonlySet<string> = new Set();
  #expectedSeq = 1;
  #confirmedSeq = 0;
  #requestUpTo = 0;
  /** The highest confirmation sent on the current link. */
  #sentConfirmed = -1;
  readonly #buffer: SeqBuffer<Buffered>;
  /** Buffered sequences the controller cancelled: skipped, not run. */
  readonly #skip = new Set<number>();
  readonly #maxResultChars: number;
  /** The controller reports outcomes (feature `outcomes`). */
  #outcomes = false;
  #inFlight: InFlight | undefined;
  #running = false;
  readonly #completed = new RecentCompletions(REMEMBERED_COMPLETIONS);
  #sawTraffic = false;
  #sawJobs = false;
  #sentSinceTick = false;
  #quietTicks = 0;
  /** When the endpoint last sent or read a frame, ticked, or saw a handler settle. */
  #activeAt = Number.NaN;
  #lastGapRequest = Number.NEGATIVE_INFINITY;
  #tick: TimerHandle | undefined;
  #retry: TimerHandle | undefined;
  #ackTimer: TimerHandle | undefined;
  /** When the endpoint last sent a confirming frame (request, ack, done, fail). */
  #confirmSentAt = Number.NEGATIVE_INFINITY;
  #draining = false;
  #closing: Promise<void> | undefined;
  #settled: (() => void) | undefined;
  readonly #abort = new AbortController();
  #processed = 0;
  readonly #logger: Logger;
  /** Jobs whose handler returned a plain value, and the value, until their microtask runs. */
  readonly #returned: unknown[] = [];
  readonly #onReturned = () => {
    const job = this.#returned.shift() as InFlight;
    const value = this.#returned.shift();
    this.#onResolved(job, value);
  };
  readonly #reportProgress = (job: InFlight, value: unknown) => this.#progress(job, value);

  /** Validates `options`, throwing an error that names a bad option. */
  constructor(options: WorkerEndpointOptions<T>) {
    super();
    const owner = "WorkerEndpoint";
    optionsObject(owner, options);
    this.producer = identifierOption(owner, "producer", options.producer);
    this.name = identifierOption(owner, "name", options.name);
    this.#handler = functionOption(owner, "handler", options.handler, true);
    this.window = integerOption(owner, "window", options.window, 50, 1, MAX_WINDOW);
    this.#buffer = new SeqBuffer(this.window);
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
    this.#ackDelay = durationOption(owner, "ackDelay", options.ackDelay, 5, 0, 1000);
    this.#maxResultChars = integerOption(
      owner,
      "maxResultChars",
      options.maxResultChars,
      16_384,
      0,
      60_000,
    );
    this.#drainTimeout = durationOption(
      owner,
      "drainTimeout",
      options.drainTimeout,
      DEFAULT_DRAIN_TIMEOUT,
      0,
      MAX_DRAIN_TIMEOUT,
    );
    this.incarnation = options.incarnation === undefined
      ? crypto.randomUUID()
      : identifierOption(owner, "incarnation", options.incarnation);
    this.#clock = options.clock ?? systemClock;
    this.#logger = loggerOption(owner, options.logger);
    this.reportTo(this.#logger);
  }

  /** Jobs this endpoint's handler completed. */
  get processed(): number {
    return this.#processed;
  }

  /** True while the endpoint is registered on its current link (jobs may start). */
  get live(): boolean {
    return this.#live;
  }

  /** True once {@linkcode WorkerEndpoint.close} was called (or a final refusal closed it). */
  get closed(): boolean {
    return this.#closing !== undefined;
  }

  /** Attach a link to the controller; the endpoint registers at once. */
  attach(link: Link): LinkReceiver {
    if (this.closed) {
      link.close(CloseCode.normal, "worker closed");
      return { receive() {}, closed() {} };
    }
    this.#link = link;
    this.#linkChanged = true;
    this.#live = false;
    this.#sentConfirmed = -1;
    this.#quietTicks = 0;
    this.#activeAt = this.#clock.now();
    this.#register();
    this.#scheduleTick();
    return {
      receive: (frame) => {
        if (this.#link === link) this.#guard(() => this.#onFrame(frame));
      },
      closed: () => {
        if (this.#link === link) this.#dropLink();
      },
    };
  }

  /**
   * Stop gracefully: start no new job, hand back the buffered ones at once (the controller
   * requeues them), let the running handler finish (up to `drainTimeout`, then its `signal`
   * aborts) and confirm it, then close the link. Resolves once the handler settled.
   */
  close(): Promise<void> {
    if (this.#closing) return this.#closing;
    this.#draining = true;
    this.#retry?.cancel();
    this.#retry = undefined;
    const running = this.#inFlight;
    if (this.#live && this.#features.has("release")) {
      const upTo = running ? running.seq : this.#confirmedSeq;
      this.#requestUpTo = upTo;
      this.#send({
        type: "release",
        session: this.#session,
        nonce: this.#nonce,
        confirmed: this.#confirmedSeq,
        upTo,
      });
    }
    this.#buffer.clear();
    if (!this.#running) {
      // A job that failed and waits for its retry is not started again: it goes back too.
      this.#inFlight = undefined;
      this.#finishClose("worker closed");
      return this.#closing = Promise.resolve();
    }
    this.#closing = new Promise<void>((resolve) => {
      const timer = this.#clock.setTimeout(() => {
        this.#settled = undefined;
        if (this.#inFlight) {
          stopTry(this.#inFlight, new Error(`drain time of ${this.#drainTimeout} ms ran out`));
        }
        this.#inFlight = undefined; // not confirmed: the controller requeues it
        this.#finishClose("worker closed; drain time ran out");
        resolve();
      }, this.#drainTimeout);
      this.#settled = () => {
        timer.cancel();
        this.#finishClose("worker closed");
        resolve();
      };
    });
    return this.#closing;
  }

  /** Same as {@linkcode WorkerEndpoint.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  // ------------------------------------------------------------------------------------------

  #finishClose(reason: string): void {
    this.#tick?.cancel();
    this.#tick = undefined;
    this.#ackTimer?.cancel();
    this.#ackTimer = undefined;
    this.#abort.abort(new Error("the worker endpoint closed"));
    const link = this.#link;
    this.#dropLink();
    link?.close(CloseCode.normal, reason);
  }

  #dropLink(): void {
    this.#link = undefined;
    this.#live = false;
    this.#ackTimer?.cancel();
    this.#ackTimer = undefined;
    // Ticks serve a link; the next `attach` starts them again. Without this an endpoint whose
    // controller closed (in process, nobody reconnects) kept a timer and its process alive.
    this.#tick?.cancel();
    this.#tick = undefined;
  }

  #guard(body: () => void): void {
    try {
      body();
    } catch (error) {
      this.#logger.error("a worker endpoint handler failed", error);
    }
  }

  #send(frame: WorkerFrame): void {
    if (!this.#link) return;
    this.#noticeFreeze();
    this.#sentSinceTick = true;
    if (frame.type !== "register" && frame.type !== "progress") {
      this.#sentConfirmed = "confirmed" in frame ? frame.confirmed : frame.seq;
      // A pending ack timer stays: when it fires it waits out the rest of the delay after this
      // frame (one timer per ackDelay, not a timer made and cancelled per top-up request).
      this.#confirmSentAt = this.#activeAt; // now: #noticeFreeze just set it
    }
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
      features: OFFERED_FEATURES,
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

  /**
   * Confirm within `ackDelay`, sharing one ack with whatever else completes meanwhile, and never
   * within `ackDelay` after another confirming frame (see `#handled`).
   */
  #scheduleAck(): void {
    if (this.#ackDelay === 0 || this.#draining) return this.#ack();
    this.#ackTimer ??= this.#clock.setTimeout(this.#onAckTimer, this.#ackDelay);
  }

  readonly #onAckTimer = () => {
    this.#ackTimer = undefined;
    if (!this.#live || this.#confirmedSeq <= this.#sentConfirmed) return;
    // A frame sent since the timer was set confirmed what had completed by then; the jobs
    // completed after it are within the delay until it has passed since that frame.
    const since = this.#clock.now() - this.#confirmSentAt;
    if (since < this.#ackDelay) {
      this.#ackTimer = this.#clock.setTimeout(this.#onAckTimer, this.#ackDelay - since);
      return;
    }
    this.#guard(() => this.#ack());
  };

  /**
   * Ticks run as long as a link does, a drain included: a draining worker's heartbeats keep its
   * binding (and the job it is finishing) from being ended as silent, however long the drain.
   */
  #scheduleTick(): void {
    if (this.#tick || !this.#link) return;
    this.#tick = this.#clock.setTimeout(() => {
      this.#tick = undefined;
      this.#guard(() => this.#onTick());
      this.#scheduleTick();
    }, this.#resendInterval);
  }

  #onTick(): void {
    if (!this.#link) return;
    const reregistered = this.#noticeFreeze();
    if (this.#sawTraffic) this.#quietTicks = 0;
    else this.#quietTicks += 1;
    if (this.#silenceIntervals !== undefined && this.#quietTicks >= this.#silenceIntervals) {
      const link = this.#link;
      this.#dropLink();
      link.close(CloseCode.silent, "no controller traffic within the silence bound");
      return;
    }
    if (reregistered) {
      // Frozen: registered again already.
    } else if (!this.#session || !this.#sawTraffic) this.#register();
    else if (this.#gapOpen()) this.#request(true);
    else if (!this.#sentSinceTick) {
      // The heartbeat. When idle with open demand and no job for an interval, it asks for a
      // resend: if the controller's last jobs frame was lost, only that brings it back.
      if (this.#stalled()) this.#request(true);
      else this.#ack();
    }
    this.#sawTraffic = false;
    this.#sawJobs = false;
    this.#sentSinceTick = false;
  }

  /**
   * Rule 7: the endpoint's first act after a freeze — a tick, a frame read, a frame sent, an
   * asynchronous handler settling — finds the gap since its previous one and stops the binding
   * from being live until a new registration is answered. An idle endpoint still ticks every
   * resend interval, so a gap over twice that means the event loop did not run. (Not checked
   * per job: a synchronous handler that blocks the loop is noticed at the next frame sent or read,
   * which keeps a clock reading off the per-job path.)
   */
  #noticeFreeze(): boolean {
    const now = this.#clock.now();
    const gap = now - this.#activeAt;
    this.#activeAt = now;
    const bound = Math.max(2 * this.#resendInterval, this.#resendInterval + 500);
    if (!(gap > bound) || !this.#live || !this.#link) return false;
    this.#live = false;
    this.#register();
    return true;
  }

  /** Open demand, nothing buffered or running, and no job for a whole interval. */
  #stalled(): boolean {
    return this.#live && !this.#draining && !this.#sawJobs && !this.#inFlight &&
      this.#buffer.size === 0 && this.#requestUpTo > this.#confirmedSeq;
  }

  #onFrame(data: unknown): void {
    this.#noticeFreeze();
    const decoded = decodeControllerFrame(data);
    if (!decoded.ok) {
      // The controller is not speaking our protocol: drop the link; a reconnecting transport
      // will try again.
      const link = this.#link;
      this.#dropLink();
      link?.close(CloseCode.invalidFrame, decoded.reason);
      return;
    }
    const frame = decoded.frame;
    switch (frame.type) {
      case "registered":
        return this.#onRegistered(frame);
      case "jobs":
        return this.#onJobs(frame);
      case "refused":
        return this.#onRefused(frame);
      case "unbound":
        return this.#onUnbound(frame);
      case "cancel":
        return this.#onCancel(frame.session, frame.seq);
      case "reset":
        if (frame.session !== this.#session) this.#register(); // the controller restarted
        return;
      case "heard":
        return; // only there to acknowledge what this worker sent (feature `heard`)
    }
  }

  #onRegistered(frame: RegisteredFrame): void {
    if (frame.nonce !== this.#nonce) return;
    this.#sawTraffic = true;
    this.#features = new Set(frame.features ?? []);
    this.#outcomes = this.#features.has("outcomes");
    if (frame.session !== this.#session || frame.binding !== this.#binding) {
      // A fresh sub-flow. A job still running belongs to the old one: it will not be confirmed.
      this.#session = frame.session;
      this.#binding = frame.binding;
      this.#expectedSeq = frame.nextSeq;
      this.#confirmedSeq = frame.nextSeq - 1;
      this.#forgetSubFlow(new Error("the binding ended; the job went to another worker"));
      this.#completed.adopt(); // jobs completed under earlier bindings may come back in this one
      this.dispatchEvent(new BoundEvent(frame.session, frame.binding));
    }
    this.#live = true;
    if (this.#draining) {
      // Re-registered while draining (the link came back): hand everything back again.
      this.#requestUpTo = this.#inFlight?.seq ?? this.#confirmedSeq;
      if (this.#features.has("release")) {
        this.#send({
          type: "release",
          session: this.#session,
          nonce: this.#nonce,
          confirmed: this.#confirmedSeq,
          upTo: this.#requestUpTo,
        });
      }
      return;
    }
    // After a new link, ask for everything unconfirmed again: frames may have been lost with
    // the old link. On the same link this re-asserts demand, and asks for a resend when nothing is
    // buffered: a quiet controller (why the worker re-registered) may have sent jobs that never
    // arrived, and resending costs nothing when there are none.
    this.#request(this.#linkChanged || this.#buffer.size === 0);
    this.#linkChanged = false;
    this.#drain();
  }

  /** Drop the buffer and the job in flight of a sub-flow that ended. */
  #forgetSubFlow(reason: Error): void {
    this.#buffer.clear();
    this.#skip.clear();
    if (this.#inFlight) this.#endTry(this.#inFlight, reason);
    this.#inFlight = undefined;
    this.#retry?.cancel();
    this.#retry = undefined;
  }

  #onRefused(frame: RefusedFrame): void {
    if (frame.nonce !== this.#nonce) return;
    this.#sawTraffic = true;
    const error = new RegistrationRefusedError(this.name, frame.reason, frame.retry, frame.detail);
    this.dispatchEvent(new RefusedEvent(error));
    if (frame.retry) return; // the next tick registers again
    // Registering again cannot succeed: stop for good.
    this.#draining = true;
    this.#closing = Promise.resolve();
    this.#forgetSubFlow(error);
    this.#finishClose(`refused: ${frame.reason}`);
  }

  #onUnbound(frame: UnboundFrame): void {
    if (frame.session !== this.#session || frame.binding !== this.#binding) return;
    this.#sawTraffic = true;
    // The controller gave this sub-flow's jobs to other workers: stop, and bind afresh.
    this.#live = false;
    this.#binding = "";
    this.#forgetSubFlow(new Error(`the binding ended (${frame.reason})`));
    this.#register();
  }

  #onJobs(frame: JobsFrame): void {
    if (frame.session !== this.#session) return;
    this.#sawTraffic = true;
    let duplicate = false;
    const jobs = frame.jobs;
    for (let i = 0; i < jobs.length; i++) {
      const seq = frame.seq + i;
      if (seq > this.#requestUpTo) break; // beyond the demand granted
      if (seq < this.#expectedSeq) {
        duplicate = true;
        continue;
      }
      if (seq === this.#inFlight?.seq || this.#buffer.has(seq)) continue;
      // Full, or a lower sequence holds its slot: keep the lower ones.
      if (this.#buffer.size >= this.window || !this.#buffer.set(seq, jobs[i])) break;
      this.#sawJobs = true;
    }
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

  /** Hand the next job to the handler if nothing is running and the binding is live. */
  #drain(): void {
    if (this.#running || this.#inFlight || !this.#live || this.#draining) return;
    const next = this.#buffer.get(this.#expectedSeq);
    if (!next) return;
    this.#buffer.delete(this.#expectedSeq);
    const job: InFlight = {
      messageId: next.id,
      payload: next.payload,
      attempt: next.attempt,
      timeout: next.timeout,
      seq: this.#expectedSeq,
      abort: undefined,
      stopped: undefined,
      localAttempt: 1,
      outcomes: false,
      deadline: undefined,
      abandoned: false,
      pendingProgress: undefined,
      lastProgressAt: undefined,
    };
    this.#inFlight = job;
    // The job may have crashed a worker before: confirm what finished first, so that if it
    // crashes this one too, the controller knows which job was running.
    if (next.confirmFirst && this.#confirmedSeq > this.#sentConfirmed) this.#ack();
    if (this.#skip.delete(job.seq)) {
      // Cancelled before it started: report it so, without running it.
      return this.#reportFailure(job, { name: "CancelledError", message: "the job was cancelled" });
    }
    this.#run(job);
  }

  #run(job: InFlight): void {
    if (this.#completed.has(job.messageId)) {
      // Completed here already (its earlier binding ended before the confirmation landed).
      queueMicrotask(() => this.#guard(() => this.#handled(job)));
      return;
    }
    this.#running = true;
    const outcomes = this.#outcomes;
    job.outcomes = outcomes;
    const attempt = outcomes ? job.attempt ?? 1 : job.localAttempt;
    const delivery = new JobDelivery<T>(job, attempt, this.#reportProgress);
    if (outcomes && job.timeout) {
      job.deadline = this.#clock.setTimeout(() => {
        const error = new Error(`the try took longer than its timeout of ${job.timeout} ms`);
        error.name = "TimeoutError";
        this.#guard(() => this.#abandon(job, error));
      }, job.timeout);
    }
    let result: unknown;
    let thenable: boolean;
    try {
      result = this.#handler(delivery);
      thenable = isThenable(result);
    } catch (error) {
      Promise.reject(error).then(undefined, (error) => this.#onRejected(job, attempt, error));
      return;
    }
    if (thenable) {
      // It settles in a later turn, perhaps after a freeze: noticed before anything else.
      new Promise((resolve) => resolve(result)).then(
        (value) => {
          this.#noticeFreeze();
          this.#onResolved(job, value);
        },
        (error) => {
          this.#noticeFreeze();
          this.#onRejected(job, attempt, error);
        },
      );
      return;
    }
    // A plain value: handled in a microtask, like a resolved promise's, without making one.
    this.#returned.push(job, result);
    queueMicrotask(this.#onReturned);
  }

  /** The handler of `job` resolved with `value`. */
  #onResolved(job: InFlight, value: unknown): void {
    if (job.abandoned) return this.#afterRun(); // its try ended already; never confirmed
    this.#running = false;
    this.#processed += 1;
    // Found at once when it may come back under the current binding: a job of an ended binding
    // (requeued while it ran), or with outcomes (a try the controller failed is retried).
    this.#completed.add(job.messageId, job.outcomes || this.#inFlight !== job);
    try {
      if (job.outcomes) this.#succeeded(job, value);
      else this.#handled(job);
    } catch (error) {
      this.#logger.error("a worker endpoint handler failed", error);
    }
    this.#afterRun();
  }

  /** The handler of `job` (try `attempt`) threw or rejected with `error`. */
  #onRejected(job: InFlight, attempt: number, error: unknown): void {
    if (job.abandoned) return this.#afterRun();
    this.#running = false;
    this.dispatchEvent(new HandlerErrorEvent(job.messageId, attempt, error));
    this.#guard(() => job.outcomes ? this.#reportFailure(job, errorOf(error)) : this.#failed(job));
    this.#afterRun();
  }

  /** Stop a try that ended without its handler: abort it, report it failed, move on. */
  #abandon(job: InFlight, reason: Error): void {
    if (this.#inFlight !== job) return;
    job.abandoned = true;
    this.#running = false; // the handler may ignore its signal: the next job does not wait for it
    this.#reportFailure(job, errorOf(reason), reason);
    this.#afterRun();
  }

  /** The try is over for this worker: stop its timers and abort its signal if asked to. */
  #endTry(job: InFlight, abort?: Error): void {
    job.deadline?.cancel();
    job.pendingProgress?.timer.cancel();
    job.pendingProgress = undefined;
    if (abort) stopTry(job, abort);
  }

  /** With outcomes: the handler resolved with `value`. */
  #succeeded(job: InFlight, value: unknown): void {
    if (value === undefined) return this.#handled(job);
    if (this.#inFlight !== job) return this.#drain();
    let text: string | undefined;
    try {
      text = JSON.stringify(value);
    } catch {
      text = undefined;
    }
    if (text === undefined || text.length > this.#maxResultChars) {
      const message = text === undefined
        ? "the handler's result is not JSON"
        : `the handler's result is ${text.length} characters of JSON; the maximum is ${this.#maxResultChars}`;
      return this.#reportFailure(job, { name: "ResultTooLargeError", message });
    }
    this.#endTry(job);
    this.#moveOn(job, {
      type: "done",
      session: this.#session,
      nonce: this.#nonce,
      seq: job.seq,
      result: value,
    });
  }

  /** With outcomes: the try failed; report it and take the next job. */
  #reportFailure(job: InFlight, error: { name: string; message: string }, abort?: Error): void {
    if (this.#inFlight !== job) return this.#drain();
    this.#endTry(job, abort);
    this.#moveOn(job, {
      type: "fail",
      session: this.#session,
      nonce: this.#nonce,
      seq: job.seq,
      error: {
        name: error.name.slice(0, MAX_ERROR_NAME),
        message: error.message.slice(0, MAX_ERROR_MESSAGE),
      },
    });
  }

  /** The try of `job` ended with `frame` (done or fail): it confirms through `job.seq`. */
  #moveOn(job: InFlight, frame: WorkerFrame): void {
    this.#inFlight = undefined;
    this.#confirmedSeq = job.seq;
    this.#expectedSeq = job.seq + 1;
    if (!this.#live) return; // the controller ends it on its own (timeout) or requeues it
    this.#send(frame);
    if (this.#draining) return;
    if (this.#requestUpTo - this.#confirmedSeq <= Math.floor(this.window / 2)) this.#request(false);
    this.#drain();
    if (this.#gapOpen()) this.#request(true);
  }

  /** Feature `outcomes`: the controller cancelled the job at `seq`. */
  #onCancel(session: string, seq: number): void {
    if (session !== this.#session) return;
    const cancelled = new Error("the job was cancelled");
    cancelled.name = "CancelledError";
    if (this.#inFlight?.seq === seq) return this.#abandon(this.#inFlight, cancelled);
    if (seq >= this.#expectedSeq && seq <= this.#requestUpTo) this.#skip.add(seq);
  }

  /** `delivery.progress(value)`: rate-limited, latest value wins. */
  #progress(job: InFlight, value: unknown): void {
    if (!this.#outcomes || this.#inFlight !== job) return;
    const text = JSON.stringify(value);
    if (text === undefined) throw new TypeError("Cannot report progress: the value is not JSON");
    if (text.length > MAX_PROGRESS_CHARS) {
      throw new RangeError(
        `Cannot report progress: ${text.length} characters of JSON; the maximum is ${MAX_PROGRESS_CHARS}`,
      );
    }
    const now = this.#clock.now();
    const wait = (job.lastProgressAt ?? -Infinity) + PROGRESS_INTERVAL - now;
    if (wait <= 0) return this.#sendProgress(job, value);
    if (job.pendingProgress) return void (job.pendingProgress.value = value);
    job.pendingProgress = {
      value,
      timer: this.#clock.setTimeout(() => {
        const pending = job.pendingProgress;
        job.pendingProgress = undefined;
        if (pending && this.#inFlight === job) {
          this.#guard(() => this.#sendProgress(job, pending.value));
        }
      }, wait),
    };
  }

  #sendProgress(job: InFlight, value: unknown): void {
    job.lastProgressAt = this.#clock.now();
    if (!this.#live) return;
    this.#send({
      type: "progress",
      session: this.#session,
      nonce: this.#nonce,
      seq: job.seq,
      value,
    });
  }

  /** A handler settled: a drain waiting for it can finish now. */
  #afterRun(): void {
    const settled = this.#settled;
    if (!settled) return;
    this.#settled = undefined;
    settled();
  }

  /** The handler resolved: confirm if the job still belongs to the current sub-flow. */
  #handled(job: InFlight): void {
    if (this.#inFlight !== job) return this.#drain(); // its binding ended meanwhile
    this.#endTry(job);
    this.#inFlight = undefined;
    this.#confirmedSeq = job.seq;
    this.#expectedSeq = job.seq + 1;
    if (!this.#live) return; // confirmed on the next registration, if the binding survives
    if (this.#draining) return this.#ack();
    if (this.#requestUpTo - this.#confirmedSeq <= Math.floor(this.window / 2)) this.#request(false);
    // Else an ack within ackDelay, shared with the jobs finishing meanwhile; usually the next
    // top-up request carries it first. Not at once even when idle: a small frame right behind the
    // request just sent can wait for that request's TCP ACK (Nagle's algorithm, which Deno's
    // WebSocket client leaves on) while the controller, short of demand, sends nothing that would
    // carry the ACK: up to 40 ms of delayed ACK in which no job reaches this worker.
    else this.#scheduleAck();
    this.#drain();
    if (this.#gapOpen()) this.#request(true);
  }

  /** The handler rejected: run the same job again after the resend interval. */
  #failed(job: InFlight): void {
    if (this.#inFlight !== job) return this.#drain();
    if (this.#draining) {
      this.#inFlight = undefined; // not confirmed: the controller requeues it
      return;
    }
    this.#retry = this.#clock.setTimeout(() => {
      this.#retry = undefined;
      if (this.#inFlight !== job || this.closed) return this.#guard(() => this.#drain());
      if (!this.#live) return this.#failed(job); // wait for the binding to come back
      job.localAttempt += 1;
      this.#guard(() => this.#run(job));
    }, this.#resendInterval);
  }
}

/** An error's name and message, whatever was thrown. */
function errorOf(thrown: unknown): { name: string; message: string } {
  if (thrown instanceof Error) return { name: thrown.name, message: thrown.message };
  return { name: "Error", message: String(thrown) };
}

/** The worker endpoint's events by name. */
export interface WorkerEndpointEventMap {
  /** The handler rejected; the job runs again after the resend interval. */
  "handler-error": HandlerErrorEvent;
  /** A fresh binding was adopted. */
  "bound": BoundEvent;
  /** A registration was refused. */
  "refused": RefusedEvent;
}
