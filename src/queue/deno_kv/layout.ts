/**
 * The key layout of the Deno KV work queue under one prefix, and the limits that follow from
 * it: the largest payload, the largest MessageID and the size of one group commit, chosen so
 * that any batch within them fits one Deno KV atomic commit.
 *
 * | Key | Value (see `codec.ts`) | Written by |
 * |---|---|---|
 * | `[...P, "epoch"]` | epoch record | `load` only: the fencing key |
 * | `[...P, "meta"]` | meta record (append cursor) | every write: the change marker |
 * | `[...P, "job", seq]` | job record: header, MessageID, payload head | `store` |
 * | `[...P, "accepted", first]` | accepted record: the run `first..last` is accepted | `accept`; deleted with the run's last job |
 * | `[...P, "flags", seq]` | flags record: confirmed before accepted (or accepted by format 1) | `confirmMessage` |
 * | `[...P, "part", seq, n]` | payload continuation `n` = 1, 2, ... | `store` (large payloads) |
 * | `[...P, "completed", n]` | the jobs commit `n` completed: MessageIDs and sequences (expiring) | compaction; the oldest deleted past `completedWindow` |
 * | `[...P, "done", slot]` | a job completed under format version 1 (expiring) | read only |
 *
 * Keys hold store sequences, never MessageIDs, so their sizes do not depend on MessageID length
 * and listing returns jobs in ascending sequence.
 *
 * @module
 */

import { KV_LIMITS, type KvKey, type KvKeyPart } from "./port.ts";
import { COMPLETED_BOUNDS, headCapacity, RECORD_BOUNDS } from "./codec.ts";
import { MAX_COMPLETED_DELETES, maxCompletedRecords } from "./completed.ts";

const MAX_PREFIX_BYTES = 1_024;
const MAX_PAYLOAD_BYTES = 640 * 1_024;

/**
 * The encoded size in bytes of a Deno KV key, as Deno counts it against its limits (an upper
 * bound for bigint parts).
 *
 * @example Measure keys
 * ```ts
 * import { encodedKeySize } from "./layout.ts";
 *
 * console.assert(encodedKeySize(["workpull"]) === 10);
 * console.assert(encodedKeySize(["workpull", "job", 1]) === 24);
 * ```
 */
export function encodedKeySize(key: KvKey): number {
  let size = 0;
  for (const part of key) size += encodedPartSize(part);
  return size;
}

function encodedPartSize(part: KvKeyPart): number {
  if (typeof part === "string") return stringSize(part) + 2;
  if (part instanceof Uint8Array) return escapedSize(part) + 2;
  if (typeof part === "number") return 9;
  if (typeof part === "boolean") return 1;
  if (typeof part === "bigint") {
    const magnitude = part < 0n ? -part : part;
    return 2 + Math.ceil(magnitude.toString(16).length / 2);
  }
  throw new TypeError(`Cannot encode a key part: ${typeof part} is not a storable kind`);
}

/** A string part's UTF-8 size with its zero bytes escaped, without encoding it. */
function stringSize(text: string): number {
  let size = text.length;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) {
      if (code === 0) size += 1;
    } else if (code < 0x800) size += 1;
    else if (code >= 0xd800 && code <= 0xdbff) i += 1, size += 2; // a surrogate pair: 4 bytes
    else size += 2;
  }
  return size;
}

/** Zero bytes are escaped as two bytes inside byte and string parts. */
function escapedSize(bytes: Uint8Array): number {
  let size = bytes.length;
  for (const byte of bytes) if (byte === 0) size += 1;
  return size;
}

/** Byte sizes of the fixed key shapes. */
export interface KeySizes {
  /** `[...P, "epoch"]`. */
  readonly epoch: number;
  /** `[...P, "meta"]`. */
  readonly meta: number;
  /** `[...P, "job", seq]`. */
  readonly job: number;
  /** `[...P, "flags", seq]`. */
  readonly flags: number;
  /** `[...P, "accepted", first]`. */
  readonly accepted: number;
  /** `[...P, "part", seq, n]`. */
  readonly part: number;
  /** `[...P, "completed", n]`. */
  readonly completed: number;
}

