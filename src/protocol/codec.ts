/**
 * Encoding and decoding of wire frames. Decoding never throws: a bad frame becomes a typed
 * {@linkcode DecodeFailure} that says why, so an edge can end only the offending binding.
 *
 * Job payloads are carried as JSON text from the moment they are produced, so a jobs frame is
 * assembled by concatenation without serializing a payload twice.
 *
 * @module
 */

import * as v from "valibot";
import {
  type ControllerFrame,
  ControllerFrameSchema,
  type WorkerFrame,
  WorkerFrameSchema,
} from "./schemas.ts";
import { checkJobsFrame } from "./jobs_frame_check.ts";

/** Why a frame was refused. */
export type DecodeFailureReason = "too-large" | "not-text" | "malformed-json" | "invalid-frame";

/** A frame that could not be decoded. */
export interface DecodeFailure {
  /** Always false. */
  readonly ok: false;
  /** Why. */
  readonly reason: DecodeFailureReason;
  /** A short human-readable explanation (never the frame itself). */
  readonly detail: string;
}

/** The outcome of decoding one frame. */
export type DecodeResult<T> = { readonly ok: true; readonly frame: T } | DecodeFailure;

/** The default largest frame a controller accepts from a worker (bytes of text). */
export const DEFAULT_MAX_WORKER_FRAME = 64 * 1024;

/**
 * A union's member schemas by the literal `type` each requires. A frame whose `type` names one
 * is checked against that schema alone, which is what the variant would pick: the variant tries
 * its members in turn and builds an issue (message included) for every `type` that does not
 * match, which cost more than checking the frame itself. Any other frame goes to the variant,
 * for its error.
 */
function schemasByType<T>(
  union: { readonly options: readonly v.GenericSchema<unknown, T>[] },
): ReadonlyMap<unknown, v.GenericSchema<unknown, T>> {
  const byType = new Map<unknown, v.GenericSchema<unknown, T>>();
  for (const schema of union.options) {
    const type = (schema as unknown as { entries: { type: { literal: string } } }).entries.type;
    byType.set(type.literal, schema);
  }
  return byType;
}

const WORKER_FRAMES = schemasByType<WorkerFrame>(WorkerFrameSchema);
const CONTROLLER_FRAMES = schemasByType<ControllerFrame>(ControllerFrameSchema);

function decode<T>(
  union: v.GenericSchema<unknown, T>,
  byType: ReadonlyMap<unknown, v.GenericSchema<unknown, T>>,
  data: unknown,
  maxLength: number,
  /** A check that answers only for a frame it is sure is valid (the schema decides the rest). */
  fast?: (type: unknown, json: unknown) => T | undefined,
): DecodeResult<T> {
  if (typeof data !== "string") {
    return { ok: false, reason: "not-text", detail: "frames are JSON text" };
  }
  // String length counts UTF-16 units; a UTF-8 byte limit is at least this strict / 3, and the
  // edges also enforce the byte limit before a frame reaches here.
  if (data.length > maxLength) {
    return { ok: false, reason: "too-large", detail: `frame exceeds ${maxLength} characters` };
  }
  let json: unknown;
  try {
    json = JSON.parse(data);
  } catch {
    return { ok: false, reason: "malformed-json", detail: "frame is not valid JSON" };
  }
  const type = typeof json === "object" && json !== null ? (json as { type?: unknown }).type : null;
  const checked = fast?.(type, json);
  if (checked) return { ok: true, frame: checked };
  const result = v.safeParse(byType.get(type) ?? union, json);
  if (result.success) return { ok: true, frame: result.output };
  const issue = result.issues[0];
  const path = issue.path?.map((item) => String(item.key)).join(".") ?? "";
  return { ok: false, reason: "invalid-frame", detail: `${path || "frame"}: ${issue.message}` };
}

/**
 * Decode a frame sent by a worker.
 *
 * @example
 * ```ts
 * import { decodeWorkerFrame } from "./codec.ts";
 * const result = decodeWorkerFrame('{"type":"ack","session":"s","nonce":"n","confirmed":3}');
 * console.assert(result.ok && result.frame.type === "ack");
 * console.assert(!decodeWorkerFrame("{oops").ok);
 * ```
 */
export function decodeWorkerFrame(
  data: unknown,
  maxLength = DEFAULT_MAX_WORKER_FRAME,
): DecodeResult<WorkerFrame> {
  return decode(WorkerFrameSchema, WORKER_FRAMES, data, maxLength);
}

/**
 * Decode a frame sent by the controller.
 *
 * @example
 * ```ts
 * import { decodeControllerFrame } from "./codec.ts";
 * const result = decodeControllerFrame('{"type":"reset","session":"s2"}');
 * console.assert(result.ok && result.frame.type === "reset");
 * ```
 */
