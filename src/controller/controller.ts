/**
 * The work-pulling controller: the producer's side of work pulling.
 *
 * The story, in the order things happen:
 *
 * 1. **Workers bind.** A worker endpoint attaches a link and registers (producer name, worker
 *    name, incarnation, nonce). The controller checks the name and the link's authenticated
 *    identity, fences stale incarnations, and creates a binding: a sub-flow with its own
 *    sequence space starting at 1, acknowledged with the binding id and session.
 * 2. **Workers pull.** A worker's `request` grants demand up to a sequence and confirms
 *    cumulatively; `ack` only confirms. Out-of-range numbers end that binding only.
 * 3. **The producer is asked for work only when workers can take it.** When the handshake is
 *    idle and the free worker demand (plus the `lookahead`, while a worker is connected)
 *    exceeds the pending pool, the producer gets a `RequestNext` for up to that many jobs:
 *    Produced → Store → Stored → StoredAck → Accept → the pool.
 * 4. **Dispatch** hands the pool's head, one job at a time, to bindings with free demand in
 *    strict round-robin; each job gets the next sequence of its binding.
 * 5. **Confirmation** cuts a binding's unconfirmed prefix; each job may be reported to the
 *    producer (`DeliveryConfirmed`) and, with a durable queue, confirmed there.
 * 6. **A binding ends** (worker gone, silent, replaced, misbehaving): its unconfirmed jobs go
 *    back to the head of the pool, in order, and are dispatched again under fresh sequences with
 *    their original MessageID and payload.
 * 7. **Failures.** A producer contract violation or a fenced/conflicting queue is terminal: one
 *    `delivery-failed` event, and the controller stays stopped until `respawn()`. A queue that
 *    keeps failing otherwise makes the controller restart: new session, reload, re-dispatch.
 *
 * Every input (frames, producer messages, timer ticks, queue results) goes through one serial
 * mailbox, so handlers never interleave and the behaviour is deterministic under a simulated
 * clock. When it drains, the jobs of the turn go out, and a worker with feature `heard` whose
 * frames nothing answered gets a `heard` frame (`heard_replies.ts`: a TCP acknowledgment its
 * client may be waiting for).
 *
 * @module
 */

import type { TimerHandle } from "../core/clock.ts";
import { Deque } from "../core/deque.ts";
import { JobPool } from "./job_pool.ts";
import { IdTable } from "../core/id_table.ts";
import { RecentMap } from "../core/recent_map.ts";
import { jsonTextOf } from "../protocol/json_text.ts";
import { SafeEventTarget } from "../core/safe_event_target.ts";
import {
  type DecodeFailure,
  decodeWorkerFrame,
  encodeFrame,
  encodeJobsFrame,
} from "../protocol/codec.ts";
import {
  type AckFrame,
  type DoneFrame,
  type FailFrame,
  FEATURES,
  MAX_SEQ,
  MAX_WINDOW,
  type ProgressFrame,
  type RefusalReason,
  type RegisterFrame,
  type ReleaseFrame,
  type RequestFrame,
  UNBOUND_REASONS,
  type WorkerFrame,
} from "../protocol/schemas.ts";
import type { WorkQueueState } from "../queue/work_queue.ts";
import { CloseCode, type Link, type LinkReceiver } from "../transport/link.ts";
import { Binding, type Job, newJob } from "./binding.ts";
import { DurableLane, type LaneUnit, runWithRetry, type UnitOutcome } from "./durable_lane.ts";
import {
  type ControllerEventMap,
  ControllerRestartedEvent,
  type FailureStage,
  FrameRejectedEvent,
  ProgressEvent,
  ReliableDeliveryFailedEvent,
  RequeuedEvent,
  type UnbindReason,
  WorkerBoundEvent,
  WorkerUnboundEvent,
} from "./events.ts";
import { Incarnations } from "./incarnations.ts";
import {
  resolveControllerOptions,
  type ResolvedControllerOptions,
  type WorkPullingControllerOptions,
} from "./options.ts";
import type { ProducerPort } from "./producer_contract.ts";
import { ProducerHandshake } from "./producer_handshake.ts";
import { HEARD_FRAME, HeardReplies } from "./heard_replies.ts";
import { RoundRobin } from "./round_robin.ts";
import type { JobOutcome } from "../lifecycle/job_record.ts";

/** The controller's lifecycle. */
export type ControllerState = "idle" | "loading" | "running" | "failed" | "closed";

/** Who the edge authenticated a link as (for example from a signed token). */
export interface LinkIdentity {
  /**
   * The worker this link may register as: exactly this endpoint name, or one of its numbered
   * endpoints `worker#1`, `worker#2`... (a worker process hosting several endpoints). Absent:
   * any name.
   */
  readonly worker?: string;
}

/** Whether a link authenticated as `identity` may register the endpoint `name`. */
export function identityAllows(identity: LinkIdentity, name: string): boolean {
  const worker = identity.worker;
  return worker === undefined || name === worker || name.startsWith(`${worker}#`);
}

/** Per-worker figures in {@linkcode ControllerStats}. */
export interface WorkerStats {
  /** The worker endpoint name. */
  readonly worker: string;
  /** Its incarnation. */
  readonly incarnation: string;
  /** The binding id. */
  readonly binding: string;
  /** Whether a link is attached (false during a reconnect grace). */
  readonly connected: boolean;
  /** Demand the worker granted beyond its confirmation (`demandUpTo - confirmed`). */
  readonly window: number;
  /** Jobs dispatched and not yet confirmed. */
  readonly inFlight: number;
  /** Jobs this binding confirmed. */
  readonly confirmed: number;
  /**
   * What the worker runs on, as its transport reports it (over WebSockets, from the upgrade's
   * `User-Agent`: `Deno 2.9.6`, `Bun 1.4.5`, `Chrome 131`...); absent when unknown.
   */
  readonly runtime?: string;
  /** Milliseconds since the controller last heard from the worker; absent while disconnected. */
  readonly quietFor?: number;
}

