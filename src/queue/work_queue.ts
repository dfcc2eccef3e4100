/**
 * The durable work queue contract: what a backend must provide so that every accepted job
 * survives a controller crash.
 *
 * Four operations, all linearizable and safe for concurrent use:
 *
 * - `load` snapshots the state and acquires exclusive writership under a fresh epoch, which
 *   fences every earlier writer. It returns the append cursor and every accepted, unconfirmed
 *   job in ascending store sequence (holes are normal). A failed load changes no ownership.
 * - `store` appends a new job at `currentSeq + 1`; the first write for a MessageID wins, and a
 *   retry returns the original sequence and payload with `alreadyStored: true`.
 * - `accept` records that the producer removed the job from its own recoverable source (a store
 *   result marked `accepted` needs none: the queue was that source).
 * - `confirmMessage` marks one job complete; a job both accepted and confirmed may be compacted,
 *   after which its MessageID counts as new. Confirmation is idempotent: confirming a MessageID
 *   that is already confirmed, compacted or unknown is a no-op, so a unit whose outcome is
 *   unknown (a commit that applied but whose answer was lost) can always be retried.
 *
 * Stale epochs (and epoch 0) get {@link QueueFencedError}; ownership or integrity conflicts get
 * {@link QueueConflictError}; both are terminal for the controller. Any other rejection is a
 * retriable backend error. An adapter may also implement {@link DurableWorkQueue.commit} so the
 * controller can group many operations into one backend transaction.
 *
 * @module
 */

/** A writer epoch returned by {@linkcode DurableWorkQueue.load}: a positive integer. */
export type QueueEpoch = number;

import type { JobOutcome } from "../lifecycle/job_record.ts";

/** Options every queue operation accepts. */
export interface QueueCallOptions {
  /** Aborted when the controller gives up on this attempt (its per-attempt timeout). */
  readonly signal?: AbortSignal;
}

/** Options of {@linkcode DurableWorkQueue.confirmMessage}. */
export interface ConfirmOptions extends QueueCallOptions {
  /**
   * How the try ended, when the controller reports outcomes (a job queue's controller does). A
   * plain work queue ignores it: to it every confirmation means the job left the worker.
   */
  readonly outcome?: JobOutcome;
}

/** One stored, accepted, not-yet-confirmed job as returned by {@linkcode DurableWorkQueue.load}. */
export interface UnconfirmedMessage {
  /** The stable deduplication key. */
  readonly messageId: string;
  /** The store sequence assigned by the first successful store. */
  readonly seq: number;
  /** The job payload as JSON text (never empty). */
  readonly payload: string;
  /** Optional: which try this is (a job store knows; 1 for the first). */
  readonly attempt?: number;
  /** Optional: how long the try may take, ms (a job store knows; 0 = no limit). */
  readonly timeout?: number;
  /** Optional: workers lost while running it so far (a job store knows). */
  readonly lost?: number;
}

/** A job that was confirmed recently, as an adapter may remember it. */
export interface CompletedMessage {
  /** Its MessageID. */
  readonly messageId: string;
  /** The store sequence it had. */
  readonly seq: number;
}

/** The state a controller rebuilds from at (re)start. */
export interface WorkQueueState {
  /** The append cursor: the highest store sequence ever assigned (0 when empty). */
  readonly currentSeq: number;
  /** Accepted, unconfirmed jobs in strictly ascending `seq`, with unique MessageIDs. */
  readonly unconfirmed: readonly UnconfirmedMessage[];
  /**
   * Optional: jobs confirmed recently (oldest first), so that a producer resubmitting one after a
   * restart gets its original sequence and the job does not run again. Adapters keep a bounded
   * number of them for a bounded time.
   */
  readonly recentlyCompleted?: readonly CompletedMessage[];
}

/** The result of {@linkcode DurableWorkQueue.load}. */
export interface LoadResult {
  /** The snapshot. */
  readonly state: WorkQueueState;
  /** A positive epoch greater than every epoch returned before. */
  readonly epoch: QueueEpoch;
}

/** A request to store one job. */
export interface StoreRequest {
  /** The stable deduplication key (non-blank). */
  readonly messageId: string;
  /** Must equal `currentSeq + 1` when the MessageID is new. */
  readonly proposedSeq: number;
  /** JSON text (non-empty). */
  readonly payload: string;
}

/** The result of a store: for an existing MessageID, its original sequence and payload. */
export interface StoreResult {
  /** The authoritative store sequence. */
  readonly seq: number;
  /** True when the MessageID was stored before (nothing was appended). */
  readonly alreadyStored: boolean;
  /** The authoritative (first-write) payload. */
  readonly payload: string;
  /**
   * True when the queue holds the job as accepted already: it came from the queue's own backlog,
   * and storing it took it from there in the same write. The controller then skips its Accept (a
   * write of nothing, one transaction fewer before the job can be dispatched).
   */
  readonly accepted?: boolean;
}

/** One job inside a batched store. */
export interface BatchStoreJob {
  /** The stable deduplication key (non-blank). */
  readonly messageId: string;
  /** JSON text (non-empty). */
  readonly payload: string;
}

/**
 * Several operations applied in one backend transaction, in this order: stores, accepts,
 * confirms. The effect equals calling {@linkcode DurableWorkQueue.store},
 * {@linkcode DurableWorkQueue.accept} and {@linkcode DurableWorkQueue.confirmMessage} one by
 * one, except that it is all-or-nothing.
 */
