/**
 * Keys and values of the Deno KV job store under a prefix `P`:
 *
 * ```text
 * [...P, "epoch"]             {"epoch":n}                           the fence, written by load
 * [...P, "meta"]              {"v":2,"seq":n}                       format, append cursor
 * [...P, "job", slot]         {"r":record,"o":order,"a":try,"p":payload}     one per live job
 * [...P, "payload", slot, n]  payload bytes, n = 0, 1, ...          a live job's large payload
 * [...P, "try", seq]          {"jobs":[[slot,seq,attempt,at],...]}  tries one commit started
 * [...P, "finished", n]       {"jobs":[{"r":record},...]}           jobs one commit finished
 * [...P, "done", id]          {"r":record}                          one finished job (v1)
 * ```
 *
 * A job's `slot` is a number the journal gives it when it first writes the job, counting up, so
 * the keys one commit writes sit next to each other. Keyed by MessageID (random, as UUIDs are),
 * a commit of 100 jobs touched a hundred places in KV's B-tree and cost about six times as much.
 * A payload goes in the job's value (`p`, the JSON text as a string) while that value stays
 * within {@linkcode INLINE_BYTES}; a larger one is kept in parts of its own.
 *
 * A try started from the backlog is not a rewrite of its job: the commit that starts tries writes
 * one `try` record (keyed by its first sequence) listing them. At load, a listed job whose record
 * is still queued with `attempt - 1` tries is active: `startTry(record, at)`, accepted, under
 * `seq`. Any later write of the job takes precedence; the record goes when none of its jobs is
 * still in that try.
 *
 * The jobs a commit finishes (completed, cancelled) leave their live keys for one `finished`
 * record (more when they do not fit one value), numbered in commit order and expiring after the
 * retention. The store forgets a finished job (its count-based retention) without a write: the
 * last of a record's jobs to be forgotten deletes the record. At load, a MessageID's latest
 * record wins (a job run again after it finished is in a later one).
 *
 * Format versions: 1 keyed everything by MessageID (a string where the slot is), each finished
 * job under `"done"`. Version 2 reads such a store as it is, its jobs keep their keys, and it
 * marks the store version 2 with its first write, after which a version-1 reader refuses it by
 * its meta record.
 *
 * Values are `Uint8Array` JSON (readable from every runtime); a payload is split into parts of
 * at most 60 KiB (a value holds 64 KiB).
 *
 * @module
 */

import type { Active, JournalEntry } from "../job_store_engine.ts";
import type { JobRecord } from "../../lifecycle/job_record.ts";
import type { KvKey } from "../../queue/deno_kv/port.ts";
import { QueueConflictError } from "../../queue/work_queue.ts";

/** Where a job's keys are: its slot, or its MessageID in a store written by version 1. */
export type JobSlot = number | string;

/** The format version this code writes; it reads 1 and 2. */
export const FORMAT_VERSION = 2;

/** A live job's value holds its payload up to this many bytes (a value holds 64 KiB). */
export const INLINE_BYTES = 16 * 1024;

/** Bytes per payload part. */
export const PART_BYTES = 60 * 1024;
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** The keys of one job store. */
export class JobStoreKeys {
  /** The fencing key. */
  readonly epoch: KvKey;
  /** The append cursor's key. */
  readonly meta: KvKey;
  /** List prefix of the job records. */
  readonly jobs: KvKey;
  /** List prefix of the payload parts. */
  readonly payloads: KvKey;
  /** List prefix of the finished jobs' own records (format version 1). */
  readonly finished: KvKey;
  /** List prefix of the records of finished jobs. */
  readonly groups: KvKey;
  /** List prefix of the records of started tries. */
  readonly tries: KvKey;

  /** Keys under `prefix`. */
  constructor(readonly prefix: KvKey) {
    this.epoch = [...prefix, "epoch"];
    this.meta = [...prefix, "meta"];
    this.jobs = [...prefix, "job"];
    this.payloads = [...prefix, "payload"];
    this.finished = [...prefix, "done"];
    this.tries = [...prefix, "try"];
    this.groups = [...prefix, "finished"];
  }

  /** Record `n` of finished jobs. */
  group(n: number): KvKey {
    return [...this.groups, n];
  }

  /** The record of the tries a commit started, the first under sequence `seq`. */
  triesFrom(seq: number): KvKey {
    return [...this.tries, seq];
  }

  /** A finished job's own record (format version 1). */
  done(slot: JobSlot): KvKey {
    return [...this.finished, slot];
  }

  /** A job's record. */
  job(slot: JobSlot): KvKey {
    return [...this.jobs, slot];
  }

  /** Part `n` of a job's payload. */
  payload(slot: JobSlot, n: number): KvKey {
    return [...this.payloads, slot, n];
  }
}

/** Encode a job's entry, with `payload` in it when one is given. */
export function encodeEntry(entry: JournalEntry, payload?: string): Uint8Array {
  return encoder.encode(JSON.stringify({
    r: entry.record,
    ...(entry.order === undefined ? {} : { o: entry.order }),
    ...(entry.active ? { a: entry.active } : {}),
    ...(payload === undefined ? {} : { p: payload }),
  }));
}

/**
 * Decode a job's entry (its record must name the MessageID `id` when one is given); throws
 * `QueueConflictError` for a malformed one.
 */
export function decodeEntry(value: unknown, where: string, id?: string): JournalEntry {
  return checkEntry(parse(value, `the record of ${where}`), where, id);
}

