/**
 * Reading the Deno KV work queue: whole-queue snapshots (for `load` and for re-syncing a
 * handle) and the first-write payloads of retained jobs (for repeated stores).
 *
 * `list()` is consistent only within one batch, so every read is bracketed by the versionstamps
 * of the epoch key and the meta key (a "stamp"): every write rewrites the meta key and every load
 * rewrites the epoch key, so an unchanged stamp proves nothing changed in between.
 *
 * @module
 */

import { QueueConflictError, QueueFencedError, type UnconfirmedMessage } from "../work_queue.ts";
import { KV_LIMITS, type KvEntryLike, type KvKey, type KvLike } from "./port.ts";
import type { KvQueueLayout } from "./layout.ts";
import {
  checkPart,
  type CompletedEntry,
  decodeAccepted,
  decodeCompleted,
  type DecodedJob,
  decodeEpoch,
  decodeFlags,
  decodeJob,
  decodeMeta,
  type JobFlags,
  joinPayload,
  malformed,
} from "./codec.ts";
import type { KvJobInfo } from "./plan.ts";
import type { CompletedRecordInfo } from "./completed.ts";

/** The versionstamps of the epoch and meta keys at one instant. */
export interface Stamps {
  /** The epoch key's versionstamp (null before the first load). */
  readonly epochVs: string | null;
  /** The meta key's versionstamp (null before the first write). */
  readonly metaVs: string | null;
}

/** The whole queue as read at one stamp. */
export interface Snapshot extends Stamps {
  /** The current epoch (0 before the first load). */
  readonly epoch: number;
  /** The append cursor. */
  readonly currentSeq: number;
  /** Every retained job by MessageID. */
  readonly jobs: Map<string, KvJobInfo>;
  /** Retained jobs in each accepted run, by the run's first sequence. */
  readonly ranges: Map<number, number>;
  /** The completed records, oldest first. */
  readonly completed: CompletedRecordInfo[];
  /** The jobs the readable completed records hold (empty unless payloads were read). */
  readonly completedJobs: CompletedEntry[];
  /** Accepted, unconfirmed jobs in ascending sequence (empty unless payloads were read). */
  readonly unconfirmed: UnconfirmedMessage[];
  /** Continuation parts whose job is gone (empty unless payloads were read). */
  readonly orphans: KvKey[];
}

/**
 * The stamp moved while reading: the caller's view is stale.
 *
 * @example
 * ```ts
 * import { StaleReadError } from "./read.ts";
 * console.assert(new StaleReadError() instanceof Error);
 * ```
 */
export class StaleReadError extends Error {
  /** Creates the error. */
  constructor(message = "the epoch or meta key changed") {
    super(message);
    this.name = "StaleReadError";
  }
}

const NO_FLAGS: JobFlags = { accepted: false, confirmed: false };
const READ_ATTEMPTS = 3;

/**
 * Reads the current stamp.
 *
 * @example
 * ```ts
 * import { readStamps } from "./read.ts";
 * import { KvQueueLayout } from "./layout.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const stamps = await readStamps(kv, new KvQueueLayout(["q"]));
 * console.assert(stamps.epochVs === null && stamps.metaVs === null);
 * kv.close();
 * ```
 */
export async function readStamps(kv: KvLike, layout: KvQueueLayout): Promise<Stamps> {
  const [epoch, meta] = await kv.getMany([layout.epochKey, layout.metaKey]);
  return { epochVs: epoch.versionstamp, metaVs: meta.versionstamp };
}

/**
 * Throws {@linkcode StaleReadError} unless the entries carry the expected stamp.
 *
 * @example
 * ```ts
 * import { checkStamps } from "./read.ts";
 *
 * const entry = (versionstamp: string | null) => ({ key: [], value: null, versionstamp });
 * checkStamps({ epochVs: "1", metaVs: null }, entry("1"), entry(null));
 * ```
 */
