/**
 * A flow written by the single-instance Deno KV job store (`DenoKvJobStore`, store format 1 or
 * 2) moves into the shared layout, in place, when a shared instance first loads its prefix: so
 * a flow that ran on one process is joined by others without an export or a second prefix.
 *
 * 1. **Fence the old writer.** The single store's journal is opened as its own load would open
 *    it: the next epoch, under a check on the current one. A process still running the old store
 *    finds its epoch moved at its next write and stops (`QueueFencedError`); nothing it writes
 *    lands after this.
 * 2. **Read everything** the journal holds: the live jobs (with their payloads and tries in
 *    progress) and the retained finished ones.
 * 3. **Write each job where the shared layout keeps its state** (`placement.ts`): a queued job
 *    with its ready entry, a dead one in the dead-letter order, a finished one as its record
 *    (expiring when its retention would have), a try that was in progress back in the backlog
 *    as a lost instance's would come back (it runs again: at-least-once). Each commit checks the
 *    jobs' records absent and sums the counters of the jobs it writes, so a migration cut short
 *    (a crash) and run again by the next load skips the jobs already moved and counts each once.
 * 4. **Remove the old layout**, its epoch and meta keys last: until then, a load sees a flow to
 *    migrate. The pause flag (`[P, "paused"]`) is the same key in both layouts and stays.
 *
 * @module
 */

import type { Clock } from "../core/clock.ts";
import type { KvKey, KvLike } from "../queue/deno_kv/port.ts";
import type { JobRecord } from "../lifecycle/job_record.ts";
import type { JobStoreSettings } from "../backlog/job_store.ts";
import type { JournalEntry } from "../backlog/job_store_engine.ts";
import { DenoKvJournal } from "../backlog/deno_kv/journal.ts";
import {
  encodeEntry,
  encodeFinished,
  type Entry,
  INLINE_BYTES,
  splitPayload,
  utf8Bytes,
} from "./codec.ts";
import type { ClusterKeys } from "./keys.ts";
import { Change, type ClusterKvLike, commitChanges, listAll, readMany } from "./kv_writes.ts";
import { dropAll } from "./owned_index.ts";
import { placeQueued, recover } from "./placement.ts";

/** The top-level names of the single-instance store's keys (format 1 and 2). */
const OLD_NAMES = ["job", "payload", "try", "finished", "done"] as const;
/** Names only the bare work queue (`DenoKvWorkQueue`) writes: not a job store, not migrated. */
const WORK_QUEUE_NAMES = ["flags", "accepted", "completed", "part"] as const;

/** Whether `keys.prefix` holds a bare work queue's keys (`DenoKvWorkQueue`). */
export async function holdsWorkQueue(
  kv: ClusterKvLike,
  keys: ClusterKeys,
  signal?: AbortSignal,
): Promise<boolean> {
  const [meta] = await readMany(kv, [[...keys.prefix, "meta"]], signal);
  if (meta.value instanceof Uint8Array) {
    try {
      // The work queue's meta says {"version","currentSeq"}; the job store's {"v","seq"}.
      if ("version" in JSON.parse(new TextDecoder().decode(meta.value))) return true;
    } catch {
      return true; // neither store's: not to be touched
    }
  }
  for (const name of WORK_QUEUE_NAMES) {
    if ((await listAll(kv, { prefix: [...keys.prefix, name] }, 1, signal)).length > 0) return true;
  }
  return false;
}
const RACE_ATTEMPTS = 8;

/** What a migration needs. */
export interface MigrationContext {
  readonly kv: ClusterKvLike;
  readonly keys: ClusterKeys;
  readonly settings: JobStoreSettings;
  readonly clock: Clock;
  readonly random: () => number;
  /** The migrating instance (named as the lost one in a try's error). */
  readonly instance: string;
}

