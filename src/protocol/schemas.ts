/**
 * Every message that crosses a boundary, as one valibot schema each (`*Schema`), and its public
 * TypeScript type. The public types are written out (so the documented API does not expose
 * valibot's types) and a compile-time check at the end of this file proves each equals the type
 * inferred from its schema.
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
/**
 * The optional protocol features this implementation knows, negotiated at registration: a worker
 * lists what it understands in `register.features`; the controller answers with the ones it will
 * use in `registered.features`. A peer never sends a frame of a feature the other did not name,
 * so a worker without `features` gets exactly the version-1 frames.
 *
 * - `refused`: the controller answers a refused registration with a `refused` frame.
 * - `unbound`: the controller tells a worker whose binding it ended while the link stays open.
 * - `release`: the worker may hand back jobs it has not started (`release`), when draining.
 * - `outcomes`: jobs carry their try number and timeout; the worker reports how each try ended
 *   (`done` with a result, `fail` with an error) and its progress, and the controller may
 *   `cancel` a job. Offered by a controller that runs a job queue (retries, dead letters).
 * - `heard`: the controller answers a frame it has nothing else to send back for with a `heard`
 *   frame, so the worker's TCP stack hears an acknowledgment at once (a client that leaves
 *   Nagle's algorithm on, as Deno's `WebSocket` does, otherwise holds its next frame until the
 *   controller's delayed ACK: 40 ms on Linux).
 */
export const FEATURES = ["refused", "unbound", "release", "outcomes", "heard"] as const;

/** A protocol feature (see {@linkcode FEATURES}). */
export type Feature = (typeof FEATURES)[number];

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
/** A protocol feature name (see {@linkcode FEATURES}); unknown names are allowed and ignored. */
const feature = v.pipe(v.string(), v.minLength(1), v.maxLength(64));
/** What a peer may announce: at most 32 feature names. */
const features = v.pipe(v.array(feature), v.maxLength(32));
const positiveSeq = v.pipe(v.number(), v.safeInteger(), v.minValue(1), v.maxValue(MAX_SEQ));

// ---------------------------------------------------------------------------------------------
// Wire: worker -> controller

/** A worker endpoint asks to bind (or re-asserts its binding) with a fresh nonce. */
export const RegisterFrameSchema = v.strictObject({
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
  /** Optional features the worker understands (see {@linkcode FEATURES}). */
  features: v.optional(features),
});