export function checkStamps(expected: Stamps, epoch: KvEntryLike, meta: KvEntryLike): void {
  if (epoch.versionstamp !== expected.epochVs || meta.versionstamp !== expected.metaVs) {
    throw new StaleReadError();
  }
}

/**
 * Reads the whole queue once. With `epoch`, throws {@linkcode QueueFencedError} if the stored
 * epoch differs. Malformed state is reported ({@linkcode QueueConflictError}) only when the stamp
 * did not move during the read; otherwise returns undefined: read again.
 *
 * @example Read an empty queue
 * ```ts
 * import { readSnapshot } from "./read.ts";
 * import { KvQueueLayout } from "./layout.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const snapshot = await readSnapshot(kv, new KvQueueLayout(["q"]), { payloads: true });
 * console.assert(snapshot?.epoch === 0 && snapshot.currentSeq === 0);
 * kv.close();
 * ```
 */
export async function readSnapshot(
  kv: KvLike,
  layout: KvQueueLayout,
  options: { readonly payloads: boolean; readonly epoch?: number },
): Promise<Snapshot | undefined> {
  const [epochEntry, metaEntry] = await kv.getMany([layout.epochKey, layout.metaKey]);
  const stamps = { epochVs: epochEntry.versionstamp, metaVs: metaEntry.versionstamp };
  try {
    const epoch = epochEntry.versionstamp === null ? 0 : decodeEpoch(epochEntry.value);
    if (options.epoch !== undefined && epoch !== options.epoch) {
      throw new QueueFencedError(
        `Cannot write: epoch ${options.epoch} is fenced (current ${epoch})`,
      );
    }
    if (epochEntry.versionstamp === null && metaEntry.versionstamp !== null) {
      throw malformed("the meta record exists without an epoch record");
    }
    const currentSeq = metaEntry.versionstamp === null ? 0 : decodeMeta(metaEntry.value);
    const flags = new Map<number, JobFlags>();
    for await (const entry of list(kv, layout.flagsPrefix)) {
      const seq = seqOf(layout, entry, "flags");
      flags.set(seq, decodeFlags(entry.value, seq));
    }
    const runs = await readRuns(kv, layout);
    const { completed, completedJobs } = await readCompletedRecords(kv, layout, options.payloads);
    const ranges = new Map<number, number>();
    let run = 0;
    const jobs = new Map<string, KvJobInfo>();
    const bySeq = new Map<number, DecodedJob>();
    const accepted: DecodedJob[] = [];
    for await (const entry of list(kv, layout.jobPrefix)) {
      const seq = seqOf(layout, entry, "job");
      const job = decodeJob(entry.value, seq);
      if (seq > currentSeq) throw malformed(`job seq ${seq} is above currentSeq ${currentSeq}`);
      if (jobs.has(job.messageId)) throw malformed(`MessageID ${job.messageId} is stored twice`);
      let { accepted: a, confirmed: c } = flags.get(seq) ?? NO_FLAGS;
      flags.delete(seq);
      while (run < runs.length && runs[run][1] < seq) run += 1; // jobs and runs ascend
      const range = run < runs.length && runs[run][0] <= seq ? runs[run][0] : 0;
      if (range !== 0) {
        if (a || c) throw malformed(`the job at seq ${seq} has flags inside an accepted run`);
        a = true;
        ranges.set(range, (ranges.get(range) ?? 0) + 1);
      }
      jobs.set(job.messageId, { seq, parts: job.parts, accepted: a, confirmed: c, range });
      if (options.payloads) bySeq.set(seq, job);
      if (a && !c) accepted.push(job);
    }
    const stray = flags.keys().next();
    if (!stray.done) throw malformed(`the flags at seq ${stray.value} have no job`);
    const empty = runs.find(([first]) => !ranges.has(first));
    if (empty) throw malformed(`the accepted run at seq ${empty[0]} holds no job`);
    if (!options.payloads) {
      const rest = { completed, completedJobs, unconfirmed: [], orphans: [] };
      return { ...stamps, epoch, currentSeq, jobs, ranges, ...rest };
    }
    const { parts, orphans } = await readParts(kv, layout, bySeq);
    const unconfirmed = accepted.map((job) => ({
      messageId: job.messageId,
      seq: job.seq,
      payload: joinPayload(job, parts.get(job.seq) ?? []),
    }));
    const rest = { completed, completedJobs, unconfirmed, orphans };
    return { ...stamps, epoch, currentSeq, jobs, ranges, ...rest };
  } catch (error) {
    if (!(error instanceof QueueConflictError)) throw error;
    const [epochAgain, metaAgain] = await kv.getMany([layout.epochKey, layout.metaKey]);
    const still = epochAgain.versionstamp === stamps.epochVs &&
      metaAgain.versionstamp === stamps.metaVs;
    if (still) throw error;
    return undefined;
  }
}

