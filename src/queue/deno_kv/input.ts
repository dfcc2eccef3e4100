/**
 * Validation of the Deno KV work queue's arguments, done synchronously at call time so that the
 * caller may change or reuse its objects as soon as the call returns. Structurally invalid
 * arguments throw TypeError; arguments over the adapter's limits throw RangeError naming the
 * limit. Neither is a queue conflict, and nothing is applied.
 *
 * @module
 */

import type { QueueBatch } from "../work_queue.ts";
import { utf8Length } from "../../core/utf8.ts";
import { partsFor } from "./codec.ts";
import type { PlannedStore } from "./plan.ts";

/** A checked, copied write: what `store`, `accept`, `confirmMessage` and `commit` turn into. */
export interface WriteInput {
  /** The sequence proposed for the first new job (0 when nothing is stored). */
  readonly firstSeq: number;
  /** Jobs to store. */
  readonly store: readonly PlannedStore[];
  /** MessageIDs to accept. */
  readonly accept: readonly string[];
  /** MessageIDs to confirm. */
  readonly confirm: readonly string[];
}

/** The limits the input is checked against. */
export interface InputLimits {
  /** The largest MessageID in UTF-8 bytes. */
  readonly maxMessageIdBytes: number;
  /** The largest payload in UTF-8 bytes. */
  readonly maxPayloadBytes: number;
  /** The size of one commit. */
  readonly batchLimits: { readonly maxOperations: number; readonly maxBytes: number };
}

/**
 * Checks one job to store.
 *
 * @example
 * ```ts
 * import { prepareJob } from "./input.ts";
 *
 * const limits = { maxMessageIdBytes: 8, maxPayloadBytes: 8, batchLimits: { maxOperations: 1, maxBytes: 16 } };
 * console.assert(prepareJob("a", "1", limits).parts === 0);
 * ```
 */
export function prepareJob(
  messageId: unknown,
  payload: unknown,
  limits: InputLimits,
): PlannedStore {
  const id = checkId(messageId);
  if (id.trim() === "") {
    throw new TypeError("Cannot store a job: messageId must be a non-blank string");
  }
  if (typeof payload !== "string" || payload === "") {
    throw new TypeError(`Cannot store ${id}: payload must be non-empty JSON text`);
  }
  if (!isWellFormed(id) || !isWellFormed(payload)) {
    throw new TypeError(`Cannot store ${id}: it contains a lone surrogate (not UTF-8 encodable)`);
  }
  const idBytes = utf8Length(id);
  if (idBytes > limits.maxMessageIdBytes) {
    throw new RangeError(
      `Cannot store a job: its messageId is ${idBytes} bytes, the maximum is ${limits.maxMessageIdBytes} bytes (maxMessageIdBytes)`,
    );
  }
  const payloadBytes = utf8Length(payload);
  if (payloadBytes > limits.maxPayloadBytes) {
    throw new RangeError(
      `Cannot store ${id}: the payload is ${payloadBytes} bytes, the maximum is ${limits.maxPayloadBytes} bytes (maxPayloadBytes)`,
    );
  }
  return {
    messageId: id,
    messageIdBytes: idBytes,
    payload,
    payloadBytes,
    parts: partsFor(idBytes, payloadBytes),
  };
}

/**
 * Checks and copies a batch, including its size against `batchLimits`.
 *
 * @example
 * ```ts
 * import { prepareBatch } from "./input.ts";
 *
 * const limits = { maxMessageIdBytes: 8, maxPayloadBytes: 8, batchLimits: { maxOperations: 2, maxBytes: 16 } };
 * const input = prepareBatch({ accept: ["a"], confirm: ["b"] }, limits);
 * console.assert(input.accept[0] === "a" && input.confirm[0] === "b");
 * ```
 */
export function prepareBatch(batch: QueueBatch, limits: InputLimits): WriteInput {
  if (typeof batch !== "object" || batch === null) {
    throw new TypeError("Cannot commit: the batch must be an object");
  }
  const store = [...(batch.store?.jobs ?? [])].map((job) =>
    prepareJob(job?.messageId, job?.payload, limits)
  );
  const firstSeq = store.length > 0 ? checkSeq(batch.store?.firstSeq, "firstSeq") : 0;
  const accept = [...(batch.accept ?? [])].map(checkId);
  const confirm = [...(batch.confirm ?? [])].map(checkId);
  const operations = store.length + accept.length + confirm.length;
  const { maxOperations, maxBytes } = limits.batchLimits;
  if (operations > maxOperations) {
    throw new RangeError(
      `Cannot commit: the batch has ${operations} operations, the maximum is ${maxOperations} (batchLimits.maxOperations)`,
    );
  }
  let bytes = 0;
  for (const job of store) bytes += job.messageIdBytes + job.payloadBytes;
  for (const id of accept) bytes += utf8Length(id);
  for (const id of confirm) bytes += utf8Length(id);
  if (bytes > maxBytes) {
    throw new RangeError(
      `Cannot commit: the batch has ${bytes} bytes, the maximum is ${maxBytes} (batchLimits.maxBytes)`,
    );
  }
  return { firstSeq, store, accept, confirm };
}

/**
 * Checks that a MessageID is a string (an unknown or blank one is a conflict, decided later).
 *
 * @example
 * ```ts
 * import { checkId } from "./input.ts";
 * console.assert(checkId("job-1") === "job-1");
 * ```
 */
export function checkId(messageId: unknown): string {
  if (typeof messageId !== "string") {
    throw new TypeError(`Cannot use a MessageID: it must be a string, not ${typeof messageId}`);
  }
  return messageId;
}

/**
 * Checks that a proposed sequence is an integer (a wrong one is a conflict, decided later).
 *
 * @example
 * ```ts
 * import { checkSeq } from "./input.ts";
 * console.assert(checkSeq(3, "proposedSeq") === 3);
 * ```
 */
export function checkSeq(seq: unknown, name: string): number {
  if (!Number.isSafeInteger(seq)) {
    throw new TypeError(`Cannot store: ${name} must be an integer, not ${String(seq)}`);
  }
  return seq as number;
}

function isWellFormed(text: string): boolean {
  const check = (text as { isWellFormed?: () => boolean }).isWellFormed;
  return check === undefined || check.call(text);
}
