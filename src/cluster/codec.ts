/**
 * The values of a shared flow on Deno KV: `Uint8Array` JSON (readable from every runtime), and
 * `KvU64` for the counters (summed without a read, so concurrent writers never conflict on them).
 *
 * A live job's entry (at its record key, and copied at its ready key while it is queued); a
 * finished one keeps only `{"r":record}` at its record key:
 *
 * ```text
 * {"r":record,"o":order,"p":"payload" | "n":parts,"w":owner,"t":try,"l":lost}
 * ```
 *
 * - `p` holds a payload of at most {@linkcode INLINE_BYTES} inline (a claim then needs no other
 *   read); a larger one is split into `n` parts of {@linkcode PART_BYTES} under its own keys;
 * - `w` names the instance holding the job (claimed or trying), absent while it is queued or dead;
 * - `t` is the try in progress at that instance: its sequence, whether it was accepted and
 *   confirmed, the confirmed outcome (until the accept lets it apply), and the state and start
 *   time the try replaced (so a try that an instance loss interrupted can be undone);
 * - `l` counts the instances lost while the job was accepted at them.
 *
 * A malformed value is a `QueueConflictError`, like in the single-instance stores.
 *
 * @module
 */

import type { JobOutcome, JobRecord } from "../lifecycle/job_record.ts";
import { QueueConflictError } from "../queue/work_queue.ts";
import {
  joinPayload as joinParts,
  parse as parseObject,
  PART_BYTES,
  splitPayload,
} from "../backlog/deno_kv/records.ts";

export { PART_BYTES, splitPayload };

/** Payloads up to this many UTF-8 bytes are kept inline in the job's entry. */
export const INLINE_BYTES = 8 * 1024;

const encoder = new TextEncoder();

/** The try in progress at the instance holding a job. */
export interface Trial {
  /** Its store sequence at that instance. */
  readonly seq: number;
  /** The accept landed. */
  readonly accepted: boolean;
  /** The confirmation landed. */
  readonly confirmed: boolean;
  /** The confirmed try's outcome, until the accept lets it apply. */
  readonly outcome?: JobOutcome;
  /** The state the try replaced. */
  readonly from: "waiting" | "failed";
  /** The start time the try replaced, if the job had run before. */
  readonly startedBefore?: number;
}

/** A live job as a shared flow keeps it. */
export interface Entry {
  /** The record. */
  readonly record: JobRecord;
  /** Submission order among jobs due at the same time (kept across takeovers). */
  readonly order: number;
  /** The payload, when inline. */
  readonly payload?: string;
  /** How many parts the payload has, when not inline. */
  readonly parts?: number;
  /** The instance holding it (claimed or trying). */
  readonly owner?: string;
  /** Its try in progress at the owner. */
  readonly trial?: Trial;
  /** Instances lost while it was accepted at them. */
  readonly lost?: number;
}

/** An instance's lease: when it lapses and what the instance reports about itself. */
export interface Lease {
  /** The instance's id. */
  readonly id: string;
  /** Its current epoch. */
  readonly epoch: number;
  /** Wall-clock ms after which the lease has lapsed (on the writer's clock). */
  readonly expiresAt: number;
  /** When it was last renewed, wall-clock ms. */
  readonly heartbeat: number;
  /** When the instance loaded, wall-clock ms. */
  readonly startedAt: number;
  /** Where the instance serves (as configured), if given. */
  readonly address?: string;
  /** Connected worker endpoints. */
  readonly workers: number;
  /** Jobs at those workers, not yet confirmed. */
  readonly inFlight: number;
  /** Jobs in the controller's pool, waiting for a worker. */
  readonly pending: number;
  /** Jobs the instance holds (claimed or trying). */
  readonly claimed: number;
  /** The survivor taking the instance over (its lease lapsed), while it does. */
  readonly takenOverBy?: string;
}

/** Encode a live job's entry. */
export function encodeEntry(entry: Entry): Uint8Array {
  const trial = entry.trial;
  return encoder.encode(JSON.stringify({
    r: entry.record,
    o: entry.order,
    ...(entry.payload !== undefined ? { p: entry.payload } : { n: entry.parts ?? 0 }),
    ...(entry.owner === undefined ? {} : { w: entry.owner }),
    ...(trial === undefined ? {} : {
      t: {
        s: trial.seq,
        a: trial.accepted,
        c: trial.confirmed,
        f: trial.from,
        ...(trial.outcome === undefined ? {} : { x: trial.outcome }),
        ...(trial.startedBefore === undefined ? {} : { b: trial.startedBefore }),
      },
    }),
    ...(entry.lost ? { l: entry.lost } : {}),
  }));
}

/** What a record key holds: a live job's entry, or a finished job's record. */
export type Stored =
  | { readonly entry: Entry; readonly finished?: undefined }
  | { readonly finished: JobRecord; readonly entry?: undefined };

/** Decode what a record key holds; throws `QueueConflictError` for a malformed value. */
export function decodeStored(value: unknown, id: string): Stored {
  const parsed = parse(value, `the record of job ${id}`);
  if ("o" in parsed) return { entry: entryOf(parsed, id) };
  const record = parsed.r as JobRecord | undefined;
  if (
    typeof record !== "object" || record === null || record.id !== id ||
    (record.state !== "completed" && record.state !== "cancelled")
  ) {
    throw malformed(`the record of job ${id} is not a job record`);
  }
  return { finished: record };
}

