/**
 * The controller's options, their defaults and their validation.
 *
 * @module
 */

import { type Clock, systemClock } from "../core/clock.ts";
import { type Logger, loggerOption } from "../core/logger.ts";
import {
  booleanOption,
  durationOption,
  identifierOption,
  integerOption,
  optionsObject,
} from "../core/options.ts";
import type { DurableWorkQueue } from "../queue/work_queue.ts";
import type { ProducerEndpoint } from "./producer_contract.ts";

/** Options of {@linkcode WorkPullingController}. */
export interface WorkPullingControllerOptions {
  /** The producer (flow) name workers register for. */
  readonly name: string;
  /** The producer endpoint that answers `RequestNext` (for example a `BufferedProducer`). */
  readonly producer: ProducerEndpoint;
  /** Persist accepted jobs so they survive a controller crash. Default: none (volatile). */
  readonly queue?: DurableWorkQueue;
  /** RequestNext / Stored retransmission and liveness tick, ms. Default 500. */
  readonly retryInterval?: number;
  /** Tell the producer `DeliveryConfirmed` for every confirmed job. Default false. */
  readonly deliveryConfirmation?: boolean;
  /** Attempts per durable operation, counting the first. Default 3 (1..100). */
  readonly queueRetryAttempts?: number;
  /** Wait before the second durable attempt, doubling after each failure, ms. Default 100. */
  readonly queueRetryBackoff?: number;
  /** Each durable attempt is aborted after this long, ms. Default 5000. */
  readonly queueTimeout?: number;
  /** Most jobs one `Produced` may carry (the cap on a grant). Default 1000 (1..10,000). */
  readonly maxBatch?: number;
  /**
   * How many jobs beyond the workers' free demand the controller may take from the producer
   * while a worker is connected. They wait in the pool, ready for the next request, so workers
   * do not wait for a durable queue's store and accept. With none connected the producer keeps
   * its jobs. Default: `maxBatch` with a `queue`, 0 without a queue or with `outcomes`
   * (0..1,000,000). A job store (`JobQueue`) keeps its backlog instead, so that a job added
   * later with a higher priority is not queued behind jobs already taken.
   */
  readonly lookahead?: number;
  /**
   * The lookahead shrinks as the payloads waiting in the pool near this size (characters of
   * JSON text), judged by the size of the latest accepted batch's jobs, so large jobs are not
   * taken a thousand at a time. Default 4 MiB (1 KiB..1 GiB).
   */
  readonly lookaheadBytes?: number;
  /** Largest payload, as UTF-8 bytes of its JSON text. Default 1 MiB (or the queue's maximum). */
  readonly maxPayloadBytes?: number;
  /** End a binding after this many of the worker's resend intervals without a frame. Default 4. */
  readonly silenceIntervals?: number;
  /**
   * Stop dispatching to a worker while the payloads it holds unconfirmed reach this size
   * (characters of JSON text; one job is always allowed). Bounds each connection's outbound
   * buffer whatever its window. Default 4 MiB (1 KiB..1 GiB).
   */
  readonly maxInFlightBytes?: number;
  /**
   * End a binding that holds unconfirmed jobs and confirms none of them for this long, ms: its
   * jobs requeue to other workers (reason `job-age`). Bounds how long a worker that takes jobs
   * and never finishes them (hung, or hoarding) can keep them. 0 disables it. Default 900,000
   * (15 minutes); raise it if one job can legitimately run longer.
   */
  readonly maxJobAge?: number;
  /** Keep a disconnected worker's binding this long for a reconnect of the same incarnation, ms. Default 0. */
  readonly reconnectGrace?: number;
  /** Largest frame accepted from a worker, in characters. Default 65,536. */
  readonly maxWorkerFrame?: number;
  /**
   * How many recently confirmed MessageIDs to remember: a resubmission of one returns its
   * original store sequence and is not dispatched again. Default 10,000 (0 disables).
   */
  readonly dedupeWindow?: number;
  /**
   * Report how each try ended (the `outcomes` protocol feature): workers report results and
   * failures instead of retrying in place, confirmations carry the outcome to the queue, tries
   * with a timeout that do not end in time fail, and `cancel()` works. Requires `queue` (a job
   * store applies the outcomes). `JobQueue` turns it on. Default false.
   */
  readonly outcomes?: boolean;
  /**
   * With `outcomes`: how many times a job may lose the worker running it before that counts as a
   * failed try. Default 2 (0..1,000).
   */
  readonly lostLimit?: number;
  /**
   * How many worker incarnation ids to remember for fencing (names' current incarnations and
   * the ones they replaced), beyond those of live bindings; the least recently registered names
   * without a live binding are forgotten first (see `incarnations.ts`). Default 16,384
   * (64..10,000,000).
   */
  readonly maxIncarnationHistory?: number;
  /** The time source. Default: the system clock. */
  readonly clock?: Clock;
  /** Where contained failures are reported. Default: `console.error` (see `createLogger`). */
  readonly logger?: Logger;
}