export interface QueueBatch {
  /**
   * Jobs to store. New MessageIDs are appended at `firstSeq`, `firstSeq + 1`, ... in order,
   * skipping jobs already stored; when at least one is new, `firstSeq` must equal
   * `currentSeq + 1` or the batch fails with {@link QueueConflictError}.
   */
  readonly store?: { readonly firstSeq: number; readonly jobs: readonly BatchStoreJob[] };
  /** MessageIDs to accept. */
  readonly accept?: readonly string[];
  /** MessageIDs to confirm. */
  readonly confirm?: readonly string[];
  /** How the confirmed tries ended, by MessageID (see {@linkcode ConfirmOptions.outcome}). */
  readonly outcomes?: BatchOutcomes;
}

/**
 * How a batch's confirmed tries ended, looked up by MessageID: a `Map` will do. (The controller
 * passes a table that hashes MessageIDs in JavaScript: an engine's native `Map` spends about
 * 0.5 µs on the first use of each fresh MessageID as a key.)
 *
 * @example A batch that confirms two tries, one of which failed
 * ```ts
 * import type { BatchOutcomes, QueueBatch } from "./work_queue.ts";
 *
 * const outcomes: BatchOutcomes = new Map([
 *   ["job-2", { kind: "failed", error: { name: "Error", message: "no such user" } }],
 * ]);
 * const batch: QueueBatch = { confirm: ["job-1", "job-2"], outcomes };
 * console.assert(batch.outcomes?.get("job-1") === undefined); // completed
 * ```
 */
export interface BatchOutcomes {
  /** How the try of `messageId` ended; undefined: it completed. */
  get(messageId: string): JobOutcome | undefined;
}

/** The result of {@linkcode DurableWorkQueue.commit}. */
export interface QueueBatchResult {
  /** One result per job of `batch.store`, in the same order. */
  readonly stored: readonly StoreResult[];
}

/**
 * How much one {@linkcode DurableWorkQueue.commit} may carry. The controller counts one
 * operation per stored, accepted or confirmed job, and as bytes the UTF-8 length of every
 * MessageID and stored payload.
 */
export interface QueueBatchLimits {
  /** Operations per commit (at least 1). */
  readonly maxOperations: number;
  /** Bytes per commit. */
  readonly maxBytes: number;
}

/**
 * The durable work queue contract. See the module documentation for the rules.
 *
 * @example Attach a queue to a controller
 * ```ts
 * import { MemoryWorkQueue, WorkPullingController, BufferedProducer } from "../../mod.ts";
 *
 * const queue = new MemoryWorkQueue();
 * const controller = new WorkPullingController({
 *   name: "jobs",
 *   producer: new BufferedProducer(),
 *   queue,
 * });
 * await controller.start();
 * await controller.close();
 * ```
 */
export interface DurableWorkQueue {
  /** Snapshot the state and acquire writership under a new, greater epoch. */
  load(options?: QueueCallOptions): Promise<LoadResult>;
  /** Store one job; the first write for a MessageID wins. */
  store(epoch: QueueEpoch, request: StoreRequest, options?: QueueCallOptions): Promise<StoreResult>;
  /** Record that the producer removed the job from its recoverable source. */
  accept(epoch: QueueEpoch, messageId: string, options?: QueueCallOptions): Promise<void>;
  /** Mark one job complete; a no-op for a MessageID already confirmed, compacted or unknown. */
  confirmMessage(epoch: QueueEpoch, messageId: string, options?: ConfirmOptions): Promise<void>;
  /** Optional: apply many operations in one transaction (group commit). */
  commit?(
    epoch: QueueEpoch,
    batch: QueueBatch,
    options?: QueueCallOptions,
  ): Promise<QueueBatchResult>;
  /** Optional: the size of one {@linkcode DurableWorkQueue.commit}; required with `commit`. */
  readonly batchLimits?: QueueBatchLimits;
  /** Optional: the largest payload (UTF-8 bytes of its JSON text) this queue can store. */
  readonly maxPayloadBytes?: number;
}

/**
 * The epoch no longer owns the queue (or is 0): another writer loaded after it.
 * Terminal for the controller.
 *
 * @example
 * ```ts
 * import { QueueFencedError } from "../../mod.ts";
 * const error = new QueueFencedError("epoch 1 is fenced by epoch 2");
 * console.assert(error.name === "QueueFencedError");
 * ```
 */
export class QueueFencedError extends Error {
  /** Creates the error. */
  constructor(message = "Cannot write: the epoch is fenced", options?: ErrorOptions) {
    super(message, options);
    this.name = "QueueFencedError";
  }
}

/**
 * A state-ownership or integrity conflict: a wrong proposed sequence, an accept of an unknown
 * MessageID, malformed persisted state. Terminal for the controller.
 *
 * @example
 * ```ts
 * import { QueueConflictError } from "../../mod.ts";
 * const error = new QueueConflictError("unknown MessageID job-7");
 * console.assert(error.name === "QueueConflictError");
 * ```
 */
export class QueueConflictError extends Error {
  /** Creates the error. */
  constructor(message = "Cannot write: the queue state conflicts", options?: ErrorOptions) {
    super(message, options);
    this.name = "QueueConflictError";
  }
}

/** True for the two terminal queue errors. */
export function isTerminalQueueError(
  error: unknown,
): error is QueueFencedError | QueueConflictError {
  return error instanceof QueueFencedError || error instanceof QueueConflictError;
}
