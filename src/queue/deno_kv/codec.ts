/**
 * The value formats of the Deno KV work queue. Every value is a `Uint8Array`:
 *
 * - epoch record: JSON `{"epoch":n}`;
 * - meta record: JSON `{"version":2,"currentSeq":n}`;
 * - accepted record: JSON `{"last":n}`, the last sequence of a run of accepted jobs whose first
 *   sequence is in its key;
 * - flags record: JSON `{"accepted":a,"confirmed":c}` with exactly one of them true;
 * - job record: a JSON header line `{"v":1,"id":idBytes,"len":payloadBytes,"parts":n}` and `\n`,
 *   then the MessageID's UTF-8 bytes, then the first payload bytes;
 * - part record: the next up-to-64-KiB slice of the payload's UTF-8 bytes;
 * - completed record: the jobs one commit completed: a JSON header line
 *   `{"seq":[s1,...],"len":[b1,...]}` and `\n`, then their MessageIDs' UTF-8 bytes back to back
 *   (raw, so its size is exactly known);
 * - done record (format version 1, read only): one completed job: a JSON header line `{"seq":n}`
 *   and `\n`, then the MessageID's UTF-8 bytes.
 *
 * Decoders throw {@linkcode QueueConflictError} for anything malformed.
 *
 * Format versions: 1 kept acceptance in flags records only and a done record per completed job;
 * 2 writes accepted records and completed records instead. Version
 * 2 reads a version-1 store as it is and marks it version 2 with its first write, after which a
 * version-1 reader refuses the store (its format check) instead of missing accepted jobs.
 *
 * @module
 */

import { QueueConflictError } from "../work_queue.ts";
import { KV_LIMITS } from "./port.ts";

/**
 * Size bounds of the formats: every JSON record and the job header line (with its `\n`) fit in
 * `recordMaxBytes`; a MessageID is at most `maxMessageIdBytes`.
 *
 * @example
 * ```ts
 * import { RECORD_BOUNDS } from "./codec.ts";
 * console.assert(RECORD_BOUNDS.maxMessageIdBytes === 1024);
 * ```
 */
export const RECORD_BOUNDS = { recordMaxBytes: 128, maxMessageIdBytes: 1_024 } as const;

const FORMAT_VERSION = 2;
const NEWLINE = 0x0a;
const encoder = new TextEncoder();
const decoder = new TextDecoder("utf-8", { fatal: true });

/** The flags of a retained job. */
export interface JobFlags {
  /** The producer removed the job from its recoverable source. */
  readonly accepted: boolean;
  /** A worker completed the job. */
  readonly confirmed: boolean;
}

/** A job record decoded from its `job` key, before its continuation parts are joined. */
export interface DecodedJob {
  /** The store sequence (from the key). */
  readonly seq: number;
  /** The MessageID. */
  readonly messageId: string;
  /** The payload's total UTF-8 length. */
  readonly payloadBytes: number;
  /** How many `part` keys continue the payload. */
  readonly parts: number;
  /** The payload bytes held in the job record itself. */
  readonly head: Uint8Array;
}

/** A job encoded for writing: the `job` value and its continuation parts. */
export interface EncodedJob {
  /** The value of the `job` key. */
  readonly record: Uint8Array;
  /** Values of `part` keys 1, 2, ... */
  readonly parts: readonly Uint8Array[];
}

/**
 * Payload bytes that fit in a job record beside its header and a MessageID of this length.
 *
 * @example
 * ```ts
 * import { headCapacity } from "./codec.ts";
 * console.assert(headCapacity(1024) === 65_536 - 128 - 1024);
 * ```
 */
export function headCapacity(messageIdBytes: number): number {
  return KV_LIMITS.maxValueBytes - RECORD_BOUNDS.recordMaxBytes - messageIdBytes;
}

/**
 * How many continuation parts a job of these sizes needs.
 *
 * @example
 * ```ts
 * import { partsFor } from "./codec.ts";
 * console.assert(partsFor(3, 100) === 0 && partsFor(3, 300_000) === 4);
 * ```
 */