/**
 * The keys and limits of one queue. Validates the prefix (TypeError or RangeError naming the
 * `prefix` option).
 *
 * @example Keys and limits of the default prefix
 * ```ts
 * import { KvQueueLayout } from "./layout.ts";
 *
 * const layout = new KvQueueLayout(["workpull"]);
 * console.assert(layout.jobKey(7).join("/") === "workpull/job/7");
 * console.assert(layout.maxPayloadBytes === 655_360);
 * console.assert(layout.batchLimits.maxOperations === 480);
 * ```
 */
export class KvQueueLayout {
  /** The prefix every key starts with. */
  readonly prefix: KvKey;
  /** The fencing key: changes only when `load` issues a new epoch. */
  readonly epochKey: KvKey;
  /** The change marker: rewritten by every write. */
  readonly metaKey: KvKey;
  /** List prefix of all `job` keys. */
  readonly jobPrefix: KvKey;
  /** List prefix of all `flags` keys. */
  readonly flagsPrefix: KvKey;
  /** List prefix of all `accepted` keys. */
  readonly acceptedPrefix: KvKey;
  /** List prefix of all `part` keys. */
  readonly partPrefix: KvKey;
  /** List prefix of the `completed` records. */
  readonly completedPrefix: KvKey;
  /** List prefix of format version 1's `done` keys. */
  readonly donePrefix: KvKey;
  /** Sizes of the fixed key shapes. */
  readonly keySizes: KeySizes;
  /** The largest payload (UTF-8 bytes of its JSON text): 640 KiB. */
  readonly maxPayloadBytes: number = MAX_PAYLOAD_BYTES;
  /** The largest MessageID (UTF-8 bytes): 1 KiB. */
  readonly maxMessageIdBytes: number = RECORD_BOUNDS.maxMessageIdBytes;
  /** What one group commit may carry; any batch within these fits one atomic commit. */
  readonly batchLimits: { readonly maxOperations: number; readonly maxBytes: number };
  /** Part keys deleted per garbage-collection commit. */
  readonly partsPerCollection: number;

  /** Validates the prefix and derives the keys and limits. */
  constructor(prefix: KvKey) {
    if (!Array.isArray(prefix) || prefix.length === 0) {
      throw new TypeError(
        "Cannot use the prefix option: it must be a non-empty array of key parts",
      );
    }
    for (const part of prefix) {
      const kind = typeof part;
      if (
        !(part instanceof Uint8Array) && kind !== "string" && kind !== "number" &&
        kind !== "bigint" && kind !== "boolean"
      ) {
        throw new TypeError(`Cannot use the prefix option: a key part is a ${kind}`);
      }
      if (kind === "number" && !Number.isFinite(part)) {
        throw new TypeError(`Cannot use the prefix option: a key part is ${part}`);
      }
    }
    const prefixBytes = encodedKeySize(prefix);
    if (prefixBytes > MAX_PREFIX_BYTES) {
      throw new RangeError(
        `Cannot use the prefix option: it encodes to ${prefixBytes} bytes, the maximum is ${MAX_PREFIX_BYTES}`,
      );
    }
    this.prefix = Object.freeze([...prefix]);
    this.epochKey = [...prefix, "epoch"];
    this.metaKey = [...prefix, "meta"];
    this.jobPrefix = [...prefix, "job"];
    this.flagsPrefix = [...prefix, "flags"];
    this.acceptedPrefix = [...prefix, "accepted"];
    this.partPrefix = [...prefix, "part"];
    this.completedPrefix = [...prefix, "completed"];
    this.donePrefix = [...prefix, "done"];
    this.keySizes = {
      epoch: prefixBytes + 7,
      meta: prefixBytes + 6,
      job: prefixBytes + 5 + 9,
      flags: prefixBytes + 7 + 9,
      accepted: prefixBytes + 10 + 9,
      part: prefixBytes + 6 + 9 + 9,
      completed: prefixBytes + 11 + 9,
    };
    this.batchLimits = deriveBatchLimits(this.keySizes);
    this.partsPerCollection = Math.min(
      KV_LIMITS.maxMutations,
      Math.floor((KV_LIMITS.maxMutationBytes - this.keySizes.epoch) / this.keySizes.part),
    );
  }