/** Move a single-instance store under `keys.prefix` into the shared layout; how many jobs. */
export async function migrateSingleInstance(
  context: MigrationContext,
  signal?: AbortSignal,
): Promise<number> {
  const { kv, keys, settings } = context;
  const journal = new DenoKvJournal(kv as unknown as KvLike, keys.prefix, settings.retention);
  const { snapshot } = await journal.open(signal, true);
  const finished = await journal.readFinished();
  const now = context.clock.now();
  const jobs = new Map<string, Change>();
  for (const entry of snapshot.entries) {
    const payload = snapshot.payloads.get(entry.record.id);
    const change = liveJob(context, entry, payload, now);
    if (change) jobs.set(entry.record.id, change);
  }
  for (const entry of finished) {
    if (jobs.has(entry.record.id)) continue; // run again after it finished: the live one counts
    const change = finishedJob(context, entry.record, now);
    if (change) jobs.set(entry.record.id, change);
  }
  let pending = [...jobs.keys()];
  let moved = 0;
  for (let attempt = 1; pending.length > 0; attempt++) {
    // Jobs a previous run (or a concurrent migrator) moved already are skipped.
    const present = await readMany(kv, pending.map((id) => keys.record(id)), signal);
    pending = pending.filter((_, i) => present[i].versionstamp === null);
    const outcome = await commitChanges(kv, keys, [], pending.map((id) => jobs.get(id)!), signal);
    moved += outcome.applied;
    pending = pending.slice(outcome.applied);
    if (outcome.ok) break;
    if (attempt >= RACE_ATTEMPTS) {
      throw new Error(`Cannot migrate the job store: its jobs kept changing (${attempt} tries)`);
    }
  }
  const old: KvKey[] = [];
  for (const name of OLD_NAMES) {
    for (const entry of await listAll(kv, { prefix: [...keys.prefix, name] }, undefined, signal)) {
      old.push(entry.key as KvKey);
    }
  }
  await commitChanges(kv, keys, [], dropAll(old), signal);
  await commitChanges(kv, keys, [], dropAll(keys.singleInstanceMarkers), signal);
  return moved;
}

/** The change that writes a live job (queued, dead, or with a try in progress). */
function liveJob(
  context: MigrationContext,
  journaled: JournalEntry,
  payload: string | undefined,
  now: number,
): Change | undefined {
  const { keys, settings } = context;
  const id = journaled.record.id;
  const change = new Change().check(keys.record(id), null);
  const text = payload ?? "null";
  let entry: Entry;
  if (utf8Bytes(text) <= INLINE_BYTES) {
    entry = { record: journaled.record, order: journaled.order ?? 0, payload: text };
  } else {
    const parts = splitPayload(text);
    parts.forEach((part, n) => change.set(keys.part(id, n), part));
    entry = { record: journaled.record, order: journaled.order ?? 0, parts: parts.length };
  }
  let record: JobRecord = journaled.record;
  let lost = 0;
  if (journaled.active) {
    // The old process may have been running it: it comes back as a lost instance's try does.
    const { accepted, confirmed, outcome, seq } = journaled.active;
    const trial = {
      seq,
      accepted,
      confirmed,
      from: "waiting" as const,
      ...(outcome ? { outcome } : {}),
    };
    const recovered = recover({ ...entry, trial }, {
      defaults: settings.defaults,
      now,
      random: context.random,
      cancelRequested: false,
      instance: context.instance,
    });
    record = recovered.record;
    lost = recovered.lost;
  }
  const placed: Entry = { ...entry, record, ...(lost > 0 ? { lost } : {}) };
  change.move(undefined, record.state);
  switch (record.state) {
    case "waiting":
    case "failed":
      placeQueued(change, keys, placed);
      return change;
    case "dead":
      change.set(keys.record(id), encodeEntry(placed));
      change.set(keys.deadEntry(record.finishedAt ?? 0, id), new Uint8Array(0));
      return change;
    case "completed":
    case "cancelled":
      return finishedJob(context, record, now);
    case "active":
      return undefined; // not a state a journal keeps without its try
  }
}

/** The change that writes a finished job, expiring when its retention would have. */
function finishedJob(
  context: MigrationContext,
  record: JobRecord,
  now: number,
): Change | undefined {
  const { keys, settings } = context;
  const left = (record.finishedAt ?? now) + settings.retention - now;
  if (settings.retainedJobs === 0 || left <= 0) return undefined;
  return new Change()
    .check(keys.record(record.id), null)
    .set(keys.record(record.id), encodeFinished(record), Math.max(1, Math.round(left)));
}