export function partsFor(messageIdBytes: number, payloadBytes: number): number {
  const inRecord = headCapacity(messageIdBytes);
  return payloadBytes <= inRecord
    ? 0
    : Math.ceil((payloadBytes - inRecord) / KV_LIMITS.maxValueBytes);
}

/**
 * Encodes a job from its text, given the UTF-8 lengths of both (as `prepareJob` measured them):
 * the same bytes as {@linkcode encodeJob}, with a single encoding for a job that needs no
 * continuation parts.
 *
 * @example
 * ```ts
 * import { decodeJob, encodeJobText } from "./codec.ts";
 * console.assert(decodeJob(encodeJobText("a", 1, '"hé"', 5).record, 1).payloadBytes === 5);
 * ```
 */
export function encodeJobText(
  messageId: string,
  messageIdBytes: number,
  payload: string,
  payloadBytes: number,
): EncodedJob {
  const parts = partsFor(messageIdBytes, payloadBytes);
  if (parts > 0) return encodeJob(encoder.encode(messageId), encoder.encode(payload));
  return {
    record: encoder.encode(headerLine(messageIdBytes, payloadBytes, 0) + messageId + payload),
    parts: [],
  };
}

/**
 * Encodes a job: its record and continuation parts.
 *
 * @example Round-trip a job
 * ```ts
 * import { decodeJob, encodeJob, joinPayload } from "./codec.ts";
 *
 * const bytes = (text: string) => new TextEncoder().encode(text);
 * const job = encodeJob(bytes("a"), bytes('"hello"'));
 * console.assert(joinPayload(decodeJob(job.record, 1), job.parts) === '"hello"');
 * ```
 */
export function encodeJob(messageId: Uint8Array, payload: Uint8Array): EncodedJob {
  const parts = partsFor(messageId.length, payload.length);
  const header = encoder.encode(headerLine(messageId.length, payload.length, parts));
  const headLength = Math.min(payload.length, headCapacity(messageId.length));
  const record = new Uint8Array(header.length + messageId.length + headLength);
  record.set(header);
  record.set(messageId, header.length);
  record.set(payload.subarray(0, headLength), header.length + messageId.length);
  const rest: Uint8Array[] = [];
  for (let at = headLength; at < payload.length; at += KV_LIMITS.maxValueBytes) {
    rest.push(payload.subarray(at, at + KV_LIMITS.maxValueBytes));
  }
  return { record, parts: rest };
}

/** A job record's header line: ASCII JSON and its `\n`. */
function headerLine(messageIdBytes: number, payloadBytes: number, parts: number): string {
  return `${JSON.stringify({ v: FORMAT_VERSION, id: messageIdBytes, len: payloadBytes, parts })}\n`;
}

/**
 * Decodes a job record (without its parts).
 *
 * @example
 * ```ts
 * import { decodeJob, encodeJob } from "./codec.ts";
 *
 * const record = encodeJob(new TextEncoder().encode("a"), new TextEncoder().encode("1")).record;
 * console.assert(decodeJob(record, 5).messageId === "a");
 * ```
 */
export function decodeJob(value: unknown, seq: number): DecodedJob {
  const where = `job record of seq ${seq}`;
  if (!(value instanceof Uint8Array)) throw malformed(`the ${where} is not bytes`);
  const newline = value.subarray(0, RECORD_BOUNDS.recordMaxBytes).indexOf(NEWLINE);
  if (newline < 0) throw malformed(`the ${where} has no header line`);
  const header = readRecord(value.subarray(0, newline), where);
  const { v, id, len, parts } = header;
  if (
    v !== FORMAT_VERSION || !isPositiveInteger(id) || id > RECORD_BOUNDS.maxMessageIdBytes ||
    !isPositiveInteger(len) || !Number.isSafeInteger(parts) || (parts as number) < 0
  ) {
    throw malformed(`the ${where} has header ${JSON.stringify(header)}`);
  }
  const body = value.subarray(newline + 1);
  const head = body.subarray(id);
  const headExpected = parts === 0 ? len : headCapacity(id);
  if (body.length < id || head.length !== headExpected || head.length > len) {
    throw malformed(`the ${where} holds ${body.length} bytes after its header`);
  }
  const messageId = decodeText(body.subarray(0, id), where);
  if (messageId.trim() === "") throw malformed(`the ${where} has a blank MessageID`);
  return { seq, messageId, payloadBytes: len, parts: parts as number, head };
}

