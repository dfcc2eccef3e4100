/**
 * How a shared flow writes to Deno KV: changes that must land together, packed into atomic
 * commits that fit KV's limits, each carrying the checks that fence it, and retried while
 * SQLite says `database is locked`.
 *
 * - A {@linkcode Change} is what one job's step writes (its checks, sets, deletes and counter
 *   deltas). It always lands in one atomic commit: a job is never half moved.
 * - {@linkcode commitChanges} packs consecutive changes into as few commits as the limits allow
 *   (100 checks on Deno, 10 on npm `@deno/kv`; 1,000 mutations; 800 KiB), each with the common
 *   checks (an instance's fence).
 *   A commit whose checks fail stops the sequence: the caller learns how many changes landed.
 * - Counters are `sum` mutations: blind, so writers never conflict on them; each commit sums the
 *   deltas of its own changes, so a counter always agrees with the records it counts.
 * - `database is locked` (several processes on one SQLite file) means the commit was not
 *   applied: it is retried with jittered backoff. A call that carries an abort signal (the
 *   controller's units, whose signal is their per-attempt timeout) retries until the signal
 *   aborts; any other call up to 12 times (about 2 s in all; `retry_locked.ts`), then
 *   throws the error (retriable: nothing was applied). Any other error is thrown at once: its
 *   outcome is unknown.
 *
 * @module
 */

import { KV_LIMITS, type KvKey } from "../queue/deno_kv/port.ts";
import { retryLocked } from "../queue/deno_kv/retry_locked.ts";
import type { KvCheckLike, KvEntryLike } from "../queue/deno_kv/port.ts";
import { encodedKeySize } from "../queue/deno_kv/layout.ts";
import type { JobRecord } from "../lifecycle/job_record.ts";
import { counterAddend } from "./codec.ts";
import { type ClusterKeys, type CounterName, COUNTERS } from "./keys.ts";

/** The part of `Deno.AtomicOperation` (or npm `@deno/kv`'s) a shared flow uses. */
export interface ClusterAtomicLike {
  /** Adds versionstamp checks. */
  check(...checks: KvCheckLike[]): ClusterAtomicLike;
  /** Adds a set; `expireIn` (ms) lets KV delete the key some time after. */
  set(key: KvKey, value: Uint8Array, options?: { readonly expireIn?: number }): ClusterAtomicLike;
  /** Adds a delete. */
  delete(key: KvKey): ClusterAtomicLike;
  /** Adds a `sum` of a `KvU64` (wrapping at 2^64). */
  sum(key: KvKey, n: bigint): ClusterAtomicLike;
  /** Commits: `{ ok: false }` when a check failed (nothing was written). */
  commit(): Promise<{ readonly ok: true; readonly versionstamp: string } | { readonly ok: false }>;
}

/** What a list may select: a prefix (optionally from a start key), or a range. */
export type ClusterListSelector =
  | { readonly prefix: KvKey; readonly start?: KvKey }
  | { readonly start: KvKey; readonly end: KvKey };

/** The part of `Deno.Kv` (or npm `@deno/kv`) a shared flow uses. */
export interface ClusterKvLike {
  /** Reads up to 10 keys consistently. */
  getMany(keys: readonly KvKey[]): Promise<readonly KvEntryLike[]>;
  /** Lists keys in order (consistent only within one batch). */
  list(
    selector: ClusterListSelector,
    options?: { readonly limit?: number; readonly batchSize?: number },
  ): AsyncIterable<KvEntryLike>;
  /** Starts an atomic commit. */
  atomic(): ClusterAtomicLike;
}

/** One KV mutation. */
type Mutation =
  | {
    readonly kind: "set";
    readonly key: KvKey;
    readonly value: Uint8Array;
    readonly expireIn?: number;
  }
  | { readonly kind: "delete"; readonly key: KvKey };

/** The counter bucket of a record state (finished jobs are not counted). */
export function bucketOf(state: JobRecord["state"] | undefined): CounterName | undefined {
  switch (state) {
    case "waiting":
    case "failed":
    case "active":
    case "dead":
      return state;
    default:
      return undefined;
  }
}

/** What one step of one job writes; it lands in a single atomic commit. */
export class Change {
  readonly checks: KvCheckLike[] = [];
  readonly mutations: Mutation[] = [];
  readonly deltas = new Map<CounterName, number>();
  /** It puts a job in the ready index: its commit moves the wake counter. */
  wakes = false;

  /** The key must still have this versionstamp (null: must not exist). */
  check(key: KvKey, versionstamp: string | null): this {
    this.checks.push({ key, versionstamp });
    return this;
  }

  /** Set a key. */
  set(key: KvKey, value: Uint8Array, expireIn?: number): this {
    this.mutations.push(
      expireIn === undefined ? { kind: "set", key, value } : { kind: "set", key, value, expireIn },
    );
    return this;
  }

  /** Delete a key. */
  delete(key: KvKey): this {
    this.mutations.push({ kind: "delete", key });
    return this;
  }