/** Decode a live job's entry; throws `QueueConflictError` for a malformed one. */
export function decodeEntry(value: unknown, id: string): Entry {
  return entryOf(parse(value, `the entry of job ${id}`), id);
}

function entryOf(parsed: Record<string, unknown>, id: string): Entry {
  const record = parsed.r as JobRecord | undefined;
  if (
    typeof record !== "object" || record === null || record.id !== id ||
    typeof record.state !== "string" || !Number.isSafeInteger(record.attempts) ||
    typeof record.priority !== "number" || typeof record.runAt !== "number" ||
    typeof parsed.o !== "number" ||
    (typeof parsed.p !== "string" && !Number.isSafeInteger(parsed.n))
  ) {
    throw malformed(`the entry of job ${id} is not a job entry`);
  }
  const t = parsed.t as Record<string, unknown> | undefined;
  let trial: Trial | undefined;
  if (t !== undefined) {
    if (
      typeof t !== "object" || t === null || !Number.isSafeInteger(t.s) ||
      typeof t.a !== "boolean" || typeof t.c !== "boolean" ||
      (t.f !== "waiting" && t.f !== "failed")
    ) {
      throw malformed(`the try of job ${id} is malformed`);
    }
    trial = {
      seq: t.s as number,
      accepted: t.a,
      confirmed: t.c,
      from: t.f,
      ...(t.x === undefined ? {} : { outcome: t.x as JobOutcome }),
      ...(typeof t.b === "number" ? { startedBefore: t.b } : {}),
    };
  }
  return {
    record,
    order: parsed.o,
    ...(typeof parsed.p === "string" ? { payload: parsed.p } : { parts: parsed.n as number }),
    ...(typeof parsed.w === "string" ? { owner: parsed.w } : {}),
    ...(trial ? { trial } : {}),
    ...(Number.isSafeInteger(parsed.l) && (parsed.l as number) > 0
      ? { lost: parsed.l as number }
      : {}),
  };
}

/** Encode a finished job's record. */
export function encodeFinished(record: JobRecord): Uint8Array {
  return encoder.encode(JSON.stringify({ r: record }));
}

/** Encode an epoch (a fence's value). */
export function encodeFence(epoch: number): Uint8Array {
  return encoder.encode(JSON.stringify({ epoch }));
}

/** Decode a fence's epoch. */
export function decodeFence(value: unknown): number {
  const { epoch } = parse(value, "a fence");
  if (!Number.isSafeInteger(epoch) || (epoch as number) < 1) {
    throw malformed(`a fence holds epoch ${JSON.stringify(epoch)}`);
  }
  return epoch as number;
}

/** Encode an instance's append cursor. */
export function encodeCursor(seq: number): Uint8Array {
  return encoder.encode(JSON.stringify({ seq }));
}

/** Decode an instance's append cursor. */
export function decodeCursor(value: unknown): number {
  const { seq } = parse(value, "a cursor");
  if (!Number.isSafeInteger(seq) || (seq as number) < 0) {
    throw malformed(`a cursor holds ${JSON.stringify(seq)}`);
  }
  return seq as number;
}

/** Encode a lease. */
export function encodeLease(lease: Lease): Uint8Array {
  return encoder.encode(JSON.stringify(lease));
}

/** Decode a lease, or undefined when it is not one (a registry skips it). */
export function decodeLease(value: unknown): Lease | undefined {
  try {
    const lease = parse(value, "a lease") as unknown as Lease;
    const numbers = [
      lease.epoch,
      lease.expiresAt,
      lease.heartbeat,
      lease.startedAt,
      lease.workers,
      lease.inFlight,
      lease.pending,
      lease.claimed,
    ];
    if (typeof lease.id !== "string" || !numbers.every((n) => typeof n === "number")) {
      return undefined;
    }
    return lease;
  } catch {
    return undefined;
  }
}

/** A counter's value (a `KvU64` summed with wrapping negative deltas), as a signed number. */
export function decodeCounter(value: unknown): number {
  if (value === null || value === undefined) return 0;
  const raw = (value as { value?: unknown }).value;
  if (typeof raw !== "bigint") throw malformed("a counter is not a KvU64");
  return Number(BigInt.asIntN(64, raw));
}

/** A signed delta as the unsigned 64-bit addend that `sum` wraps into a subtraction. */
export function counterAddend(delta: number): bigint {
  return BigInt.asUintN(64, BigInt(delta));
}

/** Join a payload's parts, as read (in order), back into its text. */
export function joinPayload(parts: readonly unknown[], id: string): string {
  if (!parts.every((part) => part instanceof Uint8Array)) {
    throw malformed(`the payload of job ${id} has a missing or malformed part`);
  }
  return joinParts(parts as Uint8Array[], id, malformed);
}

/** UTF-8 length of a string. */
export function utf8Bytes(text: string): number {
  return encoder.encode(text).length;
}

function parse(value: unknown, where: string): Record<string, unknown> {
  return parseObject(value, where, malformed);
}

/** The conflict reported for malformed persisted state. */
export function malformed(detail: string, cause?: unknown): QueueConflictError {
  return new QueueConflictError(
    `Cannot read the shared job store: malformed persisted state: ${detail}`,
    { cause },
  );
}