  /** The key of the job stored at `seq`. */
  jobKey(seq: number): KvKey {
    return [...this.jobPrefix, seq];
  }

  /** The key of the flags of the job stored at `seq`. */
  flagsKey(seq: number): KvKey {
    return [...this.flagsPrefix, seq];
  }

  /** The key of the accepted record of the run that starts at `first`. */
  acceptedKey(first: number): KvKey {
    return [...this.acceptedPrefix, first];
  }

  /** The key of completed record `n`. */
  completedKey(n: number): KvKey {
    return [...this.completedPrefix, n];
  }

  /** The key of continuation part `n` (1-based) of the job stored at `seq`. */
  partKey(seq: number, n: number): KvKey {
    return [...this.partPrefix, seq, n];
  }

  /**
   * The sequence (and part number) in a listed `job`, `flags`, `accepted` or `part` key, or the
   * number in a `completed` key; undefined when the key has the wrong shape.
   */
  parse(
    key: readonly unknown[],
    kind: "job" | "flags" | "accepted" | "completed" | "part",
  ): [number, number] | undefined {
    const depth = this.prefix.length;
    const seq = key[depth + 1];
    const n = kind === "part" ? key[depth + 2] : 0;
    const length = depth + (kind === "part" ? 3 : 2);
    if (
      key.length !== length || !isPositiveInteger(seq) || !(kind !== "part" || isPositiveInteger(n))
    ) {
      return undefined;
    }
    return [seq, n as number];
  }
}

/**
 * The size of one group commit. Per operation the adapter writes at most two mutations (a job,
 * flags or accepted set; or compaction's delete of the job and the delete of its flags or of its
 * run's accepted record: a job has one or the other, never both), at most one set key, and the
 * bytes of its keys and records; MessageID and payload bytes are counted in `maxBytes` (a
 * compaction's entry in a `completed` record repeats the MessageID a confirm already counted
 * there). Continuation parts of the payloads that `maxBytes` can carry, the `completed` records
 * of a full batch and the deletes of old ones, the epoch and meta checks and the meta record are
 * added on top.
 */
function deriveBatchLimits(keys: KeySizes): { maxOperations: number; maxBytes: number } {
  const maxBytes = MAX_PAYLOAD_BYTES + RECORD_BOUNDS.maxMessageIdBytes;
  const record = RECORD_BOUNDS.recordMaxBytes;
  // A payload of B bytes needs at most B / (smallest head capacity) continuation parts.
  const maxParts = Math.ceil(maxBytes / headCapacity(RECORD_BOUNDS.maxMessageIdBytes));
  const setKey = Math.max(keys.job, keys.flags, keys.accepted);
  const marker = Math.max(keys.flags, keys.accepted);
  const perOperation = Math.max(
    2 * Math.max(keys.job, marker) + record, // a job, flags or accepted set
    keys.job + marker + COMPLETED_BOUNDS.perJob, // a compaction
  );
  // Records for maxBytes of MessageIDs and the per-job header of a generous 1,000 jobs.
  const records = maxCompletedRecords(maxBytes, KV_LIMITS.maxMutations);
  const ring = records + MAX_COMPLETED_DELETES;
  const fixed = keys.epoch + keys.meta + 2 * keys.meta + record +
    records * (2 * keys.completed + COMPLETED_BOUNDS.fixed) +
    MAX_COMPLETED_DELETES * keys.completed;
  const byMutations = Math.floor((KV_LIMITS.maxMutations - 1 - maxParts - ring) / 2);
  const byBytes = Math.floor(
    (KV_LIMITS.maxMutationBytes - fixed - maxParts * 2 * keys.part - maxBytes) / perOperation,
  );
  const bySetKeys = Math.floor(
    (KV_LIMITS.maxSetKeyBytes - keys.meta - maxParts * keys.part - records * keys.completed) /
      setKey,
  );
  return { maxOperations: Math.min(byMutations, byBytes, bySetKeys), maxBytes };
}

function isPositiveInteger(value: unknown): value is number {
  return Number.isSafeInteger(value) && (value as number) > 0;
}