/**
 * Joins a job's payload from its head and its parts, checking they add up.
 *
 * @example
 * ```ts
 * import { decodeJob, encodeJob, joinPayload } from "./codec.ts";
 *
 * const big = JSON.stringify("x".repeat(100_000));
 * const job = encodeJob(new TextEncoder().encode("a"), new TextEncoder().encode(big));
 * console.assert(job.parts.length === 1);
 * console.assert(joinPayload(decodeJob(job.record, 1), job.parts) === big);
 * ```
 */
export function joinPayload(job: DecodedJob, parts: readonly Uint8Array[]): string {
  if (parts.length !== job.parts) {
    throw malformed(`the job at seq ${job.seq} has ${parts.length} of ${job.parts} parts`);
  }
  if (parts.length === 0) return decodeText(job.head, `payload of seq ${job.seq}`);
  const bytes = new Uint8Array(job.payloadBytes);
  bytes.set(job.head);
  let at = job.head.length;
  for (const part of parts) {
    if (part.length === 0 || at + part.length > bytes.length) break;
    bytes.set(part, at);
    at += part.length;
  }
  if (at !== bytes.length) {
    throw malformed(`the payload parts of seq ${job.seq} do not add up to ${job.payloadBytes}`);
  }
  return decodeText(bytes, `payload of seq ${job.seq}`);
}

/**
 * Checks that a part value is bytes.
 *
 * @example
 * ```ts
 * import { checkPart } from "./codec.ts";
 * console.assert(checkPart(new Uint8Array(1), 1).length === 1);
 * ```
 */
export function checkPart(value: unknown, seq: number): Uint8Array {
  if (!(value instanceof Uint8Array)) throw malformed(`a payload part of seq ${seq} is not bytes`);
  return value;
}

/**
 * Encodes the epoch record.
 *
 * @example
 * ```ts
 * import { decodeEpoch, encodeEpoch } from "./codec.ts";
 * console.assert(decodeEpoch(encodeEpoch(3)) === 3);
 * ```
 */
export function encodeEpoch(epoch: number): Uint8Array {
  return encoder.encode(JSON.stringify({ epoch }));
}

/**
 * Decodes the epoch record.
 *
 * @example
 * ```ts
 * import { decodeEpoch } from "./codec.ts";
 * console.assert(decodeEpoch(new TextEncoder().encode('{"epoch":7}')) === 7);
 * ```
 */
export function decodeEpoch(value: unknown): number {
  const epoch = readRecord(value, "epoch record").epoch;
  if (!isPositiveInteger(epoch)) throw malformed(`the epoch record holds epoch ${epoch}`);
  return epoch;
}

/**
 * Encodes the meta record.
 *
 * @example
 * ```ts
 * import { decodeMeta, encodeMeta } from "./codec.ts";
 * console.assert(decodeMeta(encodeMeta(42)) === 42);
 * ```
 */
export function encodeMeta(currentSeq: number): Uint8Array {
  return encoder.encode(JSON.stringify({ version: FORMAT_VERSION, currentSeq }));
}

/**
 * Decodes the meta record (format version 1 or 2) into the append cursor.
 *
 * @example
 * ```ts
 * import { decodeMeta } from "./codec.ts";
 * console.assert(decodeMeta(new TextEncoder().encode('{"version":1,"currentSeq":0}')) === 0);
 * ```
 */
