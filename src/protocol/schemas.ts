/**
 * Every message that crosses a boundary, as one valibot schema each, with its type inferred
 * from the schema.
 *
 * Two families:
 * - the **wire** frames exchanged between the controller and a worker endpoint (over a WebSocket
 *   or an in-process channel), discriminated by `type`;
 * - the **producer contract** messages exchanged between the controller and the producer in
 *   the same process (`RequestNext` → `Produced`, `Stored` → `StoredAck`, `DeliveryConfirmed`).
 *
 * @module
 */

import * as v from "valibot";

/** The WebSocket subprotocol that names this wire protocol and its version. */
export const SUBPROTOCOL = "workpull.v1";
/** The largest demand window a worker may grant (and `upTo - confirmed` may span). */
export const MAX_WINDOW = 10_000;
/** The largest length of an identifier (MessageID, worker name, incarnation, nonce, session). */
export const MAX_ID_LENGTH = 256;
/** Sequences stop here; reaching it is terminal (it takes 285 years at a million jobs/s). */
export const MAX_SEQ = Number.MAX_SAFE_INTEGER - 1;

const id = v.pipe(
  v.string(),
  v.minLength(1),
  v.maxLength(MAX_ID_LENGTH),
  v.check((s) => s.trim() !== "", "must not be blank"),
);
const seq = v.pipe(v.number(), v.safeInteger(), v.minValue(0), v.maxValue(MAX_SEQ));
const positiveSeq = v.pipe(v.number(), v.safeInteger(), v.minValue(1), v.maxValue(MAX_SEQ));

// ---------------------------------------------------------------------------------------------
// Wire: worker -> controller

/** A worker endpoint asks to bind (or re-asserts its binding) with a fresh nonce. */
export const RegisterFrame = v.strictObject({
  type: v.literal("register"),
  /** The producer (flow) name this worker serves. */
  producer: id,
  /** The worker endpoint's stable name: its identity and its binding key. */
  worker: id,
  /** Fresh at every start of the endpoint; a new one replaces the old binding. */
  incarnation: id,
  /** Fresh at every registration attempt; echoed in the ack and carried by request/ack. */
  nonce: id,
  /** The worker's resend interval in ms: it sends at least one frame per interval. */
  resendInterval: v.pipe(v.number(), v.safeInteger(), v.minValue(1), v.maxValue(3_600_000)),
});
/** See {@linkcode RegisterFrame}. */
export type RegisterFrame = v.InferOutput<typeof RegisterFrame>;

/** Demand and cumulative confirmation; `resend` asks for unconfirmed jobs again. */
export const RequestFrame = v.strictObject({
  type: v.literal("request"),
  session: id,
  nonce: id,
  /** Every sequence up to and including this one is confirmed. */
  confirmed: seq,
  /** The worker accepts sequences up to and including this one. */
  upTo: seq,
  /** Resend every unconfirmed sequence in `(confirmed, upTo]`. */
  resend: v.boolean(),
});
/** See {@linkcode RequestFrame}. */
export type RequestFrame = v.InferOutput<typeof RequestFrame>;

/** Cumulative confirmation without new demand; also the idle heartbeat. */
export const AckFrame = v.strictObject({
  type: v.literal("ack"),
  session: id,
  nonce: id,
  confirmed: seq,
});
/** See {@linkcode AckFrame}. */
export type AckFrame = v.InferOutput<typeof AckFrame>;

/** Any frame a worker may send. */
export const WorkerFrame = v.variant("type", [RegisterFrame, RequestFrame, AckFrame]);
/** See {@linkcode WorkerFrame}. */
export type WorkerFrame = v.InferOutput<typeof WorkerFrame>;

// ---------------------------------------------------------------------------------------------
// Wire: controller -> worker

/** The controller accepted a registration. */
export const RegisteredFrame = v.strictObject({
  type: v.literal("registered"),
  session: id,
  /** Identifies the binding; a new value means a fresh sub-flow the worker must adopt. */
  binding: id,
  /** The first sequence of a fresh binding (`confirmed + 1` of the binding). */
  nextSeq: positiveSeq,
  nonce: id,
});
/** See {@linkcode RegisteredFrame}. */
export type RegisteredFrame = v.InferOutput<typeof RegisteredFrame>;