  /** A job moved from one record state to another: adjust the counters. */
  move(from: JobRecord["state"] | undefined, to: JobRecord["state"] | undefined): this {
    const before = bucketOf(from), after = bucketOf(to);
    if (before === after) return this;
    if (before) this.deltas.set(before, (this.deltas.get(before) ?? 0) - 1);
    if (after) this.deltas.set(after, (this.deltas.get(after) ?? 0) + 1);
    return this;
  }

  /** Mutation bytes as Deno KV counts them (checks once, sets key twice plus value). */
  get bytes(): number {
    let bytes = 0;
    for (const check of this.checks) bytes += encodedKeySize(check.key);
    for (const mutation of this.mutations) {
      const key = encodedKeySize(mutation.key);
      bytes += mutation.kind === "set" ? 2 * key + mutation.value.length : key;
    }
    return bytes;
  }

  /** Key bytes of the sets. */
  get setKeyBytes(): number {
    let bytes = 0;
    for (const mutation of this.mutations) {
      if (mutation.kind === "set") bytes += encodedKeySize(mutation.key);
    }
    return bytes;
  }
}

/** The outcome of {@linkcode commitChanges}. */
export interface CommitOutcome {
  /** How many changes landed (in order, unless committed side by side). */
  readonly applied: number;
  /** False when a commit's checks failed (the changes from `applied` on did not land). */
  readonly ok: boolean;
  /** The versionstamp of the last commit that landed. */
  readonly versionstamp?: string;
  /** Side by side: whether each change landed. */
  readonly landed?: readonly boolean[];
}

/** Checks per commit on backends that allow only ten (npm `@deno/kv`'s SQLite). */
const FEW_CHECKS = 10;
/** Per KV handle, the checks a commit may carry: Deno allows 100, npm `@deno/kv` 10. */
const checkLimits = new WeakMap<object, number>();

/**
 * Commit `changes` in order, as few atomic commits as KV's limits allow, each also checking
 * `common`. Stops at the first commit whose checks fail. A backend that refuses a commit for its
 * number of checks (npm `@deno/kv` allows ten) is remembered and the rest is packed smaller.
 */
export async function commitChanges(
  kv: ClusterKvLike,
  keys: ClusterKeys,
  common: readonly KvCheckLike[],
  changes: readonly Change[],
  signal?: AbortSignal,
): Promise<CommitOutcome> {
  let applied = 0;
  let versionstamp: string | undefined;
  while (applied < changes.length) {
    const maxChecks = checkLimits.get(kv) ?? KV_LIMITS.maxChecks;
    const group = changes.slice(
      applied,
      applied + groupSize(keys, common, changes, applied, maxChecks),
    );
    let result;
    try {
      result = await commitGroup(kv, keys, common, group, signal);
    } catch (error) {
      if (isTooManyChecks(error) && maxChecks > FEW_CHECKS) {
        checkLimits.set(kv, FEW_CHECKS);
        continue;
      }
      throw error;
    }
    if (!result.ok) return { applied, ok: false, versionstamp };
    applied += group.length;
    versionstamp = result.versionstamp;
  }
  return { applied, ok: true, versionstamp };
}

/**
 * Commit `changes` of different jobs (none depends on another landing first) in as few atomic
 * commits as fit KV's limits, all in flight at once: on a remote KV they cost one round trip,
 * not one each. Every commit is tried whatever the others do; `landed` says which changes
 * landed. Throws (after all settled) when a commit's outcome is unknown.
 */
export async function commitSideBySide(
  kv: ClusterKvLike,
  keys: ClusterKeys,
  common: readonly KvCheckLike[],
  changes: readonly Change[],
  signal?: AbortSignal,
): Promise<CommitOutcome> {
  const maxChecks = checkLimits.get(kv) ?? KV_LIMITS.maxChecks;
  const groups: [number, number][] = [];
  for (let start = 0; start < changes.length;) {
    const size = groupSize(keys, common, changes, start, maxChecks);
    groups.push([start, start + size]);
    start += size;
  }
  const results = await Promise.allSettled(
    groups.map(([from, to]) =>
      commitGroup(kv, keys, common, changes.slice(from, to), signal).catch((error) => {
        if (!isTooManyChecks(error) || maxChecks <= FEW_CHECKS) throw error;
        checkLimits.set(kv, FEW_CHECKS); // nothing landed: pack this group smaller, in order
        return commitChanges(kv, keys, common, changes.slice(from, to), signal).then(
          (outcome) => ({ ...outcome, partial: outcome.applied }),
        );
      })
    ),
  );
  const landed = new Array<boolean>(changes.length).fill(false);
  let applied = 0, ok = true, versionstamp: string | undefined, failure: unknown;
  results.forEach((result, i) => {
    const [from, to] = groups[i];
    if (result.status === "rejected") return void (failure ??= result.reason);
    const value = result.value as { ok: boolean; versionstamp?: string; partial?: number };
    const count = value.partial ?? (value.ok ? to - from : 0);
    for (let k = from; k < from + count; k++) landed[k] = true;
    applied += count;
    if (!value.ok) ok = false;
    if (value.ok) versionstamp = value.versionstamp;
  });
  if (failure !== undefined) throw failure;
  return { applied, ok, versionstamp, landed };
}