/** A parsed entry checked (its record naming `id` when one is given). */
function checkEntry(value: unknown, where: string, id?: string): JournalEntry {
  const parsed = (typeof value === "object" && value !== null ? value : {}) as {
    r?: JobRecord;
    o?: number;
    a?: Active;
    p?: unknown;
  };
  const record = parsed.r;
  if (
    typeof record !== "object" || record === null || typeof record.id !== "string" ||
    (id !== undefined && record.id !== id) || typeof record.state !== "string" ||
    !Number.isSafeInteger(record.attempts)
  ) {
    throw malformed(`the record of ${where} is not a job record`);
  }
  if (parsed.p !== undefined && typeof parsed.p !== "string") {
    throw malformed(`the payload in the record of ${where} is not text`);
  }
  return {
    record,
    ...(Number.isSafeInteger(parsed.o) ? { order: parsed.o } : {}),
    ...(parsed.a && Number.isSafeInteger(parsed.a.seq) ? { active: { ...parsed.a } } : {}),
    ...(parsed.p === undefined ? {} : { payload: parsed.p }),
  };
}

/** A record of finished jobs holds up to this many bytes of them (a value holds 64 KiB). */
export const GROUP_BYTES = 60 * 1024;

/** A finished job's entry (JSON text) as it goes into a record of finished jobs. */
export function encodeFinished(entry: JournalEntry): string {
  return JSON.stringify({ r: entry.record });
}

/** A record of finished jobs from their entries' JSON texts. */
export function encodeGroup(entries: readonly string[]): Uint8Array {
  return encoder.encode(`{"jobs":[${entries.join(",")}]}`);
}

/** Decode a record of finished jobs; throws `QueueConflictError` for a malformed one. */
export function decodeGroup(value: unknown, where: string): JournalEntry[] {
  const { jobs } = parse(value, where);
  if (!Array.isArray(jobs)) throw malformed(`${where} is not a list of jobs`);
  return jobs.map((job, i) => checkEntry(job, `${where}, job ${i}`));
}

/** One try a commit started: the job's slot, its sequence, its attempt number, its start time. */
export type StartedTry = readonly [slot: number, seq: number, attempt: number, at: number];

/** Encode a record of started tries. */
export function encodeTries(tries: readonly StartedTry[]): Uint8Array {
  return encoder.encode(JSON.stringify({ jobs: tries }));
}

/** Decode a record of started tries; throws `QueueConflictError` for a malformed one. */
export function decodeTries(value: unknown, where: string): StartedTry[] {
  const { jobs } = parse(value, where);
  if (
    !Array.isArray(jobs) ||
    !jobs.every((job) =>
      Array.isArray(job) && job.length === 4 && job.every((n) => Number.isSafeInteger(n))
    )
  ) {
    throw malformed(`${where} is not a list of tries`);
  }
  return jobs as StartedTry[];
}

/** Encode the meta record. */
export function encodeMeta(currentSeq: number): Uint8Array {
  return encoder.encode(JSON.stringify({ v: FORMAT_VERSION, seq: currentSeq }));
}

/** Decode the meta record into its format version and the append cursor. */
export function decodeMeta(value: unknown): { version: number; currentSeq: number } {
  const { v, seq } = parse(value, "the meta record") as { v?: number; seq?: number };
  if (Number.isSafeInteger(v) && (v as number) > FORMAT_VERSION) {
    throw new QueueConflictError(
      `Cannot read the job store: a newer workpull wrote it (format version ${v}; this one ` +
        `reads up to ${FORMAT_VERSION})`,
    );
  }
  if ((v !== 1 && v !== 2) || !Number.isSafeInteger(seq) || (seq as number) < 0) {
    throw malformed(`the meta record is ${JSON.stringify({ v, seq })}`);
  }
  return { version: v, currentSeq: seq as number };
}

/** A payload's UTF-8 bytes in parts of at most {@linkcode PART_BYTES}. */
export function splitPayload(payload: string): Uint8Array[] {
  const bytes = encoder.encode(payload);
  const parts: Uint8Array[] = [];
  for (let at = 0; at < bytes.length || parts.length === 0; at += PART_BYTES) {
    parts.push(bytes.subarray(at, at + PART_BYTES));
  }
  return parts;
}

/**
 * Join a payload's parts (in order) back into its text; `fail` makes the error for bytes that
 * are not UTF-8 (the shared store names itself in its own).
 */
export function joinPayload(
  parts: readonly Uint8Array[],
  id: string,
  fail: typeof malformed = malformed,
): string {
  const length = parts.reduce((sum, part) => sum + part.length, 0);
  const bytes = new Uint8Array(length);
  let at = 0;
  for (const part of parts) {
    bytes.set(part, at);
    at += part.length;
  }
  try {
    return decoder.decode(bytes);
  } catch (error) {
    throw fail(`the payload of job ${id} is not UTF-8`, error);
  }
}

/** A stored JSON object (`where` names it in the error `fail` makes otherwise). */
export function parse(
  value: unknown,
  where: string,
  fail: typeof malformed = malformed,
): Record<string, unknown> {
  if (!(value instanceof Uint8Array)) throw fail(`${where} is not bytes`);
  try {
    const parsed = JSON.parse(decoder.decode(value));
    if (typeof parsed === "object" && parsed !== null && !Array.isArray(parsed)) return parsed;
  } catch (error) {
    throw fail(`${where} is not JSON`, error);
  }
  throw fail(`${where} is not a JSON object`);
}

/** The conflict reported for malformed persisted state. */
export function malformed(detail: string, cause?: unknown): QueueConflictError {
  return new QueueConflictError(`Cannot read the job store: malformed persisted state: ${detail}`, {
    cause,
  });
}
