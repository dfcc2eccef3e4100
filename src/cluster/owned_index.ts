/**
 * The index of the jobs an instance of a shared flow holds: what its own reload and a survivor's
 * takeover read to find them, without scanning every record.
 *
 * - **Written with the claims.** Each claim commit adds one list `[P, "owned", instance, epoch, n]`
 *   naming the jobs it claims (a job stored without a claim gets a list of its own), in the same
 *   commit, so no job is ever held without being listed.
 * - **Shrunk lazily.** A job that leaves (finished, back in the backlog, dead) stays listed until
 *   a later commit of the instance rewrites its list, or deletes it once empty, after the job's
 *   own change has landed. So the index is a superset of what the instance holds, never less, and
 *   a job costs no index write of its own when it finishes.
 * - **Read against the records.** A listed job is the instance's only while its record names the
 *   instance as its owner: a job that left and was claimed again elsewhere is skipped.
 *
 * Stores written before the lists keep one key a job, `[P, "owned", instance, id]`, with an empty
 * value; they are read the same way and replaced by a list at the instance's next load.
 *
 * @module
 */

import type { KvEntryLike, KvKey } from "../queue/deno_kv/port.ts";
import { malformed } from "./codec.ts";
import type { ClusterKeys } from "./keys.ts";
import { Change, type ClusterKvLike, listAll } from "./kv_writes.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/** The key of one list. */
export function listKey(keys: ClusterKeys, instance: string, epoch: number, n: number): KvKey {
  return [...keys.ownedBy(instance), epoch, n];
}

/** A list's value. */
export function encodeList(ids: Iterable<string>): Uint8Array {
  return encoder.encode(JSON.stringify({ ids: [...ids] }));
}

/** What the index says an instance holds. */
export interface OwnedIndex {
  /** Every listed MessageID (a superset of the jobs held). */
  readonly ids: Set<string>;
  /** Every key of the index (lists, and the one-a-job keys of older stores). */
  readonly keys: KvKey[];
}

/** Read an instance's index. */
export async function readOwned(
  kv: ClusterKvLike,
  keys: ClusterKeys,
  instance: string,
  signal?: AbortSignal,
): Promise<OwnedIndex> {
  const prefix = keys.ownedBy(instance);
  const depth = prefix.length;
  const ids = new Set<string>();
  const found: KvKey[] = [];
  for (const entry of await listAll(kv, { prefix }, undefined, signal)) {
    found.push(entry.key as KvKey);
    const part = entry.key[depth];
    if (typeof part === "string") ids.add(part); // one key a job (older stores)
    else for (const id of decodeList(entry)) ids.add(id);
  }
  return { ids, keys: found };
}

function decodeList(entry: KvEntryLike): string[] {
  const where = `the owned list ${JSON.stringify(entry.key.slice(-2))}`;
  if (!(entry.value instanceof Uint8Array)) throw malformed(`${where} is not bytes`);
  let parsed: unknown;
  try {
    parsed = JSON.parse(decoder.decode(entry.value));
  } catch (error) {
    throw malformed(`${where} is not JSON`, error);
  }
  const ids = (parsed as { ids?: unknown } | null)?.ids;
  if (!Array.isArray(ids) || !ids.every((id) => typeof id === "string")) {
    throw malformed(`${where} holds no list of MessageIDs`);
  }
  return ids;
}

/** Changes deleting `keys`, 500 a change. */
export function dropAll(keys: readonly KvKey[]): Change[] {
  const drops: Change[] = [];
  for (let i = 0; i < keys.length; i += 500) {
    const drop = new Change();
    for (const key of keys.slice(i, i + 500)) drop.delete(key);
    drops.push(drop);
  }
  return drops;
}