/** One atomic commit of `group`, retried while the database is locked. */
function commitGroup(
  kv: ClusterKvLike,
  keys: ClusterKeys,
  common: readonly KvCheckLike[],
  group: readonly Change[],
  signal: AbortSignal | undefined,
) {
  return retryLocked(() => {
    signal?.throwIfAborted();
    return atomicOf(kv, keys, common, group).commit();
  }, signal);
}

function atomicOf(
  kv: ClusterKvLike,
  keys: ClusterKeys,
  common: readonly KvCheckLike[],
  group: readonly Change[],
): ClusterAtomicLike {
  const atomic = kv.atomic();
  if (common.length > 0) atomic.check(...common);
  const sums = new Map<CounterName, number>();
  for (const change of group) {
    if (change.checks.length > 0) atomic.check(...change.checks);
    for (const m of change.mutations) {
      if (m.kind === "delete") atomic.delete(m.key);
      else if (m.expireIn === undefined) atomic.set(m.key, m.value);
      else atomic.set(m.key, m.value, { expireIn: m.expireIn });
    }
    for (const [name, delta] of change.deltas) sums.set(name, (sums.get(name) ?? 0) + delta);
  }
  for (const name of COUNTERS) {
    const delta = sums.get(name) ?? 0;
    if (delta !== 0) atomic.sum(keys.counter(name), counterAddend(delta));
  }
  if (group.some((change) => change.wakes)) atomic.sum(keys.wake, 1n);
  return atomic;
}

/** How many changes from `start` on fit one commit (at least one). */
function groupSize(
  keys: ClusterKeys,
  common: readonly KvCheckLike[],
  changes: readonly Change[],
  start: number,
  maxChecks: number,
): number {
  let checks = common.length, mutations = COUNTERS.length + 1, setKeyBytes = 0;
  let bytes = common.reduce((sum, check) => sum + encodedKeySize(check.key), 0) +
    COUNTERS.reduce((sum, name) => sum + encodedKeySize(keys.counter(name)) + 8, 0) +
    encodedKeySize(keys.wake) + 8;
  let count = 0;
  for (let i = start; i < changes.length; i++) {
    const change = changes[i];
    checks += change.checks.length;
    mutations += change.mutations.length;
    bytes += change.bytes;
    setKeyBytes += change.setKeyBytes;
    const fits = checks <= maxChecks && mutations <= KV_LIMITS.maxMutations &&
      bytes <= KV_LIMITS.maxMutationBytes && setKeyBytes <= KV_LIMITS.maxSetKeyBytes;
    if (!fits && count > 0) break;
    count += 1;
  }
  return count;
}

/** The checks one commit may carry on this KV (as learnt: Deno 100, npm `@deno/kv` 10). */
export function checkLimit(kv: ClusterKvLike): number {
  return checkLimits.get(kv) ?? KV_LIMITS.maxChecks;
}

/** Whether a commit with more than ten checks landed on this KV, or one was refused. */
export function checkLimitKnown(kv: ClusterKvLike): boolean {
  return checkLimits.has(kv);
}

/** A commit with `checks` checks landed on `kv`: it takes that many. */
export function checksLanded(kv: ClusterKvLike, checks: number): void {
  if (checks > FEW_CHECKS && !checkLimits.has(kv)) checkLimits.set(kv, KV_LIMITS.maxChecks);
}

/** Whether `error` is a backend refusing a commit for its number of checks. */
export function isTooManyChecks(error: unknown): boolean {
  return error instanceof Error && /too ?many ?checks/i.test(error.message + error.name);
}

/** Read `keys` (any number of them, ten at a time), retrying while the database is locked. */
export async function readMany(
  kv: ClusterKvLike,
  keys: readonly KvKey[],
  signal?: AbortSignal,
): Promise<KvEntryLike[]> {
  const chunks: KvKey[][] = [];
  for (let i = 0; i < keys.length; i += KV_LIMITS.maxGetMany) {
    chunks.push(keys.slice(i, i + KV_LIMITS.maxGetMany));
  }
  const results = await Promise.all(
    chunks.map((chunk) => retryLocked(() => kv.getMany(chunk), signal)),
  );
  return results.flat();
}

/** List entries (all, or up to `limit`), retrying from scratch while the database is locked. */
export function listAll(
  kv: ClusterKvLike,
  selector: ClusterListSelector,
  limit?: number,
  signal?: AbortSignal,
): Promise<KvEntryLike[]> {
  return retryLocked(async () => {
    const entries: KvEntryLike[] = [];
    const options = limit === undefined
      ? { batchSize: KV_LIMITS.maxListBatch }
      : { limit, batchSize: Math.min(KV_LIMITS.maxListBatch, Math.max(1, limit)) };
    for await (const entry of kv.list(selector, options)) entries.push(entry);
    return entries;
  }, signal);
}