/**
 * Told how long confirmed jobs took at their worker (see
 * {@linkcode WorkPullingController.watchConfirmations}): `jobs` jobs of `worker` were confirmed
 * together, `busyMs` after the worker last confirmed or, if it had been idle, after the oldest of
 * them was handed to it. A worker endpoint runs one job at a time, so `busyMs / jobs` is what
 * each took as the controller sees it (the handler plus the frames' travel).
 */
export type ConfirmationWatcher = (worker: string, jobs: number, busyMs: number) => void;

/** A snapshot of the controller. */
export interface ControllerStats {
  /** The producer (flow) name. */
  readonly name: string;
  /** The lifecycle state. */
  readonly state: ControllerState;
  /** The current session. */
  readonly session: string;
  /** Jobs accepted and waiting for a worker. */
  readonly pending: number;
  /** Every binding, in round-robin order. */
  readonly workers: readonly WorkerStats[];
  /** Counters since this controller was created. */
  readonly totals: {
    /** Jobs stored for the first time by this controller instance. */
    readonly stored: number;
    /** Jobs accepted into the pool. */
    readonly accepted: number;
    /** Deliveries to workers, redeliveries included. */
    readonly dispatched: number;
    /** Confirmations, repeats after a requeue included. */
    readonly confirmed: number;
    /** Jobs returned to the pool from ended bindings. */
    readonly requeued: number;
    /** Tries that ended as failures (outcomes only: reported, timed out, or workers lost). */
    readonly failed: number;
  };
}

/** The controller's view of one attached link. */
interface Connection {
  readonly link: Link;
  readonly identity: LinkIdentity;
  binding: Binding | undefined;
  lastHeard: number;
  closed: boolean;
  /** The protocol features agreed at the latest registration (see `FEATURES`). */
  features: ReadonlySet<string>;
}

const CANCELLED: JobOutcome = Object.freeze({ kind: "cancelled" });
/** A progress value larger than this (characters of JSON) is dropped. */
const MAX_PROGRESS_CHARS = 4096;
/** Why a binding ended that means its worker was lost while running its oldest job. */
const LOST_REASONS: ReadonlySet<UnbindReason> = new Set([
  "disconnected",
  "silent",
  "backpressure",
  "job-age",
  "replaced",
]);
const NO_FEATURES: ReadonlySet<string> = new Set();
const KNOWN_FEATURES: ReadonlySet<string> = new Set(FEATURES);
const NOTICE_REASONS: ReadonlySet<string> = new Set(UNBOUND_REASONS);
/** Refusals after which registering again cannot succeed. */
const FINAL_REFUSALS: ReadonlySet<RefusalReason> = new Set([
  "stale-incarnation",
  "wrong-producer",
  "identity-mismatch",
  "already-bound",
]);
/** Jobs frames stay below this many characters unless a single job is larger. */
const JOBS_FRAME_CHARS = 256 * 1024;
/** Heartbeat cadence assumed for a link that has not registered yet, ms. */
const UNREGISTERED_INTERVAL = 2000;

/**
 * The work-pulling controller. See the module documentation for how it works.
 *
 * @example In-process: a producer, a controller and two workers
 * ```ts
 * import { BufferedProducer, connectInProcess, WorkerEndpoint, WorkPullingController } from "../../mod.ts";
 *
 * const producer = new BufferedProducer<{ n: number }>();
 * const controller = new WorkPullingController({ name: "jobs", producer, deliveryConfirmation: true });
 * await controller.start();
 * const done: number[] = [];
 * for (const name of ["w1", "w2"]) {
 *   const worker = new WorkerEndpoint<{ n: number }>({
 *     producer: "jobs",
 *     name,
 *     handler: (job) => void done.push(job.payload.n),
 *   });
 *   connectInProcess(controller, worker);
 * }
 * const receipts = await Promise.all([1, 2, 3].map((n) => producer.submit({ n })));
 * await Promise.all(receipts.map((receipt) => receipt.confirmed));
 * console.assert(done.length === 3);
 * await controller.close();
 * ```
 */
export class WorkPullingController extends SafeEventTarget<ControllerEventMap> {
  readonly #options: ResolvedControllerOptions;
  #state: ControllerState = "idle";
  #session = "";
  /** Bumped at every new incarnation or stop; asynchronous results from older ones are dropped. */
  #generation = 0;
  #failurePublished = false;
  #stop = new AbortController();
  #tick: TimerHandle | undefined;

  // The pool and the bindings.
  readonly #pending = new JobPool();
  /** Every job in the pool or unconfirmed at a binding, by MessageID. */
  readonly #owned = new IdTable<Job>();
  readonly #bindings = new Map<string, Binding>();
  readonly #rotation = new RoundRobin<Binding>();
  readonly #connections = new Set<Connection>();
  readonly #linkOf = new Map<Binding, Connection>();
  readonly #graceTimers = new Map<Binding, TimerHandle>();
  readonly #incarnations: Incarnations;
  /** Recently confirmed MessageIDs and their store sequences (the dedupe window), oldest first. */
  readonly #completed: RecentMap<string, number>;
  #bindingCounter = 0;

  // The producer handshake and the durable lane.
  readonly #handshake: ProducerHandshake;
  readonly #lane: DurableLane | undefined;
  #laneDue = false;

  // The mailbox.
  readonly #mailbox = new Deque<() => void>();
  /** Feature `heard`: the links that sent frames nothing has answered yet. */
  readonly #heard: HeardReplies<Connection>;
  #draining = false;
  readonly #dirty = new Set<Binding>();

  #totals = { stored: 0, accepted: 0, dispatched: 0, confirmed: 0, requeued: 0, failed: 0 };
  #confirmationWatchers: readonly ConfirmationWatcher[] = [];
  /** MessageIDs cancelled before the controller held them: ended at once if they arrive. */
  readonly #cancelRequests = new RecentMap<string, true>(10_000);
  /** Set by `drain()`: nothing more is dispatched or asked for. */
  #stopping: Promise<void> | undefined;
  /** Called once a drain's work is done. */
  #drained: (() => void) | undefined;