/** One job inside a {@linkcode JobsFrame}. */
export const WireJob = v.strictObject({
  /** The MessageID: the stable deduplication key. */
  id: id,
  /** The job's JSON value. */
  payload: v.unknown(),
});
/** See {@linkcode WireJob}. */
export type WireJob = v.InferOutput<typeof WireJob>;

/** Jobs with contiguous sequences `seq`, `seq + 1`, ... in one frame. */
export const JobsFrame = v.strictObject({
  type: v.literal("jobs"),
  session: id,
  seq: positiveSeq,
  jobs: v.pipe(v.array(WireJob), v.minLength(1), v.maxLength(MAX_WINDOW)),
});
/** See {@linkcode JobsFrame}. */
export type JobsFrame = v.InferOutput<typeof JobsFrame>;

/** The controller has a new session (restart or respawn): register again now. */
export const ResetFrame = v.strictObject({
  type: v.literal("reset"),
  session: id,
});
/** See {@linkcode ResetFrame}. */
export type ResetFrame = v.InferOutput<typeof ResetFrame>;

/** Any frame the controller may send. */
export const ControllerFrame = v.variant("type", [RegisteredFrame, JobsFrame, ResetFrame]);
/** See {@linkcode ControllerFrame}. */
export type ControllerFrame = v.InferOutput<typeof ControllerFrame>;

// ---------------------------------------------------------------------------------------------
// Producer contract (in process)

/** A grant: the producer answers with exactly one {@linkcode Produced} of 1..`maxJobs` jobs. */
export const RequestNext = v.strictObject({
  session: id,
  token: id,
  /** The most jobs the answering `Produced` may carry (free worker demand, capped). */
  maxJobs: v.pipe(v.number(), v.safeInteger(), v.minValue(1)),
});
/** See {@linkcode RequestNext}. */
export type RequestNext = v.InferOutput<typeof RequestNext>;

/** One produced job. The payload must be JSON-serializable. */
export const ProducedJob = v.strictObject({
  messageId: id,
  payload: v.unknown(),
});
/** See {@linkcode ProducedJob}. */
export type ProducedJob = v.InferOutput<typeof ProducedJob>;

/** The answer to a grant: one job, or a batch of jobs each with its own MessageID. */
export const Produced = v.union([
  v.strictObject({ session: id, token: id, messageId: id, payload: v.unknown() }),
  v.strictObject({
    session: id,
    token: id,
    jobs: v.pipe(v.array(ProducedJob), v.minLength(1)),
  }),
]);
/** See {@linkcode Produced}. */
export type Produced = v.InferOutput<typeof Produced>;

/** The jobs of a grant are stored: each with its producer-visible store sequence. */
export const Stored = v.strictObject({
  session: id,
  token: id,
  jobs: v.array(v.strictObject({ messageId: id, seq: positiveSeq })),
});
/** See {@linkcode Stored}. */
export type Stored = v.InferOutput<typeof Stored>;

/** The producer has durably removed the stored jobs from its own source. */
export const StoredAck = v.strictObject({ session: id, token: id });
/** See {@linkcode StoredAck}. */
export type StoredAck = v.InferOutput<typeof StoredAck>;

/** The jobs of a grant are accepted into the pool (an extension of the contract). */
export const Accepted = v.strictObject({ session: id, token: id });
/** See {@linkcode Accepted}. */
export type Accepted = v.InferOutput<typeof Accepted>;

/** A worker confirmed a job; repeats when a requeued job is confirmed again. */
export const DeliveryConfirmed = v.strictObject({
  session: id,
  messageId: id,
  /** The store sequence its `Stored` carried. */
  seq: positiveSeq,
});
/** See {@linkcode DeliveryConfirmed}. */
export type DeliveryConfirmed = v.InferOutput<typeof DeliveryConfirmed>;