/**
 * Reads the whole queue under `epoch` and confirms with a second stamp read that nothing moved;
 * retries a few times, then throws a retriable Error.
 *
 * @example
 * ```ts
 * import { readStableSnapshot } from "./read.ts";
 * import { KvQueueLayout } from "./layout.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const snapshot = await readStableSnapshot(kv, new KvQueueLayout(["q"]), { payloads: false, epoch: 0 });
 * console.assert(snapshot.jobs.size === 0);
 * kv.close();
 * ```
 */
export async function readStableSnapshot(
  kv: KvLike,
  layout: KvQueueLayout,
  options: { readonly payloads: boolean; readonly epoch: number },
): Promise<Snapshot> {
  for (let attempt = 1; attempt <= READ_ATTEMPTS; attempt++) {
    const snapshot = await readSnapshot(kv, layout, options);
    if (!snapshot) continue;
    const [epoch, meta] = await kv.getMany([layout.epochKey, layout.metaKey]);
    if (epoch.versionstamp === snapshot.epochVs && meta.versionstamp === snapshot.metaVs) {
      return snapshot;
    }
  }
  throw new Error(`Cannot read the queue: it changed during ${READ_ATTEMPTS} reads in a row`);
}

/**
 * Reads the first-write payloads of retained jobs (`[messageId, seq]` pairs), ten keys per
 * read with the stamp in each; throws {@linkcode StaleReadError} if the stamp moved.
 *
 * @example
 * ```ts
 * import { readPayloads } from "./read.ts";
 * import { KvQueueLayout } from "./layout.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const payloads = await readPayloads(kv, new KvQueueLayout(["q"]), { epochVs: null, metaVs: null }, []);
 * console.assert(payloads.size === 0);
 * kv.close();
 * ```
 */
export async function readPayloads(
  kv: KvLike,
  layout: KvQueueLayout,
  stamps: Stamps,
  jobs: readonly (readonly [messageId: string, seq: number])[],
): Promise<Map<string, string>> {
  const perRead = KV_LIMITS.maxGetMany - 2;
  const decoded: DecodedJob[] = [];
  for (let i = 0; i < jobs.length; i += perRead) {
    const chunk = jobs.slice(i, i + perRead);
    const keys = chunk.map(([, seq]) => layout.jobKey(seq));
    const [epoch, meta, ...entries] = await kv.getMany([layout.epochKey, layout.metaKey, ...keys]);
    checkStamps(stamps, epoch, meta);
    chunk.forEach(([id, seq], k) => {
      const entry = entries[k];
      const job = entry.versionstamp === null ? undefined : decodeJob(entry.value, seq);
      if (job?.messageId !== id) {
        throw malformed(`the job record of ${id} at seq ${seq} is missing`);
      }
      decoded.push(job);
    });
  }
  const partKeys = decoded.flatMap((job) =>
    Array.from({ length: job.parts }, (_, n) => [job.seq, layout.partKey(job.seq, n + 1)] as const)
  );
  const parts = new Map<number, Uint8Array[]>();
  for (let i = 0; i < partKeys.length; i += perRead) {
    const chunk = partKeys.slice(i, i + perRead);
    const [epoch, meta, ...entries] = await kv.getMany([
      layout.epochKey,
      layout.metaKey,
      ...chunk.map(([, key]) => key),
    ]);
    checkStamps(stamps, epoch, meta);
    chunk.forEach(([seq], k) => {
      if (entries[k].versionstamp === null) {
        throw malformed(`a payload part of seq ${seq} is missing`);
      }
      parts.set(seq, [...(parts.get(seq) ?? []), checkPart(entries[k].value, seq)]);
    });
  }
  return new Map(decoded.map((job) => [job.messageId, joinPayload(job, parts.get(job.seq) ?? [])]));
}