/** Demand and cumulative confirmation; `resend` asks for unconfirmed jobs again. */
export const RequestFrameSchema = v.strictObject({
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

/** Cumulative confirmation without new demand; also the idle heartbeat. */
export const AckFrameSchema = v.strictObject({
  type: v.literal("ack"),
  session: id,
  nonce: id,
  confirmed: seq,
});

/**
 * Feature `release`: the worker drains. It confirms through `confirmed`, keeps `(confirmed, upTo]`
 * (the job it is running), hands back every later sequence, and grants nothing more.
 */
export const ReleaseFrameSchema = v.strictObject({
  type: v.literal("release"),
  session: id,
  nonce: id,
  confirmed: seq,
  upTo: seq,
});

/** The largest length of a reported error's name. */
export const MAX_ERROR_NAME = 128;
/** The largest length of a reported error's message. */
export const MAX_ERROR_MESSAGE = 2048;

/** A failed try's error as a worker reports it. */
export const JobErrorSchema = v.strictObject({
  name: v.pipe(v.string(), v.maxLength(MAX_ERROR_NAME)),
  message: v.pipe(v.string(), v.maxLength(MAX_ERROR_MESSAGE)),
});

/**
 * Feature `outcomes`: the try of the job at `seq` succeeded with a result. Confirms cumulatively
 * through `seq`.
 */
export const DoneFrameSchema = v.strictObject({
  type: v.literal("done"),
  session: id,
  nonce: id,
  seq: positiveSeq,
  /** The handler's return value (JSON). */
  result: v.unknown(),
});

/**
 * Feature `outcomes`: the try of the job at `seq` failed (rejected, timed out or cancelled).
 * Confirms cumulatively through `seq - 1`; the job leaves the worker's window.
 */
export const FailFrameSchema = v.strictObject({
  type: v.literal("fail"),
  session: id,
  nonce: id,
  seq: positiveSeq,
  error: JobErrorSchema,
});

/** Feature `outcomes`: the job at `seq` reports progress (any JSON, small). */
export const ProgressFrameSchema = v.strictObject({
  type: v.literal("progress"),
  session: id,
  nonce: id,
  seq: positiveSeq,
  value: v.unknown(),
});

/** Any frame a worker may send. */
export const WorkerFrameSchema = v.variant("type", [
  RegisterFrameSchema,
  RequestFrameSchema,
  AckFrameSchema,
  ReleaseFrameSchema,
  DoneFrameSchema,
  FailFrameSchema,
  ProgressFrameSchema,
]);

// ---------------------------------------------------------------------------------------------
// Wire: controller -> worker

/** The controller accepted a registration. */
export const RegisteredFrameSchema = v.strictObject({
  type: v.literal("registered"),
  session: id,
  /** Identifies the binding; a new value means a fresh sub-flow the worker must adopt. */
  binding: id,
  /** The first sequence of a fresh binding (`confirmed + 1` of the binding). */
  nextSeq: positiveSeq,
  nonce: id,
  /** The features the controller will use with this worker; present when the worker sent some. */
  features: v.optional(features),
});

/** One job inside a {@linkcode JobsFrame}. */
export const WireJobSchema = v.strictObject({
  /** The MessageID: the stable deduplication key. */
  id: id,
  /** The job's JSON value. */
  payload: v.unknown(),
  /** Feature `outcomes`: which try this is (1 for the first). */
  attempt: v.optional(positiveSeq),
  /** Feature `outcomes`: how long the try may take, ms (absent: no limit). */
  timeout: v.optional(v.pipe(v.number(), v.safeInteger(), v.minValue(1))),
  /**
   * Feature `outcomes`: the job may have been running when a worker was lost. The worker sends
   * its confirmation of everything it finished before starting it.
   */
  confirmFirst: v.optional(v.literal(true)),
});

/** Jobs with contiguous sequences `seq`, `seq + 1`, ... in one frame. */
export const JobsFrameSchema = v.strictObject({
  type: v.literal("jobs"),
  session: id,
  seq: positiveSeq,
  jobs: v.pipe(v.array(WireJobSchema), v.minLength(1), v.maxLength(MAX_WINDOW)),
});

/** The controller has a new session (restart or respawn): register again now. */
export const ResetFrameSchema = v.strictObject({
  type: v.literal("reset"),
  session: id,
});

/** Why a registration was refused (feature `refused`). */
export const REFUSAL_REASONS = [
  "stale-incarnation",
  "wrong-producer",
  "identity-mismatch",
  "already-bound",
] as const;

/** Feature `refused`: the registration with this nonce was refused, and why. */
export const RefusedFrameSchema = v.strictObject({
  type: v.literal("refused"),
  nonce: id,
  reason: v.picklist(REFUSAL_REASONS),
  /** Whether registering again can succeed (false: the worker should stop). */
  retry: v.boolean(),
  /** A short explanation. */
  detail: v.pipe(v.string(), v.maxLength(512)),
});

/** Why the controller ended a binding while its link stays open (feature `unbound`). */
export const UNBOUND_REASONS = ["illegal-demand", "illegal-confirmation", "job-age"] as const;

/** Feature `unbound`: the binding ended; its unconfirmed jobs went to other workers. */
export const UnboundFrameSchema = v.strictObject({
  type: v.literal("unbound"),
  session: id,
  binding: id,
  reason: v.picklist(UNBOUND_REASONS),
});

/** Feature `outcomes`: stop the job at `seq` (abort it if running, skip it if not started). */
export const CancelFrameSchema = v.strictObject({
  type: v.literal("cancel"),
  session: id,
  seq: positiveSeq,
});

/** Feature `heard`: the controller got the worker's frames; nothing else to answer. */
export const HeardFrameSchema = v.strictObject({ type: v.literal("heard") });

/** Any frame the controller may send. */
export const ControllerFrameSchema = v.variant("type", [
  RegisteredFrameSchema,
  JobsFrameSchema,
  ResetFrameSchema,
  RefusedFrameSchema,
  UnboundFrameSchema,
  CancelFrameSchema,
  HeardFrameSchema,
]);

// ---------------------------------------------------------------------------------------------
// Producer contract (in process)

/** A grant: the producer answers with exactly one {@linkcode Produced} of 1..`maxJobs` jobs. */
export const RequestNextSchema = v.strictObject({
  session: id,
  token: id,
  /** The most jobs the answering `Produced` may carry (free worker demand, capped). */
  maxJobs: v.pipe(v.number(), v.safeInteger(), v.minValue(1)),
});

/** One produced job. The payload must be JSON-serializable. */
export const ProducedJobSchema = v.strictObject({
  messageId: id,
  payload: v.unknown(),
  /** Optional: which try this is (a job queue's producer knows). */
  attempt: v.optional(positiveSeq),
  /** Optional: how long the try may take, ms (0 = no limit). */
  timeout: v.optional(v.pipe(v.number(), v.safeInteger(), v.minValue(0))),
  /** Optional: workers lost while running it so far (a job queue's producer knows). */
  lost: v.optional(seq),
});

/** The answer to a grant: one job, or a batch of jobs each with its own MessageID. */
export const ProducedSchema = v.union([
  // The batch first: a union tries its members in order, and batches are the common case.
  v.strictObject({
    session: id,
    token: id,
    jobs: v.pipe(v.array(ProducedJobSchema), v.minLength(1)),
  }),
  v.strictObject({ session: id, token: id, messageId: id, payload: v.unknown() }),
]);

/** The jobs of a grant are stored: each with its producer-visible store sequence. */
export const StoredSchema = v.strictObject({
  session: id,
  token: id,
  jobs: v.array(v.strictObject({ messageId: id, seq: positiveSeq })),
});

/** The producer has durably removed the stored jobs from its own source. */
export const StoredAckSchema = v.strictObject({ session: id, token: id });

/** The jobs of a grant are accepted into the pool (an extension of the contract). */
export const AcceptedSchema = v.strictObject({ session: id, token: id });

/** A worker confirmed a job; repeats when a requeued job is confirmed again. */
export const DeliveryConfirmedSchema = v.strictObject({
  session: id,
  messageId: id,
  /** The store sequence its `Stored` carried. */
  seq: positiveSeq,
});

// ---------------------------------------------------------------------------------------------
// Public types (each checked below against its schema's inferred output)

/** A worker endpoint asks to bind, or re-asserts its binding, with a fresh nonce. */
export interface RegisterFrame {
  /** The frame type. */
  readonly type: "register";
  /** The producer (flow) name this worker serves. */
  readonly producer: string;
  /** The worker endpoint's stable name: its identity and its binding key. */
  readonly worker: string;
  /** Fresh at every start of the endpoint; a new one replaces the old binding. */
  readonly incarnation: string;
  /** Fresh at every registration attempt; echoed in the ack and carried by request and ack. */
  readonly nonce: string;
  /** The worker's resend interval in ms: it sends at least one frame per interval. */
  readonly resendInterval: number;
  /** Optional features the worker understands (see {@linkcode FEATURES}). */
  readonly features?: readonly string[];
}

/** Demand and cumulative confirmation; `resend` asks for the unconfirmed jobs again. */
export interface RequestFrame {
  /** The frame type. */
  readonly type: "request";
  /** The controller session the worker adopted. */
  readonly session: string;
  /** The nonce of the worker's latest registration. */
  readonly nonce: string;
  /** Every sequence up to and including this one is confirmed. */
  readonly confirmed: number;
  /** The worker accepts sequences up to and including this one. */
  readonly upTo: number;
  /** Resend every unconfirmed sequence in `(confirmed, upTo]`. */
  readonly resend: boolean;
}

/** Cumulative confirmation without new demand; also the idle heartbeat. */
export interface AckFrame {
  /** The frame type. */
  readonly type: "ack";
  /** The controller session the worker adopted. */
  readonly session: string;
  /** The nonce of the worker's latest registration. */
  readonly nonce: string;
  /** Every sequence up to and including this one is confirmed. */
  readonly confirmed: number;
}

/**
 * Feature `release`: the worker drains. It confirms through `confirmed`, keeps
 * `(confirmed, upTo]` (the job it is running), and hands back every later sequence.
 */
export interface ReleaseFrame {
  /** The frame type. */
  readonly type: "release";
  /** The controller session the worker adopted. */
  readonly session: string;
  /** The nonce of the worker's latest registration. */
  readonly nonce: string;
  /** Every sequence up to and including this one is confirmed. */
  readonly confirmed: number;
  /** The worker keeps the sequences up to and including this one; later ones go back. */
  readonly upTo: number;
}

/** A failed try's error as a worker reports it. */
export interface WireJobError {
  /** The error's name (at most 128 characters). */
  readonly name: string;
  /** Its message (at most 2,048 characters). */
  readonly message: string;
}

/** Feature `outcomes`: the try at `seq` succeeded with a result; confirms through `seq`. */
export interface DoneFrame {
  /** The frame type. */
  readonly type: "done";
  /** The controller session the worker adopted. */
  readonly session: string;
  /** The nonce of the worker's latest registration. */
  readonly nonce: string;
  /** The job's sequence. */
  readonly seq: number;
  /** The handler's return value. */
  readonly result: unknown;
}

/** Feature `outcomes`: the try at `seq` failed; confirms through `seq - 1`. */
export interface FailFrame {
  /** The frame type. */
  readonly type: "fail";
  /** The controller session the worker adopted. */
  readonly session: string;
  /** The nonce of the worker's latest registration. */
  readonly nonce: string;
  /** The job's sequence. */
  readonly seq: number;
  /** Why. */
  readonly error: WireJobError;
}

/** Feature `outcomes`: progress of the job at `seq`. */
export interface ProgressFrame {
  /** The frame type. */
  readonly type: "progress";
  /** The controller session the worker adopted. */
  readonly session: string;
  /** The nonce of the worker's latest registration. */
  readonly nonce: string;
  /** The job's sequence. */
  readonly seq: number;
  /** Any small JSON value. */
  readonly value: unknown;
}

/** Any frame a worker may send. */
export type WorkerFrame =
  | RegisterFrame
  | RequestFrame
  | AckFrame
  | ReleaseFrame
  | DoneFrame
  | FailFrame
  | ProgressFrame;

/** The controller accepted a registration. */
export interface RegisteredFrame {
  /** The frame type. */
  readonly type: "registered";
  /** The controller session. */
  readonly session: string;
  /** Identifies the binding; a new value means a fresh sub-flow the worker must adopt. */
  readonly binding: string;
  /** The first sequence of a fresh binding (`confirmed + 1` of the binding). */
  readonly nextSeq: number;
  /** The registration's nonce, echoed. */
  readonly nonce: string;
  /** The features the controller will use with this worker; present when the worker sent some. */
  readonly features?: readonly string[];
}

/** One job inside a {@linkcode JobsFrame}. */
export interface WireJob {
  /** The MessageID: the stable deduplication key. */
  readonly id: string;
  /** The job's JSON value. */
  readonly payload: unknown;
  /** Feature `outcomes`: which try this is (1 for the first). */
  readonly attempt?: number;
  /** Feature `outcomes`: how long the try may take, ms (absent: no limit). */
  readonly timeout?: number;
  /** Feature `outcomes`: confirm everything finished before starting this job. */
  readonly confirmFirst?: true;
}

/** Jobs with contiguous sequences `seq`, `seq + 1`, ... in one frame. */
export interface JobsFrame {
  /** The frame type. */
  readonly type: "jobs";
  /** The controller session. */
  readonly session: string;
  /** The sequence of the first job. */
  readonly seq: number;
  /** 1..10,000 jobs. */
  readonly jobs: readonly WireJob[];
}

/** The controller has a new session (restart or respawn): register again now. */
export interface ResetFrame {
  /** The frame type. */
  readonly type: "reset";
  /** The new session. */
  readonly session: string;
}

/** Why a registration was refused. */
export type RefusalReason = (typeof REFUSAL_REASONS)[number];

/** Feature `refused`: the registration with this nonce was refused, and why. */
export interface RefusedFrame {
  /** The frame type. */
  readonly type: "refused";
  /** The refused registration's nonce. */
  readonly nonce: string;
  /** Why. */
  readonly reason: RefusalReason;
  /** Whether registering again can succeed (false: the worker should stop). */
  readonly retry: boolean;
  /** A short explanation. */
  readonly detail: string;
}

/** Feature `unbound`: the binding ended; its unconfirmed jobs went to other workers. */
export interface UnboundFrame {
  /** The frame type. */
  readonly type: "unbound";
  /** The controller session. */
  readonly session: string;
  /** The binding that ended. */
  readonly binding: string;
  /** Why it ended. */
  readonly reason: (typeof UNBOUND_REASONS)[number];
}

/** Feature `outcomes`: stop the job at `seq`. */
export interface CancelFrame {
  /** The frame type. */
  readonly type: "cancel";
  /** The controller session. */
  readonly session: string;
  /** The job's sequence in the worker's sub-flow. */
  readonly seq: number;
}

/** Feature `heard`: the controller got the worker's frames and has nothing else to send back. */
export interface HeardFrame {
  /** The frame type. */
  readonly type: "heard";
}

/** Any frame the controller may send. */
export type ControllerFrame =
  | RegisteredFrame
  | JobsFrame
  | ResetFrame
  | RefusedFrame
  | UnboundFrame
  | CancelFrame
  | HeardFrame;

/** A grant: answer with exactly one {@linkcode Produced} of 1..`maxJobs` jobs. */
export interface RequestNext {
  /** The controller session. */
  readonly session: string;
  /** Identifies this grant; a retransmitted grant has the same token. */
  readonly token: string;
  /** The most jobs the answering `Produced` may carry (free worker demand, capped). */
  readonly maxJobs: number;
}

/** One produced job. The payload must be JSON-serializable. */
export interface ProducedJob {
  /** The stable deduplication key. */
  readonly messageId: string;
  /** The job's value. */
  readonly payload: unknown;
  /** Optional: which try this is (a job queue's producer knows). */
  readonly attempt?: number;
  /** Optional: how long the try may take, ms (0 = no limit). */
  readonly timeout?: number;
  /** Optional: workers lost while running it so far (a job queue's producer knows). */
  readonly lost?: number;
}

/** The answer to a grant: a batch of jobs each with its own MessageID, or one job. */
export type Produced =
  | {
    /** Copied from the grant. */
    readonly session: string;
    /** Copied from the grant. */
    readonly token: string;
    /** 1..`maxJobs` jobs with distinct MessageIDs. */
    readonly jobs: readonly ProducedJob[];
  }
  | {
    /** Copied from the grant. */
    readonly session: string;
    /** Copied from the grant. */
    readonly token: string;
    /** The job's MessageID. */
    readonly messageId: string;
    /** The job's value. */
    readonly payload: unknown;
  };

/** The jobs of a grant are stored, each with its producer-visible store sequence. */
export interface Stored {
  /** The controller session. */
  readonly session: string;
  /** The grant's token. */
  readonly token: string;
  /** In the order they were produced. */
  readonly jobs: readonly { readonly messageId: string; readonly seq: number }[];
}

/** The producer has durably removed the stored jobs from its own source. */
export interface StoredAck {
  /** Copied from `Stored`. */
  readonly session: string;
  /** Copied from `Stored`. */
  readonly token: string;
}

/** The jobs of a grant entered the pending pool (an extension of the contract). */
export interface Accepted {
  /** The controller session. */
  readonly session: string;
  /** The grant's token. */
  readonly token: string;
}

/** A worker confirmed a job; repeats when a job is dispatched and confirmed again. */
export interface DeliveryConfirmed {
  /** The controller session. */
  readonly session: string;
  /** The job's MessageID. */
  readonly messageId: string;
  /** The store sequence its `Stored` carried. */
  readonly seq: number;
}

// Each public type equals its schema's inferred output: drift is a compile error.
type DeepReadonly<T> = T extends readonly (infer U)[] ? readonly DeepReadonly<U>[]
  : T extends object ? { readonly [K in keyof T]: DeepReadonly<T[K]> }
  : T;
type Same<A, B> = [DeepReadonly<A>] extends [DeepReadonly<B>]
  ? ([DeepReadonly<B>] extends [DeepReadonly<A>] ? true : false)
  : false;
type Checks = [
  Same<RegisterFrame, v.InferOutput<typeof RegisterFrameSchema>>,
  Same<RequestFrame, v.InferOutput<typeof RequestFrameSchema>>,
  Same<AckFrame, v.InferOutput<typeof AckFrameSchema>>,
  Same<ReleaseFrame, v.InferOutput<typeof ReleaseFrameSchema>>,
  Same<DoneFrame, v.InferOutput<typeof DoneFrameSchema>>,
  Same<FailFrame, v.InferOutput<typeof FailFrameSchema>>,
  Same<ProgressFrame, v.InferOutput<typeof ProgressFrameSchema>>,
  Same<CancelFrame, v.InferOutput<typeof CancelFrameSchema>>,
  Same<RefusedFrame, v.InferOutput<typeof RefusedFrameSchema>>,
  Same<UnboundFrame, v.InferOutput<typeof UnboundFrameSchema>>,
  Same<HeardFrame, v.InferOutput<typeof HeardFrameSchema>>,
  Same<WorkerFrame, v.InferOutput<typeof WorkerFrameSchema>>,
  Same<RegisteredFrame, v.InferOutput<typeof RegisteredFrameSchema>>,
  Same<WireJob, v.InferOutput<typeof WireJobSchema>>,
  Same<JobsFrame, v.InferOutput<typeof JobsFrameSchema>>,
  Same<ResetFrame, v.InferOutput<typeof ResetFrameSchema>>,
  Same<ControllerFrame, v.InferOutput<typeof ControllerFrameSchema>>,
  Same<RequestNext, v.InferOutput<typeof RequestNextSchema>>,
  Same<ProducedJob, v.InferOutput<typeof ProducedJobSchema>>,
  Same<Produced, v.InferOutput<typeof ProducedSchema>>,
  Same<Stored, v.InferOutput<typeof StoredSchema>>,
  Same<StoredAck, v.InferOutput<typeof StoredAckSchema>>,
  Same<Accepted, v.InferOutput<typeof AcceptedSchema>>,
  Same<DeliveryConfirmed, v.InferOutput<typeof DeliveryConfirmedSchema>>,
];
const schemasMatchTypes: Checks = [
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
  true,
];
void schemasMatchTypes;