export function decodeControllerFrame(
  data: unknown,
  maxLength = Number.MAX_SAFE_INTEGER,
): DecodeResult<ControllerFrame> {
  return decode(ControllerFrameSchema, CONTROLLER_FRAMES, data, maxLength, fastControllerFrame);
}

/** The worker's hot path: a valid jobs frame is used as parsed, without a validated copy. */
function fastControllerFrame(type: unknown, json: unknown): ControllerFrame | undefined {
  return type === "jobs" ? checkJobsFrame(json) : undefined;
}

/**
 * Encode any frame as JSON text.
 *
 * @example
 * ```ts
 * import { encodeFrame } from "./codec.ts";
 * console.assert(encodeFrame({ type: "reset", session: "s" }) === '{"type":"reset","session":"s"}');
 * ```
 */
export function encodeFrame(frame: WorkerFrame | ControllerFrame): string {
  return JSON.stringify(frame);
}

/** A job ready for the wire: its MessageID and its payload already as JSON text. */
export interface EncodedJob {
  /** The MessageID. */
  readonly messageId: string;
  /** The payload as JSON text. */
  readonly payload: string;
  /** Which try this is (sent with feature `outcomes`). */
  readonly attempt?: number;
  /** How long the try may take, ms; 0 or absent = no limit (sent with feature `outcomes`). */
  readonly timeout?: number;
  /** Confirm what finished before starting it (sent with feature `outcomes`). */
  readonly confirmFirst?: boolean;
  /**
   * The MessageID is known to need no escaping in JSON (no quotation mark, backslash, control
   * character or surrogate): it is written as it is, unchecked. Absent or false: checked.
   */
  readonly plainId?: boolean;
}

/**
 * Encode a jobs frame with contiguous sequences starting at `seq`, splicing the payloads' JSON
 * text in place; `withTries` adds each job's try number and timeout (feature `outcomes`).
 *
 * @example
 * ```ts
 * import { encodeJobsFrame } from "./codec.ts";
 * const text = encodeJobsFrame("s", 7, [{ messageId: "a", payload: '{"n":1}' }]);
 * console.assert(text === '{"type":"jobs","session":"s","seq":7,"jobs":[{"id":"a","payload":{"n":1}}]}');
 * ```
 */
export function encodeJobsFrame(
  session: string,
  seq: number,
  jobs: readonly EncodedJob[],
  withTries = false,
): string {
  // Concatenated: the engine keeps a rope and flattens it once, when the frame is sent. Frames of
  // 50 jobs, built and flattened, took 77-82 ns a job on Deno against 93-99 when joined from an
  // array of the parts (Bun and Node: no slower). A MessageID needing no escaping goes in as is.
  if (withTries) return encodeWithTries(session, seq, jobs);
  let text = `{"type":"jobs","session":${JSON.stringify(session)},"seq":${seq},"jobs":[`;
  for (let i = 0; i < jobs.length; i++) {
    const job = jobs[i];
    const id = job.messageId;
    if (job.plainId !== true && NEEDS_ESCAPE.test(id)) {
      text += (i === 0 ? '{"id":' : ',{"id":') + JSON.stringify(id) + ',"payload":' + job.payload +
        "}";
    } else {
      text += (i === 0 ? '{"id":"' : ',{"id":"') + id + '","payload":' + job.payload + "}";
    }
  }
  return text + "]}";
}

function encodeWithTries(session: string, seq: number, jobs: readonly EncodedJob[]): string {
  let text = `{"type":"jobs","session":${JSON.stringify(session)},"seq":${seq},"jobs":[`;
  for (let i = 0; i < jobs.length; i++) {
    const job = jobs[i];
    if (i > 0) text += ",";
    const id = job.messageId;
    text += job.plainId !== true && NEEDS_ESCAPE.test(id)
      ? `{"id":${JSON.stringify(id)},"payload":${job.payload}`
      : `{"id":"${id}","payload":${job.payload}`;
    text += `,"attempt":${job.attempt ?? 1}`;
    if (job.timeout) text += `,"timeout":${job.timeout}`;
    if (job.confirmFirst) text += `,"confirmFirst":true`;
    text += "}";
  }
  return text + "]}";
}

// A character JSON.stringify would not copy as it is: a quote, a backslash, a control character
// or a surrogate (a lone one is escaped). `hashIds` (core/id_table.ts) makes the same check while
// it hashes a batch's MessageIDs, and sets `plainId` from it: change both together.
// deno-lint-ignore no-control-regex -- control characters are exactly what needs escaping
const NEEDS_ESCAPE = /["\\\u0000-\u001f\ud800-\udfff]/;