/** Options after validation, with defaults applied. */
export interface ResolvedControllerOptions {
  readonly name: string;
  readonly producer: ProducerEndpoint;
  readonly queue: DurableWorkQueue | undefined;
  readonly retryInterval: number;
  readonly deliveryConfirmation: boolean;
  readonly queueRetryAttempts: number;
  readonly queueRetryBackoff: number;
  readonly queueTimeout: number;
  readonly maxBatch: number;
  readonly lookahead: number;
  readonly lookaheadBytes: number;
  readonly maxPayloadBytes: number;
  readonly silenceIntervals: number;
  readonly reconnectGrace: number;
  readonly maxJobAge: number;
  readonly maxWorkerFrame: number;
  readonly maxInFlightBytes: number;
  readonly dedupeWindow: number;
  readonly outcomes: boolean;
  readonly lostLimit: number;
  readonly maxIncarnationHistory: number;
  readonly clock: Clock;
  readonly logger: Logger;
}

const OWNER = "WorkPullingController";
const HOUR = 3_600_000;

/** Validate `options`, throwing a `TypeError` or `RangeError` that names the offending option. */
export function resolveControllerOptions(
  options: WorkPullingControllerOptions,
): ResolvedControllerOptions {
  optionsObject(OWNER, options);
  const producer = options.producer;
  if (
    typeof producer !== "object" || producer === null || typeof producer.attach !== "function" ||
    typeof producer.onRequestNext !== "function" || typeof producer.onStored !== "function"
  ) {
    throw new TypeError(
      `Cannot create ${OWNER}: option "producer" must implement attach, onRequestNext and onStored`,
    );
  }
  const queue = options.queue;
  if (queue !== undefined) {
    const methods = ["load", "store", "accept", "confirmMessage"] as const;
    if (
      typeof queue !== "object" || queue === null ||
      methods.some((m) => typeof queue[m] !== "function")
    ) {
      throw new TypeError(
        `Cannot create ${OWNER}: option "queue" must implement load, store, accept and confirmMessage`,
      );
    }
    if (queue.commit && !queue.batchLimits) {
      throw new TypeError(
        `Cannot create ${OWNER}: option "queue" implements commit without batchLimits`,
      );
    }
  }
  const outcomes = booleanOption(OWNER, "outcomes", options.outcomes, false);
  if (outcomes && !queue) {
    throw new TypeError(
      `Cannot create ${OWNER}: option "outcomes" needs a "queue" (a job store) to apply them`,
    );
  }
  const maxBatch = integerOption(OWNER, "maxBatch", options.maxBatch, 1000, 1, 10_000);
  const queueMax = queue?.maxPayloadBytes ?? Number.MAX_SAFE_INTEGER;
  const clock = options.clock ?? systemClock;
  if (typeof clock.now !== "function" || typeof clock.setTimeout !== "function") {
    throw new TypeError(`Cannot create ${OWNER}: option "clock" must implement now and setTimeout`);
  }
  return {
    name: identifierOption(OWNER, "name", options.name),
    producer,
    queue,
    retryInterval: durationOption(OWNER, "retryInterval", options.retryInterval, 500, 1, HOUR),
    deliveryConfirmation: booleanOption(
      OWNER,
      "deliveryConfirmation",
      options.deliveryConfirmation,
      false,
    ),
    queueRetryAttempts: integerOption(
      OWNER,
      "queueRetryAttempts",
      options.queueRetryAttempts,
      3,
      1,
      100,
    ),
    queueRetryBackoff: durationOption(
      OWNER,
      "queueRetryBackoff",
      options.queueRetryBackoff,
      100,
      1,
      HOUR,
    ),
    queueTimeout: durationOption(OWNER, "queueTimeout", options.queueTimeout, 5000, 1, HOUR),
    maxBatch,
    lookahead: integerOption(
      OWNER,
      "lookahead",
      options.lookahead,
      queue && !outcomes ? maxBatch : 0,
      0,
      1_000_000,
    ),
    lookaheadBytes: integerOption(
      OWNER,
      "lookaheadBytes",
      options.lookaheadBytes,
      4 * 1024 * 1024,
      1024,
      1024 * 1024 * 1024,
    ),
    maxPayloadBytes: integerOption(
      OWNER,
      "maxPayloadBytes",
      options.maxPayloadBytes,
      Math.min(1024 * 1024, queueMax),
      1,
      queueMax,
    ),
    silenceIntervals: integerOption(
      OWNER,
      "silenceIntervals",
      options.silenceIntervals,
      4,
      2,
      1000,
    ),
    reconnectGrace: durationOption(OWNER, "reconnectGrace", options.reconnectGrace, 0, 0, HOUR),
    maxJobAge: durationOption(OWNER, "maxJobAge", options.maxJobAge, 900_000, 0, 7 * 24 * HOUR),
    maxWorkerFrame: integerOption(
      OWNER,
      "maxWorkerFrame",
      options.maxWorkerFrame,
      65_536,
      1024,
      16 * 1024 * 1024,
    ),
    maxInFlightBytes: integerOption(
      OWNER,
      "maxInFlightBytes",
      options.maxInFlightBytes,
      4 * 1024 * 1024,
      1024,
      1024 * 1024 * 1024,
    ),
    dedupeWindow: integerOption(OWNER, "dedupeWindow", options.dedupeWindow, 10_000, 0, 10_000_000),
    outcomes,
    lostLimit: integerOption(OWNER, "lostLimit", options.lostLimit, 2, 0, 1000),
    maxIncarnationHistory: integerOption(
      OWNER,
      "maxIncarnationHistory",
      options.maxIncarnationHistory,
      16_384,
      64,
      10_000_000,
    ),
    clock,
    logger: loggerOption(OWNER, options.logger),
  };
}