export function decodeMeta(value: unknown): number {
  const record = readRecord(value, "meta record");
  const version = record.version;
  if (Number.isSafeInteger(version) && (version as number) > FORMAT_VERSION) {
    throw new QueueConflictError(
      `Cannot read the queue: a newer workpull wrote it (format version ${version}; this one ` +
        `reads up to ${FORMAT_VERSION})`,
    );
  }
  if (version !== 1 && version !== FORMAT_VERSION) {
    throw malformed(`the meta record has format version ${version}`);
  }
  const seq = record.currentSeq;
  if (!Number.isSafeInteger(seq) || (seq as number) < 0) {
    throw malformed(`the meta record holds currentSeq ${seq}`);
  }
  return seq as number;
}

/** One completed job as a completed record holds it. */
export interface CompletedEntry {
  /** The MessageID. */
  readonly messageId: string;
  /** Its store sequence. */
  readonly seq: number;
}

/**
 * The most a completed record's header takes per job (a sequence up to 2^53, a MessageID length
 * up to 1,024, two commas), and in all (its brackets, keys and `\n`).
 *
 * @example
 * ```ts
 * import { COMPLETED_BOUNDS } from "./codec.ts";
 * console.assert(COMPLETED_BOUNDS.perJob === 22);
 * ```
 */
export const COMPLETED_BOUNDS = { perJob: 22, fixed: 24 } as const;

/**
 * Encodes a completed record; `idBytes` are the MessageIDs' UTF-8 lengths.
 *
 * @example
 * ```ts
 * import { decodeCompleted, encodeCompleted } from "./codec.ts";
 * const record = encodeCompleted([{ messageId: "a", seq: 7 }], [1]);
 * console.assert(decodeCompleted(record)[0].seq === 7);
 * ```
 */
export function encodeCompleted(
  entries: readonly CompletedEntry[],
  idBytes: readonly number[],
): Uint8Array {
  let ids = "";
  const seqs: number[] = new Array(entries.length);
  for (let i = 0; i < entries.length; i++) {
    ids += entries[i].messageId;
    seqs[i] = entries[i].seq;
  }
  // The header is ASCII, so one encoding of the joined text is the header's bytes, then the IDs'.
  return encoder.encode(`{"seq":[${seqs}],"len":[${idBytes}]}\n${ids}`);
}

/**
 * Decodes a completed record.
 *
 * @example
 * ```ts
 * import { decodeCompleted } from "./codec.ts";
 * const value = new TextEncoder().encode('{"seq":[1,2],"len":[1,2]}\nabc');
 * console.assert(decodeCompleted(value)[1].messageId === "bc");
 * ```
 */
export function decodeCompleted(value: unknown): CompletedEntry[] {
  if (!(value instanceof Uint8Array)) throw malformed("a completed record is not bytes");
  const end = value.indexOf(NEWLINE);
  if (end < 0) throw malformed("a completed record has no header line");
  const { seq, len } = readRecord(value.subarray(0, end), "completed record");
  if (!Array.isArray(seq) || !Array.isArray(len) || seq.length !== len.length) {
    throw malformed("a completed record's header does not list its jobs");
  }
  const entries: CompletedEntry[] = [];
  let at = end + 1;
  for (let i = 0; i < seq.length; i++) {
    const bytes = len[i];
    if (!isPositiveInteger(seq[i]) || !isPositiveInteger(bytes) || at + bytes > value.length) {
      throw malformed(`a completed record lists seq ${seq[i]} with ${bytes} bytes`);
    }
    entries.push({
      messageId: decodeText(value.subarray(at, at + bytes), "completed record"),
      seq: seq[i],
    });
    at += bytes;
  }
  if (at !== value.length) throw malformed("a completed record has bytes beyond its jobs");
  return entries;
}

/**
 * Decodes a done record (written by format version 1).
 *
 * @example
 * ```ts
 * import { decodeDone } from "./codec.ts";
 * console.assert(decodeDone(new TextEncoder().encode('{"seq":1}\na')).messageId === "a");
 * ```
 */
export function decodeDone(value: unknown): { readonly messageId: string; readonly seq: number } {
  if (!(value instanceof Uint8Array)) throw malformed("a done record is not bytes");
  const end = value.indexOf(NEWLINE);
  if (end < 0) throw malformed("a done record has no header line");
  const { seq } = readRecord(value.subarray(0, end), "done record");
  const messageId = decodeText(value.subarray(end + 1), "done record");
  if (messageId === "" || !isPositiveInteger(seq)) {
    throw malformed(`a done record holds ${JSON.stringify({ messageId, seq })}`);
  }
  return { messageId, seq };
}