  /** Validates `options` (throwing an error that names a bad option) and attaches the producer. */
  constructor(options: WorkPullingControllerOptions) {
    super();
    this.#options = resolveControllerOptions(options);
    this.reportTo(this.#options.logger);
    this.#completed = new RecentMap(this.#options.dedupeWindow);
    // A link that closes is forgotten (`#onLinkClosed`): only open links are owed a reply.
    this.#heard = new HeardReplies(
      this.#options.clock,
      (run) => this.#post(run),
      (connection) => connection.link.send(HEARD_FRAME),
    );
    this.#incarnations = new Incarnations({
      maxRemembered: this.#options.maxIncarnationHistory,
      isBound: (worker) => this.#bindings.has(worker),
    });
    const { queue, queueRetryAttempts, queueRetryBackoff, queueTimeout, clock } = this.#options;
    if (queue) {
      this.#lane = new DurableLane(
        queue,
        { attempts: queueRetryAttempts, backoff: queueRetryBackoff, timeout: queueTimeout },
        clock,
      );
    }
    // The handshake reaches the controller's tables only through this host.
    this.#handshake = new ProducerHandshake(
      {
        producer: this.#options.producer,
        logger: this.#options.logger,
        maxPayloadBytes: this.#options.maxPayloadBytes,
      },
      {
        session: () => this.#session,
        running: () => this.#state === "running",
        lane: this.#lane,
        held: (messageId, hash) => this.#owned.get(messageId, hash),
        completedSeq: (messageId, hash) => this.#completed.get(messageId, hash),
        countStored: (count) => void (this.#totals.stored += count),
        accept: (jobs) => this.#accept(jobs),
        progress: () => this.#progress(),
        pumpLane: () => this.#pumpLane(),
        fail: (error) => this.#fail("protocol", error),
      },
    );
    const handshake = this.#handshake;
    const port: ProducerPort = {
      produced: (message) => this.#post(() => handshake.onProduced(message)),
      storedAck: (message) => this.#post(() => handshake.onStoredAck(message)),
      maxPayloadBytes: this.#options.maxPayloadBytes,
      deliveryConfirmation: this.#options.deliveryConfirmation,
    };
    this.#options.producer.attach(port);
  }

  /** The producer (flow) name. */
  get name(): string {
    return this.#options.name;
  }

  /** The current lifecycle state. */
  get state(): ControllerState {
    return this.#state;
  }

  /** The current session (empty before `start`). */
  get session(): string {
    return this.#session;
  }

  /** The largest payload accepted, in UTF-8 bytes of its JSON text. */
  get maxPayloadBytes(): number {
    return this.#options.maxPayloadBytes;
  }

  /** Start: load the durable queue (if any) and begin serving workers and the producer. */
  start(): Promise<void> {
    if (this.#state !== "idle") {
      return Promise.reject(new Error(`Cannot start the controller: it is ${this.#state}`));
    }
    return this.#incarnate();
  }

  /**
   * Start a fresh incarnation after a terminal failure (or to take the queue back): a new
   * session and, with a durable queue, a new epoch that fences every earlier writer.
   */
  respawn(): Promise<void> {
    if (this.#state === "closed" || this.#state === "idle") {
      return Promise.reject(new Error(`Cannot respawn the controller: it is ${this.#state}`));
    }
    this.#failurePublished = false;
    return this.#incarnate();
  }

  /**
   * Stop gracefully, then close: dispatch nothing more and ask the producer for nothing more,
   * let the workers confirm the jobs they hold and the durable lane write every confirmation
   * (up to `timeout` ms, default 10,000), then {@linkcode WorkPullingController.close}. What is
   * still unconfirmed then is requeued by the next start (durable) or lost (volatile).
   */
  drain(timeout = 10_000): Promise<void> {
    if (this.#state === "closed") return Promise.resolve();
    this.#stopping ??= new Promise<void>((resolve) => {
      const timer = this.#options.clock.setTimeout(() => this.#post(finish), timeout);
      const finish = () => {
        if (this.#drained === undefined) return;
        this.#drained = undefined;
        timer.cancel();
        this.close().then(resolve);
      };
      this.#drained = finish;
      this.#post(() => this.#checkDrained());
    });
    return this.#stopping;
  }

  /** Stop for good: close every worker link and cancel all timers. */
  close(): Promise<void> {
    if (this.#state === "closed") return Promise.resolve();
    this.#endIncarnation("controller-stopped");
    this.#state = "closed";
    for (const connection of [...this.#connections]) {
      this.#closeConnection(connection, CloseCode.goingAway, "controller closed");
    }
    this.#heard.stop();
    return Promise.resolve();
  }

  /** Same as {@linkcode WorkPullingController.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }

  /**
   * Stop with a terminal failure found outside the controller: a job store shared by several
   * instances that learned another process took this instance over (`stage` "lease"). As when a
   * durable write is fenced: one `delivery-failed` event, then `failed` until `respawn()`.
   */
  fail(error: unknown, stage: FailureStage = "lease"): void {
    this.#post(() => {
      if (this.#state === "running" || this.#state === "loading") this.#fail(stage, error);
    });
  }

  /**
   * Attach a worker link. The transport feeds the returned receiver with the link's frames and
   * its closure. `identity` is what the edge authenticated (a registration for another worker
   * name is refused).
   */
  attach(link: Link, identity: LinkIdentity = {}): LinkReceiver {
    if (this.#state === "closed") {
      link.close(CloseCode.goingAway, "controller closed");
      return { receive() {}, closed() {} };
    }
    const connection: Connection = {
      link,
      identity,
      binding: undefined,
      lastHeard: this.#options.clock.now(),
      closed: false,
      features: NO_FEATURES,
    };
    this.#connections.add(connection);
    return {
      receive: (frame) => this.#post(() => this.#onFrame(connection, frame)),
      closed: (code) => this.#post(() => this.#onLinkClosed(connection, reasonForClose(code))),
      refuse: (reason, detail) =>
        this.#post(() => this.#refuse(connection, { ok: false, reason, detail })),
    };
  }

  /**
   * Cancel a job (for job queues, whose controller reports outcomes). A job in the pool ends at
   * once; a job at a worker ends cancelled when the worker reports it (a worker with feature
   * `outcomes` is told to abort it; `delivery.signal` aborts); a job the controller does not hold
   * yet ends as soon as it arrives. Resolves to where it was.
   */
  cancel(messageId: string): Promise<"pending" | "active" | "unknown"> {
    return new Promise((resolve) =>
      this.#post(() => {
        if (!this.#options.outcomes || this.#state !== "running") return resolve("unknown");
        const job = this.#owned.get(messageId);
        if (!job) {
          this.#cancelRequests.set(messageId, true);
          return resolve("unknown");
        }
        if (this.#pending.remove(job)) {
          this.#owned.delete(messageId);
          this.#lane!.confirmWith(messageId, CANCELLED);
          this.#pumpLane();
          return resolve("pending");
        }
        job.cancelled = true;
        for (const binding of this.#rotation.members) {
          const seq = binding.seqOf(job);
          if (seq === undefined) continue;
          const connection = this.#linkOf.get(binding);
          if (connection?.features.has("outcomes")) {
            this.#send(connection, encodeFrame({ type: "cancel", session: this.#session, seq }));
          }
        }
        resolve("active");
      })
    );
  }

  /** Where a job is: `pending` in the pool, a worker name at that worker, or undefined. */
  locate(messageId: string): string | undefined {
    const job = this.#owned.get(messageId);
    if (!job) return undefined;
    for (const binding of this.#rotation.members) {
      if (binding.seqOf(job) !== undefined) return binding.worker;
    }
    return "pending";
  }

  /** A snapshot of the pool, the workers and the totals. */
  stats(): ControllerStats {
    const now = this.#options.clock.now();
    return {
      name: this.#options.name,
      state: this.#state,
      session: this.#session,
      pending: this.#pending.length,
      workers: this.#rotation.members.map((binding) => {
        const connection = this.#linkOf.get(binding);
        return {
          worker: binding.worker,
          incarnation: binding.incarnation,
          binding: binding.id,
          connected: connection !== undefined,
          window: Math.max(0, binding.demandUpTo - binding.confirmedSeq),
          inFlight: binding.currentSeq - binding.confirmedSeq,
          confirmed: binding.confirmedCount,
          runtime: connection?.link.runtime,
          quietFor: connection ? now - connection.lastHeard : undefined,
        };
      }),
      totals: { ...this.#totals },
    };
  }

  /**
   * Be told how long each confirmed job took at its worker (for metrics); returns the function
   * that stops it. The watcher runs inside the controller's turn: keep it short (a throw is
   * logged and ignored).
   */
  watchConfirmations(watcher: ConfirmationWatcher): () => void {
    this.#confirmationWatchers = [...this.#confirmationWatchers, watcher];
    return () => {
      this.#confirmationWatchers = this.#confirmationWatchers.filter((w) => w !== watcher);
    };
  }

  // ------------------------------------------------------------------------------------------
  // Lifecycle

  #incarnate(): Promise<void> {
    this.#endIncarnation("controller-restart");
    this.#session = crypto.randomUUID();
    const generation = this.#generation;
    for (const connection of this.#connections) {
      this.#send(connection, encodeFrame({ type: "reset", session: this.#session }));
    }
    this.#scheduleTick(generation);
    if (!this.#lane) {
      this.#state = "running";
      this.#post(() => this.#progress());
      return Promise.resolve();
    }
    this.#state = "loading";
    const lane = this.#lane;
    return runWithRetry(
      (signal) => lane.queue.load({ signal }),
      lane.policy,
      this.#options.clock,
      this.#stop.signal,
    ).then((outcome) =>
      new Promise<void>((resolve, reject) => {
        this.#post(() => {
          if (generation !== this.#generation) {
            return reject(new Error("the controller stopped while loading"));
          }
          if (!outcome.ok) {
            this.#fail("load", outcome.error);
            return reject(outcome.error);
          }
          this.#restore(outcome.value.epoch, outcome.value.state);
          resolve();
        });
      })
    );
  }

  #restore(epoch: number, state: WorkQueueState) {
    const { currentSeq, unconfirmed, recentlyCompleted } = state;
    this.#lane!.reset(epoch);
    this.#handshake.reset(currentSeq);
    // Recent completions the queue kept: a resubmission of one keeps its sequence and does not
    // run again, across a restart too.
    for (const { messageId, seq } of recentlyCompleted ?? []) this.#completed.set(messageId, seq);
    for (const { messageId, seq, payload, attempt, timeout, lost } of unconfirmed) {
      const job = newJob(messageId, seq, payload, attempt, timeout, lost);
      this.#pending.pushBack(job);
      this.#owned.set(messageId, job, job.hash);
    }
    this.#state = "running";
    this.#progress();
  }

  /** Drop everything that belongs to the current incarnation. */
  #endIncarnation(reason: UnbindReason): void {
    this.#generation += 1;
    this.#stop.abort();
    this.#stop = new AbortController();
    this.#tick?.cancel();
    this.#tick = undefined;
    for (const binding of [...this.#rotation.members]) this.#endBinding(binding, reason);
    this.#pending.clear();
    this.#owned.clear();
    this.#dirty.clear();
    this.#handshake.reset();
    this.#lane?.reset(0);
  }

  /** A terminal failure: one event per incarnation, then stopped until `respawn()`. */
  #fail(stage: FailureStage, error: unknown): void {
    if (this.#state === "failed" || this.#state === "closed") return;
    this.#endIncarnation("controller-stopped");
    this.#state = "failed";
    if (this.#failurePublished) return;
    this.#failurePublished = true;
    this.dispatchEvent(
      new ReliableDeliveryFailedEvent(this.#options.name, stage, "producer", error),
    );
  }

  /** Durable retries exhausted: restart under a new session and reload. No failure event. */
  #restart(cause: unknown): void {
    this.#incarnate().catch(() => {/* a failed reload already published its failure */});
    this.dispatchEvent(new ControllerRestartedEvent(this.#session, cause));
  }

  #scheduleTick(generation: number): void {
    this.#tick = this.#options.clock.setTimeout(() => {
      this.#post(() => {
        if (generation !== this.#generation) return;
        this.#onTick();
        this.#scheduleTick(generation);
      });
    }, this.#options.retryInterval);
  }

  /** Retransmit the open handshake step; end silent links and bindings that stopped confirming. */
  #onTick(): void {
    this.#handshake.remind();
    const now = this.#options.clock.now();
    for (const connection of [...this.#connections]) {
      const interval = connection.binding?.resendInterval ?? UNREGISTERED_INTERVAL;
      if (now - connection.lastHeard > this.#options.silenceIntervals * interval) {
        this.#closeConnection(
          connection,
          CloseCode.silent,
          "no frame within the silence bound",
          "silent",
        );
      }
    }
    const maxJobAge = this.#options.maxJobAge;
    for (const binding of [...this.#rotation.members]) {
      const head = binding.head();
      if (!head) continue;
      const age = now - binding.progressAt;
      // A try with a timeout that the worker did not report ended in time (it is frozen, or does
      // not know timeouts) fails here, so a late success is never confirmed after a retry.
      const grace = 2 * binding.resendInterval;
      if (this.#options.outcomes && head.timeout && age > head.timeout + grace) {
        const message = `the try took longer than its timeout of ${head.timeout} ms`;
        this.#confirm(binding, binding.confirmedSeq + 1, {
          kind: "failed",
          worker: binding.worker,
          error: { name: "TimeoutError", message },
        });
        continue;
      }
      const limit = head.timeout ? Math.max(maxJobAge, head.timeout + grace) : maxJobAge;
      if (maxJobAge > 0 && age > limit) this.#endBinding(binding, "job-age");
    }
    this.#progress();
  }

  // ------------------------------------------------------------------------------------------
  // The mailbox

  #post(handler: () => void): void {
    this.#mailbox.pushBack(handler);
    if (this.#draining) return;
    this.#draining = true;
    try {
      for (let next = this.#mailbox.shift(); next; next = this.#mailbox.shift()) {
        try {
          next();
        } catch (error) {
          // A bug in a handler must not take the process (or the other workers) down.
          this.#options.logger.error("a controller handler failed", error);
        }
        if (this.#mailbox.length === 0) {
          this.#flush();
          this.#heard.settle();
          this.#launchLane();
          if (this.#drained) this.#checkDrained();
        }
      }
    } finally {
      this.#draining = false;
    }
  }

  /** Send `text` on the connection's link; any frame acknowledges what the worker sent. */
  #send(connection: Connection, text: string): void {
    this.#heard.answered(connection);
    connection.link.send(text);
  }

  /** Write every binding's newly dispatched (or rewound) jobs to its link. */
  #flush(): void {
    for (const binding of this.#dirty) {
      const connection = this.#linkOf.get(binding);
      const last = Math.min(binding.currentSeq, binding.demandUpTo);
      if (!connection) continue;
      while (binding.sentSeq < last) {
        const first = binding.sentSeq + 1;
        let count = 0;
        let size = 0;
        for (let seq = first; seq <= last && count < MAX_WINDOW; seq++) {
          const job = binding.jobAt(seq)!;
          if (count > 0 && size + job.payload.length > JOBS_FRAME_CHARS) break;
          count += 1;
          size += job.payload.length + job.messageId.length;
        }
        const jobs: Job[] = new Array(count);
        for (let i = 0; i < count; i++) jobs[i] = binding.jobAt(first + i)!;
        binding.sentSeq += count;
        const withTries = connection.features.has("outcomes");
        this.#send(connection, encodeJobsFrame(this.#session, first, jobs, withTries));
      }
    }
    this.#dirty.clear();
  }

  // ------------------------------------------------------------------------------------------
  // Worker frames

  #onFrame(connection: Connection, data: unknown): void {
    if (connection.closed || (this.#state !== "running" && this.#state !== "loading")) return;
    const decoded = decodeWorkerFrame(data, this.#options.maxWorkerFrame);
    if (!decoded.ok) return this.#refuse(connection, decoded);
    connection.lastHeard = this.#options.clock.now();
    if (connection.features.has("heard")) this.#heard.received(connection);
    const frame: WorkerFrame = decoded.frame;
    switch (frame.type) {
      case "register":
        return this.#onRegister(connection, frame);
      case "request":
        return this.#onRequest(connection, frame);
      case "ack":
        return this.#onAck(connection, frame);
      case "release":
        return this.#onRelease(connection, frame);
      case "done":
      case "fail":
        return this.#onOutcome(connection, frame);
      case "progress":
        return this.#onProgress(connection, frame);
    }
  }

  /** A frame that cannot be used: say why, end the binding and close the link. */
  #refuse(connection: Connection, failure: DecodeFailure): void {
    if (connection.closed) return;
    this.dispatchEvent(
      new FrameRejectedEvent(this.#workerOf(connection), failure.reason, failure.detail),
    );
    const code = failure.reason === "too-large" ? CloseCode.tooLarge : CloseCode.invalidFrame;
    this.#closeConnection(connection, code, failure.reason, "malformed-frame");
  }

  #workerOf(connection: Connection): string | undefined {
    return connection.binding?.worker ?? connection.identity.worker;
  }

  #reject(connection: Connection, reason: FrameRejectedEvent["reason"], detail: string): void {
    this.dispatchEvent(new FrameRejectedEvent(this.#workerOf(connection), reason, detail));
  }

  #onRegister(connection: Connection, frame: RegisterFrame): void {
    connection.features = agreedFeatures(frame.features, this.#options.outcomes);
    if (frame.producer !== this.#options.name) {
      return this.#refuseRegistration(
        connection,
        frame,
        "wrong-producer",
        `this controller serves "${this.#options.name}", not "${frame.producer}"`,
        CloseCode.refused,
      );
    }
    if (!identityAllows(connection.identity, frame.worker)) {
      return this.#refuseRegistration(
        connection,
        frame,
        "identity-mismatch",
        `link is authorized for "${connection.identity.worker}"`,
        CloseCode.policy,
      );
    }
    if (connection.binding && connection.binding.worker !== frame.worker) {
      return this.#refuseRegistration(
        connection,
        frame,
        "already-bound",
        `link is bound to "${connection.binding.worker}"`,
      );
    }
    const verdict = this.#incarnations.admit(frame.worker, frame.incarnation);
    if (verdict.kind === "stale") {
      return this.#refuseRegistration(
        connection,
        frame,
        "stale-incarnation",
        `a newer start of "${frame.worker}" registered; incarnation ${frame.incarnation} is replaced`,
        CloseCode.refused,
      );
    }
    let binding = this.#bindings.get(frame.worker);
    if (binding && binding.incarnation !== frame.incarnation) {
      // A newer start of this worker: the old one is fenced for good, so its link is closed too
      // (its next registration would be refused as stale anyway).
      const previous = this.#linkOf.get(binding);
      this.#endBinding(binding, "replaced");
      binding = undefined;
      if (previous && previous !== connection) {
        this.#closeConnection(previous, CloseCode.superseded, "replaced by a newer start");
      }
    }
    if (!binding) {
      binding = new Binding(
        `b${++this.#bindingCounter}`,
        frame.worker,
        frame.incarnation,
        frame.nonce,
        frame.resendInterval,
      );
      this.#bindings.set(frame.worker, binding);
      this.#rotation.add(binding);
      this.#attachBinding(binding, connection);
      this.dispatchEvent(new WorkerBoundEvent(binding.worker, binding.incarnation, binding.id));
    } else if (binding.nonce !== frame.nonce || this.#linkOf.get(binding) !== connection) {
      // The same incarnation again: a periodic re-registration or a reconnect. The sub-flow
      // survives; demand granted under the previous nonce authorizes nothing new.
      binding.nonce = frame.nonce;
      binding.resendInterval = frame.resendInterval;
      binding.demandUpTo = binding.currentSeq;
      const previous = this.#linkOf.get(binding);
      if (previous !== connection) {
        if (previous) {
          previous.binding = undefined;
          this.#closeConnection(previous, CloseCode.superseded, "superseded by a new connection");
        }
        this.#attachBinding(binding, connection);
      }
    }
    this.#send(
      connection,
      encodeFrame({
        type: "registered",
        session: this.#session,
        binding: binding.id,
        nextSeq: binding.confirmedSeq + 1,
        nonce: binding.nonce,
        ...(frame.features ? { features: [...connection.features] } : {}),
      }),
    );
    this.#progress();
  }

  /**
   * A registration that cannot bind: report it, tell a worker that understands `refused` why,
   * and close the link when registering again on it cannot succeed (`close`).
   */
  #refuseRegistration(
    connection: Connection,
    frame: RegisterFrame,
    reason: RefusalReason,
    detail: string,
    close?: number,
  ): void {
    this.#reject(connection, reason, detail);
    if (connection.features.has("refused")) {
      this.#send(
        connection,
        encodeFrame({
          type: "refused",
          nonce: frame.nonce,
          reason,
          retry: !FINAL_REFUSALS.has(reason),
          detail,
        }),
      );
    }
    if (close !== undefined) this.#closeConnection(connection, close, reason, "disconnected");
  }

  #attachBinding(binding: Binding, connection: Connection): void {
    this.#graceTimers.get(binding)?.cancel();
    this.#graceTimers.delete(binding);
    this.#linkOf.set(binding, connection);
    connection.binding = binding;
  }

  /** The binding `frame` speaks for, or undefined when it is stale (dropped silently). */
  #current(
    connection: Connection,
    frame: RequestFrame | AckFrame | ReleaseFrame | DoneFrame | FailFrame | ProgressFrame,
  ): Binding | undefined {
    const binding = connection.binding;
    if (!binding || frame.session !== this.#session || frame.nonce !== binding.nonce) {
      return undefined;
    }
    return binding;
  }

  #onRequest(connection: Connection, frame: RequestFrame): void {
    const binding = this.#current(connection, frame);
    if (!binding) return;
    const { confirmed, upTo } = frame;
    if (confirmed > binding.currentSeq || upTo < confirmed || upTo > confirmed + MAX_WINDOW) {
      this.#endBinding(binding, "illegal-demand");
      return this.#progress();
    }
    this.#confirm(binding, confirmed);
    binding.demandUpTo = upTo;
    if (frame.resend) binding.sentSeq = binding.confirmedSeq;
    this.#dirty.add(binding);
    this.#progress();
  }

  #onAck(connection: Connection, frame: AckFrame): void {
    const binding = this.#current(connection, frame);
    if (!binding) return;
    if (frame.confirmed > binding.currentSeq) {
      this.#endBinding(binding, "illegal-confirmation");
      return this.#progress();
    }
    this.#confirm(binding, frame.confirmed);
    this.#progress();
  }

  /** The worker drains: it keeps `(confirmed, upTo]` and hands the later jobs back at once. */
  #onRelease(connection: Connection, frame: ReleaseFrame): void {
    const binding = this.#current(connection, frame);
    if (!binding) return;
    const { confirmed, upTo } = frame;
    if (confirmed > binding.currentSeq || upTo < confirmed || upTo > binding.currentSeq) {
      this.#endBinding(binding, "illegal-demand");
      return this.#progress();
    }
    this.#confirm(binding, confirmed);
    this.#requeue(binding.worker, binding.release(upTo));
    this.#progress();
  }

  /**
   * Cut a binding's confirmed prefix: those jobs are done. When the controller reports outcomes,
   * `last` is how the try of the job at `confirmed` ended (the others completed), and a job
   * cancelled while at the worker ends cancelled whatever the worker says.
   */
  #confirm(binding: Binding, confirmed: number, last?: JobOutcome): void {
    const busySince = binding.progressAt;
    const now = this.#options.clock.now();
    const done = binding.advance(confirmed, now);
    if (done.length === 0) return;
    this.#totals.confirmed += done.length;
    if (this.#confirmationWatchers.length > 0) {
      this.#tellWatchers(binding.worker, done.length, now - busySince);
    }
    const outcomes = this.#options.outcomes;
    for (let i = 0; i < done.length; i++) {
      const job = done[i];
      this.#owned.delete(job.messageId, job.hash);
      let outcome: JobOutcome | undefined;
      if (outcomes) {
        outcome = job.cancelled
          ? { kind: "cancelled", worker: binding.worker }
          : last && i === done.length - 1
          ? last
          : binding.completion;
        if (outcome.kind === "failed") {
          this.#totals.failed += 1;
          if (job.lost) outcome = { ...outcome, lost: job.lost }; // carried to the next try
        }
        this.#lane!.confirmWith(job.messageId, outcome);
      }
      if (!outcome || outcome.kind === "completed") {
        this.#completed.set(job.messageId, job.storeSeq, job.hash);
      }
      if (this.#options.deliveryConfirmation) {
        const notice = { session: this.#session, messageId: job.messageId, seq: job.storeSeq };
        this.#handshake.tell((p) => p.onDeliveryConfirmed?.(notice));
      }
    }
    if (this.#lane) {
      if (!outcomes) this.#lane.confirm(done.map((job) => job.messageId));
      this.#pumpLane();
    }
  }

  #tellWatchers(worker: string, jobs: number, busyMs: number): void {
    for (const watcher of this.#confirmationWatchers) {
      try {
        watcher(worker, jobs, busyMs);
      } catch (error) {
        console.error("workpull: a confirmation watcher threw", error);
      }
    }
  }

  /** Feature `outcomes`: the worker says how the try of the job at `seq` ended. */
  #onOutcome(connection: Connection, frame: DoneFrame | FailFrame): void {
    if (!connection.features.has("outcomes")) {
      return this.#refuse(connection, {
        ok: false,
        reason: "invalid-frame",
        detail: `${frame.type}: feature outcomes was not agreed`,
      });
    }
    const binding = this.#current(connection, frame);
    if (!binding || frame.seq <= binding.confirmedSeq) return; // a repeat, or ended already
    if (frame.seq > binding.currentSeq) {
      this.#endBinding(binding, "illegal-confirmation");
      return this.#progress();
    }
    const worker = binding.worker;
    if (frame.type === "done") {
      const result = jsonTextOf(frame.result);
      this.#confirm(binding, frame.seq, { kind: "completed", worker, result });
    } else {
      this.#confirm(binding, frame.seq - 1);
      this.#confirm(binding, frame.seq, { kind: "failed", worker, error: frame.error });
    }
    this.#progress();
  }

  /** Feature `outcomes`: progress of a job at a worker, passed on as an event. */
  #onProgress(connection: Connection, frame: ProgressFrame): void {
    const binding = this.#current(connection, frame);
    if (!binding || !connection.features.has("outcomes")) return;
    const job = binding.jobAt(frame.seq);
    if (!job) return;
    const text = jsonTextOf(frame.value);
    if (text === undefined || text.length > MAX_PROGRESS_CHARS) return; // too large: dropped
    this.dispatchEvent(new ProgressEvent(job.messageId, binding.worker, frame.value));
  }

  #onLinkClosed(connection: Connection, reason: UnbindReason): void {
    if (connection.closed) return;
    connection.closed = true;
    this.#connections.delete(connection);
    this.#heard.answered(connection);
    const binding = connection.binding;
    connection.binding = undefined;
    if (!binding || this.#linkOf.get(binding) !== connection) return;
    this.#linkOf.delete(binding);
    const grace = this.#options.reconnectGrace;
    if (grace > 0 && reason === "disconnected" && this.#state === "running") {
      const generation = this.#generation;
      this.#graceTimers.set(
        binding,
        this.#options.clock.setTimeout(() =>
          this.#post(() => {
            if (
              generation === this.#generation && this.#bindings.get(binding.worker) === binding &&
              !this.#linkOf.has(binding)
            ) {
              this.#endBinding(binding, "disconnected");
              this.#progress();
            }
          }), grace),
      );
      return;
    }
    this.#endBinding(binding, reason);
    this.#progress();
  }

  #closeConnection(
    connection: Connection,
    code: number,
    reason: string,
    unbind: UnbindReason = "disconnected",
  ) {
    if (connection.closed) return;
    try {
      connection.link.close(code, reason);
    } catch {
      // The link is already gone; what matters is forgetting it.
    }
    this.#onLinkClosed(connection, unbind);
  }

  /** End a binding: its unconfirmed jobs go back to the head of the pool, in order. */
  #endBinding(binding: Binding, reason: UnbindReason): void {
    if (this.#bindings.get(binding.worker) !== binding) return;
    this.#bindings.delete(binding.worker);
    this.#rotation.remove(binding);
    this.#dirty.delete(binding);
    this.#graceTimers.get(binding)?.cancel();
    this.#graceTimers.delete(binding);
    const connection = this.#linkOf.get(binding);
    if (connection) connection.binding = undefined;
    this.#linkOf.delete(binding);
    if (
      connection && !connection.closed && connection.features.has("unbound") &&
      NOTICE_REASONS.has(reason)
    ) {
      // The link stays open: tell the worker, so it stops working for the ended sub-flow.
      const notice = reason as (typeof UNBOUND_REASONS)[number];
      this.#send(
        connection,
        encodeFrame({
          type: "unbound",
          session: this.#session,
          binding: binding.id,
          reason: notice,
        }),
      );
    }
    const jobs = binding.drain();
    this.dispatchEvent(
      new WorkerUnboundEvent(binding.worker, binding.incarnation, binding.id, reason, jobs.length),
    );
    this.#requeue(
      binding.worker,
      this.#options.outcomes ? this.#triage(binding, jobs, reason) : jobs,
    );
  }

  /**
   * With outcomes, the jobs of an ended binding that must not simply go back: a cancelled one
   * ends cancelled, and the oldest one (the one the worker was running) ends as a failed try once
   * it has lost more than `lostLimit` workers (a job that crashes its worker every time). Returns
   * the jobs to requeue.
   */
  #triage(binding: Binding, jobs: readonly Job[], reason: UnbindReason): Job[] {
    const requeue: Job[] = [];
    const lost = LOST_REASONS.has(reason);
    for (let i = 0; i < jobs.length; i++) {
      const job = jobs[i];
      // A worker confirms within its ack delay, so the job it was running may be one after the
      // oldest unconfirmed one: the next worker confirms before starting any of them.
      if (lost) job.confirmFirst = true;
      let outcome: JobOutcome | undefined;
      if (job.cancelled) outcome = { kind: "cancelled", worker: binding.worker };
      else if (i === 0 && lost) {
        job.lost = (job.lost ?? 0) + 1;
        if (job.lost > this.#options.lostLimit) {
          const message = `its worker was lost ${job.lost} times while running it (${reason})`;
          outcome = {
            kind: "failed",
            worker: binding.worker,
            error: { name: "WorkerLostError", message },
            lost: job.lost,
          };
          this.#totals.failed += 1;
        }
      }
      if (!outcome) {
        requeue.push(job);
        continue;
      }
      this.#owned.delete(job.messageId, job.hash);
      this.#lane!.confirmWith(job.messageId, outcome);
      this.#pumpLane();
    }
    return requeue;
  }

  /** Return `jobs` (in sequence order) to the head of the pool, in that order. */
  #requeue(worker: string, jobs: readonly Job[]): void {
    if (jobs.length === 0) return;
    for (let i = jobs.length - 1; i >= 0; i--) this.#pending.pushFront(jobs[i]);
    this.#totals.requeued += jobs.length;
    this.dispatchEvent(new RequeuedEvent(worker, jobs.map((job) => job.messageId)));
  }

  // ------------------------------------------------------------------------------------------
  // Dispatch and credit

  #progress(): void {
    if (this.#state !== "running" || this.#stopping) return;
    this.#dispatch();
    this.#openCredit();
  }

  /** A drain is done when no binding holds an unconfirmed job and the lane has written all. */
  #checkDrained(): void {
    if (!this.#drained) return;
    const held = this.#rotation.members.some((binding) =>
      binding.currentSeq > binding.confirmedSeq
    );
    const writing = this.#lane !== undefined &&
      (this.#lane.busy || this.#lane.queuedConfirms > 0 || this.#laneDue);
    if (!held && !writing) this.#drained();
  }

  #dispatch(): void {
    // Demand counts jobs; the byte budget keeps a window of large payloads from piling up in an
    // outbound buffer (a binding below its budget always takes one more job).
    const budget = this.#options.maxInFlightBytes;
    const eligible = (binding: Binding) =>
      binding.freeDemand > 0 && binding.unconfirmedChars < budget && this.#linkOf.has(binding);
    const now = this.#options.clock.now(); // one reading for the whole pass
    while (this.#pending.length > 0) {
      const binding = this.#rotation.next(eligible);
      if (!binding) return;
      if (binding.currentSeq >= MAX_SEQ) {
        return this.#fail(
          "protocol",
          new RangeError(`worker sequence space of ${binding.worker} exhausted`),
        );
      }
      binding.assign(this.#pending.shift()!, now);
      this.#totals.dispatched += 1;
      this.#dirty.add(binding);
    }
  }

  #openCredit(): void {
    if (!this.#handshake.idle) return;
    let room = 0;
    let connected = false;
    for (const binding of this.#rotation.members) {
      if (!this.#linkOf.has(binding)) continue;
      connected = true;
      room += binding.freeDemand;
    }
    // Lookahead jobs wait in the pool for the next request; with no worker, the producer keeps them.
    if (connected) room += this.#lookaheadJobs();
    if (room <= this.#pending.length) return;
    this.#handshake.ask(Math.min(room - this.#pending.length, this.#options.maxBatch));
  }

  /**
   * How many jobs to take beyond the workers' demand: the lookahead, fewer as the pool's payloads
   * near `lookaheadBytes`, none before an accepted batch has shown how large jobs are.
   */
  #lookaheadJobs(): number {
    const { lookahead, lookaheadBytes } = this.#options;
    const spare = lookaheadBytes - this.#pending.chars;
    const payloadChars = this.#handshake.payloadChars;
    if (lookahead === 0 || spare <= 0 || payloadChars === 0) return 0;
    return Math.min(lookahead, Math.ceil(spare / payloadChars));
  }

  // ------------------------------------------------------------------------------------------
  // The producer handshake (producer_handshake.ts)

  /** A handshake's jobs, accepted: into the pool, unless cancelled before they arrived. */
  #accept(jobs: readonly Job[]): void {
    const cancels = this.#options.outcomes && this.#cancelRequests.size > 0;
    for (let i = 0; i < jobs.length; i++) {
      const job = jobs[i];
      if (cancels && this.#cancelRequests.has(job.messageId, job.hash)) {
        this.#cancelRequests.delete(job.messageId, job.hash);
        this.#lane!.confirmWith(job.messageId, CANCELLED);
        this.#pumpLane();
        continue;
      }
      this.#owned.set(job.messageId, job, job.hash);
      this.#pending.pushBack(job);
      this.#totals.accepted += 1;
    }
  }

  // ------------------------------------------------------------------------------------------
  // The durable lane

  /** Note that the lane has work; it starts once the mailbox is drained, so that every
   * confirmation and handshake step of this turn can join the same transaction. */
  #pumpLane(): void {
    this.#laneDue = true;
  }

  #launchLane(): void {
    if (!this.#laneDue) return;
    this.#laneDue = false;
    const lane = this.#lane;
    const unit = lane?.next();
    if (!lane || !unit) return;
    const generation = this.#generation;
    lane.execute(unit, this.#stop.signal).then((outcome) =>
      this.#post(() => {
        if (generation === this.#generation) this.#onLaneOutcome(unit, outcome);
      })
    );
  }

  #onLaneOutcome(unit: LaneUnit, outcome: UnitOutcome): void {
    const progress = this.#lane!.complete(unit, outcome);
    switch (progress.kind) {
      case "stored":
        this.#handshake.onLaneStored(progress.cursor, progress.results);
        break;
      case "accepted":
        this.#handshake.onLaneAccepted();
        break;
      case "failed":
        if (progress.terminal) return this.#fail(progress.stage, progress.error);
        return this.#restart(progress.error);
    }
    this.#pumpLane();
  }
}

/** The features both sides use, from what a worker announced (`outcomes` only when on). */
function agreedFeatures(
  offered: readonly string[] | undefined,
  outcomes: boolean,
): ReadonlySet<string> {
  if (!offered) return NO_FEATURES;
  return new Set(
    offered.filter((feature) =>
      KNOWN_FEATURES.has(feature) && (outcomes || feature !== "outcomes")
    ),
  );
}

function reasonForClose(code: number): UnbindReason {
  if (code === CloseCode.backpressure) return "backpressure";
  if (code === CloseCode.silent) return "silent";
  return "disconnected";
}