/**
 * The completed records and, with `jobs`, the jobs they hold. They are hints: a record that
 * cannot be read counts as one job, to be deleted in its turn, and holds none.
 */
async function readCompletedRecords(
  kv: KvLike,
  layout: KvQueueLayout,
  jobs: boolean,
): Promise<{ completed: CompletedRecordInfo[]; completedJobs: CompletedEntry[] }> {
  const completed: CompletedRecordInfo[] = [];
  const completedJobs: CompletedEntry[] = [];
  for await (const entry of list(kv, layout.completedPrefix)) {
    const n = layout.parse(entry.key, "completed")?.[0];
    if (n === undefined) continue; // not one of ours to count or delete
    let held: CompletedEntry[] = [];
    try {
      held = decodeCompleted(entry.value);
    } catch {
      // unreadable: counted as one job below, holding none
    }
    completed.push({ n, count: Math.max(1, held.length) });
    if (jobs) completedJobs.push(...held);
  }
  return { completed, completedJobs };
}

/** The accepted runs as `[first, last]`, ascending; overlapping runs are malformed. */
async function readRuns(kv: KvLike, layout: KvQueueLayout): Promise<[number, number][]> {
  const runs: [number, number][] = [];
  for await (const entry of list(kv, layout.acceptedPrefix)) {
    const first = seqOf(layout, entry, "accepted");
    const last = decodeAccepted(entry.value, first);
    const previous = runs.at(-1);
    if (previous && previous[1] >= first) {
      throw malformed(`the accepted runs at seq ${previous[0]} and ${first} overlap`);
    }
    runs.push([first, last]);
  }
  return runs;
}

async function readParts(
  kv: KvLike,
  layout: KvQueueLayout,
  bySeq: ReadonlyMap<number, DecodedJob>,
): Promise<{ parts: Map<number, Uint8Array[]>; orphans: KvKey[] }> {
  const parts = new Map<number, Uint8Array[]>();
  const orphans: KvKey[] = [];
  for await (const entry of list(kv, layout.partPrefix)) {
    const [seq, n] = layout.parse(entry.key, "part") ?? badKey(entry, "part");
    if (!bySeq.has(seq)) {
      orphans.push(layout.partKey(seq, n));
      continue;
    }
    const found = parts.get(seq) ?? [];
    if (n !== found.length + 1) throw malformed(`part ${n} of seq ${seq} is out of order`);
    found.push(checkPart(entry.value, seq));
    parts.set(seq, found);
  }
  for (const job of bySeq.values()) {
    const found = parts.get(job.seq)?.length ?? 0;
    if (found !== job.parts) {
      throw malformed(`the job at seq ${job.seq} has ${found} of ${job.parts} parts`);
    }
  }
  return { parts, orphans };
}

function list(kv: KvLike, prefix: KvKey): AsyncIterable<KvEntryLike> {
  return kv.list({ prefix }, { batchSize: KV_LIMITS.maxListBatch });
}

function seqOf(
  layout: KvQueueLayout,
  entry: KvEntryLike,
  kind: "job" | "flags" | "accepted",
): number {
  return (layout.parse(entry.key, kind) ?? badKey(entry, kind))[0];
}

function badKey(entry: KvEntryLike, kind: string): never {
  throw malformed(`a ${kind} key has the wrong shape (${entry.key.map(String).join("/")})`);
}
