/**
 * Reading a producer's `Produced` answer into the columns the handshake keeps: the MessageIDs,
 * the payloads and, when any job has them, the tries.
 *
 * `Produced` is checked once, at the controller's edge, against `ProducedSchema`. Its common
 * shape (a batch of jobs, each a plain object of known fields) is checked here field by field in
 * one pass that reads every field once and copies nothing: valibot's object schemas build a
 * validated copy of every job, which was a sixth of what the controller allocated per job. The
 * fast pass accepts only what the schema accepts; anything it is not sure of (the single-job
 * form, an unknown key, a bad value) goes through `ProducedSchema`, whose issue names the problem.
 *
 * An `EncodedBatch` (what `BufferedProducer` answers with) is its columns already: the producer
 * checked its MessageIDs and encoded its payloads, so only the session and the token are checked
 * here, and its payloads are JSON texts (`encoded`).
 *
 * The columns are read once: a producer changing its message afterwards changes nothing here.
 *
 * @module
 */

import * as v from "valibot";
import { EncodedBatch } from "../protocol/encoded_batch.ts";
import { isId, isIntegerIn } from "../protocol/field_checks.ts";
import { MAX_SEQ, ProducedSchema } from "../protocol/schemas.ts";

/** A job's try fields, when the producer sent any (a job queue's producer does). */
export interface ProducedTries {
  /** Which try this is. */
  readonly attempt?: number;
  /** How long the try may take, ms (0: no limit). */
  readonly timeout?: number;
  /** Workers lost while running it so far. */
  readonly lost?: number;
}

/** A valid `Produced`, by column; or why it is not valid. */
export type ProducedRead =
  | {
    readonly ok: true;
    readonly session: string;
    readonly token: string;
    readonly ids: readonly string[];
    readonly payloads: readonly unknown[];
    /** Whether every payload is JSON text already (an `EncodedBatch`'s), not a value. */
    readonly encoded: boolean;
    /** By position; undefined when no job carries a try field. */
    readonly tries: readonly (ProducedTries | undefined)[] | undefined;
  }
  | { readonly ok: false; readonly message: string };

/**
 * Check `raw` against `ProducedSchema` and read it into columns.
 *
 * @example
 * ```ts
 * import { readProduced } from "./produced_reader.ts";
 * const read = readProduced({ session: "s", token: "t1", jobs: [{ messageId: "a", payload: 1 }] });
 * console.assert(read.ok && read.ids[0] === "a" && read.payloads[0] === 1);
 * const bad = readProduced({ session: "s", token: "t1", jobs: [{ messageId: "", payload: 1 }] });
 * console.assert(!bad.ok);
 * ```
 */
export function readProduced(raw: unknown): ProducedRead {
  if (raw instanceof EncodedBatch) return readEncoded(raw);
  return readBatch(raw) ?? readWithSchema(raw);
}

/** A batch the producer checked and encoded: its columns as they are. */
function readEncoded(batch: EncodedBatch): ProducedRead {
  const { session, token, ids, texts } = batch;
  // Anything odd gets the schema's verdict on the plain form.
  if (!isId(session) || !isId(token) || ids.length === 0) return readWithSchema(batch.toJSON());
  return { ok: true, session, token, ids, payloads: texts, encoded: true, tries: undefined };
}

/** The fast pass: a batch of plain jobs; undefined when unsure (the schema decides then). */
function readBatch(raw: unknown): ProducedRead | undefined {
  if (typeof raw !== "object" || raw === null) return undefined;
  let session: unknown;
  let token: unknown;
  let jobs: unknown;
  let fields = 0;
  const message = raw as Record<string, unknown>;
  for (const key in message) {
    if (key === "session") session = message[key];
    else if (key === "token") token = message[key];
    else if (key === "jobs") jobs = message[key];
    else return undefined;
    fields += 1;
  }
  if (fields !== 3 || !isId(session) || !isId(token) || !Array.isArray(jobs)) return undefined;
  const count = jobs.length;
  if (count === 0) return undefined;
  const ids: string[] = new Array(count);
  const payloads: unknown[] = new Array(count);
  let tries: (ProducedTries | undefined)[] | undefined;
  for (let i = 0; i < count; i++) {
    const job = jobs[i];
    if (typeof job !== "object" || job === null) return undefined;
    let messageId: unknown;
    let payload: unknown;
    let hasPayload = false;
    let attempt: unknown;
    let timeout: unknown;
    let lost: unknown;
    let extra = false;
    for (const key in job) {
      const value = (job as Record<string, unknown>)[key];
      if (key === "messageId") messageId = value;
      else if (key === "payload") {
        payload = value;
        hasPayload = true;
      } else if (key === "attempt") attempt = value;
      else if (key === "timeout") timeout = value;
      else if (key === "lost") lost = value;
      else return undefined;
      if (key !== "messageId" && key !== "payload") extra = true;
    }
    if (!isId(messageId) || !hasPayload) return undefined;
    ids[i] = messageId;
    payloads[i] = payload;
    if (!extra) continue;
    if (
      !optionalInteger(attempt, 1, MAX_SEQ) ||
      !optionalInteger(timeout, 0, Number.MAX_SAFE_INTEGER) ||
      !optionalInteger(lost, 0, MAX_SEQ)
    ) return undefined;
    tries ??= new Array(count);
    tries[i] = { attempt, timeout, lost } as ProducedTries;
  }
  return { ok: true, session, token, ids, payloads, encoded: false, tries };
}

/** The schema's verdict, for everything the fast pass left. */
function readWithSchema(raw: unknown): ProducedRead {
  const parsed = v.safeParse(ProducedSchema, raw);
  if (!parsed.success) return { ok: false, message: parsed.issues[0].message };
  const message = parsed.output;
  const { session, token } = message;
  if (!("jobs" in message)) {
    return {
      ok: true,
      session,
      token,
      ids: [message.messageId],
      payloads: [message.payload],
      encoded: false,
      tries: undefined,
    };
  }
  const { jobs } = message;
  return {
    ok: true,
    session,
    token,
    ids: jobs.map((job) => job.messageId),
    payloads: jobs.map((job) => job.payload),
    encoded: false,
    tries: jobs.map(({ attempt, timeout, lost }) => ({ attempt, timeout, lost })),
  };
}

function optionalInteger(value: unknown, min: number, max: number): boolean {
  return value === undefined || isIntegerIn(value, min, max);
}
