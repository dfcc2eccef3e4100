/**
 * The tries an instance of a shared flow started from its claims, one record a commit: a job
 * claimed from the backlog needs no write of its own when its controller stores it.
 *
 * - **Written by the start.** The commit (a unit of the controller's durable lane) that starts
 *   tries of claimed jobs writes one record `[P, "tries", instance, epoch, n]` listing them, each
 *   with its sequence, its start time and the tries it had before. The job's own record stays
 *   as claimed (owner set, no try); it is written next when the try ends, with its outcome.
 * - **Read over the record.** Where a reload or a takeover finds a claimed job (its record names
 *   the instance, without a try of its own) listed in a tries record with the attempts its record
 *   has, that try was started: the job is read as `placement.started` from it. A job with a try
 *   in its own record (a later write) is read as that record says; one that left and came back
 *   has other attempts and is not matched.
 * - **Forgotten lazily.** A tries record goes with a later commit of the instance once none of
 *   its jobs is still held in that try; a reload writes the tries it keeps into the jobs' own
 *   records and removes every tries record of the instance.
 *
 * @module
 */

import type { KvKey } from "../queue/deno_kv/port.ts";
import { type Entry, malformed } from "./codec.ts";
import type { ClusterKeys } from "./keys.ts";
import { type ClusterKvLike, listAll } from "./kv_writes.ts";
import { started } from "./placement.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** One started try, as its tries record keeps it. */
export interface Start {
  /** Its store sequence. */
  readonly seq: number;
  /** When it started, epoch ms. */
  readonly at: number;
  /** The job's attempts before it (a guard against a job that left and came back). */
  readonly before: number;
}

/** The key of one tries record. */
export function triesKey(keys: ClusterKeys, instance: string, epoch: number, n: number): KvKey {
  return [...keys.prefix, "tries", instance, epoch, n];
}

/** A tries record's value. */
export function encodeTries(starts: ReadonlyMap<string, Start>): Uint8Array {
  const jobs = [...starts].map(([id, start]) => [id, start.seq, start.at, start.before]);
  return encoder.encode(JSON.stringify({ jobs }));
}

/** Every started try an instance's tries records list, and their keys. */
export async function readStarted(
  kv: ClusterKvLike,
  keys: ClusterKeys,
  instance: string,
  signal?: AbortSignal,
): Promise<{ starts: Map<string, Start>; keys: KvKey[] }> {
  const starts = new Map<string, Start>();
  const found: KvKey[] = [];
  const prefix = [...keys.prefix, "tries", instance];
  for (const entry of await listAll(kv, { prefix }, undefined, signal)) {
    found.push(entry.key as KvKey);
    for (const [id, start] of decodeTries(entry.value, entry.key)) {
      const known = starts.get(id);
      if (!known || known.seq < start.seq) starts.set(id, start);
    }
  }
  return { starts, keys: found };
}

/** The job as its latest started try left it: `entry` itself unless `start` applies to it. */
export function withStart(entry: Entry, start: Start | undefined): Entry {
  if (!start || entry.trial || entry.record.attempts !== start.before) return entry;
  return started(entry, start.seq, start.at, true);
}

function decodeTries(value: unknown, key: readonly unknown[]): [string, Start][] {
  const where = `the tries record ${JSON.stringify(key.slice(-2))}`;
  if (!(value instanceof Uint8Array)) throw malformed(`${where} is not bytes`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(decoder.decode(value));
  } catch (error) {
    throw malformed(`${where} is not JSON`, error);
  }
  const jobs = (parsed as { jobs?: unknown } | null)?.jobs;
  if (!Array.isArray(jobs)) throw malformed(`${where} holds no list of tries`);
  return jobs.map((job) => {
    const [id, seq, at, before] = Array.isArray(job) ? job : [];
    if (
      typeof id !== "string" || !Number.isSafeInteger(seq) || typeof at !== "number" ||
      !Number.isSafeInteger(before)
    ) {
      throw malformed(`${where} holds a malformed try`);
    }
    return [id, { seq, at, before }];
  });
}