/**
 * Encodes an accepted record: the jobs at its key's sequence through `last` are accepted.
 *
 * @example
 * ```ts
 * import { decodeAccepted, encodeAccepted } from "./codec.ts";
 * console.assert(decodeAccepted(encodeAccepted(9), 5) === 9);
 * ```
 */
export function encodeAccepted(last: number): Uint8Array {
  return encoder.encode(`{"last":${last}}`);
}

/**
 * Decodes the accepted record of the run that starts at `first` into its last sequence.
 *
 * @example
 * ```ts
 * import { decodeAccepted } from "./codec.ts";
 * console.assert(decodeAccepted(new TextEncoder().encode('{"last":3}'), 1) === 3);
 * ```
 */
export function decodeAccepted(value: unknown, first: number): number {
  const { last } = readRecord(value, `accepted record of seq ${first}`);
  if (!Number.isSafeInteger(last) || (last as number) < first) {
    throw malformed(`the accepted record of seq ${first} holds last ${last}`);
  }
  return last as number;
}

/**
 * Encodes a flags record.
 *
 * @example
 * ```ts
 * import { decodeFlags, encodeFlags } from "./codec.ts";
 * console.assert(decodeFlags(encodeFlags({ accepted: true, confirmed: false }), 1).accepted);
 * ```
 */
export function encodeFlags(flags: JobFlags): Uint8Array {
  return FLAGS_RECORDS[Number(flags.accepted) * 2 + Number(flags.confirmed)];
}

/** The four flags records, encoded once (values are handed to commits, which copy them). */
const FLAGS_RECORDS = [false, true].flatMap((accepted) =>
  [false, true].map((confirmed) => encoder.encode(JSON.stringify({ accepted, confirmed })))
);

/**
 * Decodes a flags record: exactly one flag is set (none means no record; both means the job
 * should have been compacted).
 *
 * @example
 * ```ts
 * import { decodeFlags } from "./codec.ts";
 * const value = new TextEncoder().encode('{"accepted":false,"confirmed":true}');
 * console.assert(decodeFlags(value, 1).confirmed);
 * ```
 */
export function decodeFlags(value: unknown, seq: number): JobFlags {
  const { accepted, confirmed } = readRecord(value, `flags record of seq ${seq}`);
  if (typeof accepted !== "boolean" || typeof confirmed !== "boolean" || accepted === confirmed) {
    throw malformed(`the flags record of seq ${seq} is ${JSON.stringify({ accepted, confirmed })}`);
  }
  return { accepted, confirmed };
}

/**
 * The conflict reported for malformed persisted state.
 *
 * @example
 * ```ts
 * import { malformed } from "./codec.ts";
 * console.assert(malformed("a key is odd").name === "QueueConflictError");
 * ```
 */
export function malformed(detail: string, cause?: unknown): QueueConflictError {
  return new QueueConflictError(`Cannot read the queue: malformed persisted state: ${detail}`, {
    cause,
  });
}

function readRecord(value: unknown, where: string): Record<string, unknown> {
  if (!(value instanceof Uint8Array)) throw malformed(`the ${where} is not bytes`);
  let record: unknown;
  try {
    record = JSON.parse(decodeText(value, where));
  } catch (error) {
    if (error instanceof QueueConflictError) throw error;
    throw malformed(`the ${where} is not JSON`, error);
  }
  if (typeof record !== "object" || record === null || Array.isArray(record)) {
    throw malformed(`the ${where} is not a JSON object`);
  }
  return record as Record<string, unknown>;
}

function decodeText(bytes: Uint8Array, where: string): string {
  try {
    return decoder.decode(bytes);
  } catch (error) {
    throw malformed(`the ${where} is not UTF-8`, error);
  }
}

function isPositiveInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) > 0;
}
