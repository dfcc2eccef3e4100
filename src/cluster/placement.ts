/**
 * Where a job of a shared flow lives in KV, by state, and the writes that move it there. Pure:
 * each function adds to a {@linkcode Change} and returns the job's new entry.
 *
 * | state | keys |
 * |---|---|
 * | waiting, failed (queued) | record, ready entry (a copy of the record), band marker |
 * | claimed or trying at an instance | record (with owner and try), listed in the owner's index |
 * | dead | record, dead-letter entry |
 * | completed, cancelled | record, finished (expiring after the retention); nothing else |
 *
 * The invariant the claims rely on: **a queued job's ready entry exists and equals its record**
 * (both are written, or both removed, in the same commit), so a claim that checks the ready
 * entry's versionstamp knows the record has not changed since it listed the entry.
 *
 * How a job held by an instance that is gone (taken over, or restarted without it in memory)
 * comes back is {@linkcode recover}: a claimed job goes back as it was; a try that was never
 * handed to a worker is undone; a try that may have been running is undone too (an instance's
 * loss does not use up the job's tries) unless the job has now been on more than `lostLimit`
 * lost instances, when it ends as a failed try (`InstanceLostError`), as the controller does for
 * a job whose workers keep dying.
 *
 * @module
 */

import { finishTry, type JobOutcome, type JobRecord, startTry } from "../lifecycle/job_record.ts";
import type { ResolvedDefaults } from "../lifecycle/job_options.ts";
import { encodeEntry, encodeFinished, type Entry } from "./codec.ts";
import { bandOf, type ClusterKeys } from "./keys.ts";
import type { Change } from "./kv_writes.ts";

const EMPTY = new Uint8Array(0);
const COMPLETED: JobOutcome = { kind: "completed" };

/** What placing a job needs besides the job. */
export interface PlacementContext {
  readonly keys: ClusterKeys;
  /** Finished jobs are kept this long, ms (0: not kept). */
  readonly retention: number;
}

/** The ready entry key of a queued entry. */
export function readyKeyOf(keys: ClusterKeys, entry: Entry) {
  const { record } = entry;
  return keys.readyEntry(record.priority, record.runAt, entry.order, record.id);
}

/** Write a queued job (waiting or failed): its record and its ready entry, and mark its band. */
export function placeQueued(change: Change, keys: ClusterKeys, entry: Entry): Entry {
  const value = encodeEntry(entry);
  change.set(keys.record(entry.record.id), value);
  change.set(readyKeyOf(keys, entry), value);
  change.set(keys.band(bandOf(entry.record.priority)), EMPTY);
  change.wakes = true;
  return entry;
}

/** Delete a job's payload parts (an inline payload goes with its record). */
export function dropPayload(change: Change, keys: ClusterKeys, entry: Entry): void {
  for (let n = 0; n < (entry.parts ?? 0); n++) change.delete(keys.part(entry.record.id, n));
}

/**
 * A job leaves its owner (or the backlog) with `record` as its new state: write it where that
 * state lives and count the move from `before`'s state. The owner's index forgets it later
 * (`owned_index.ts`); its record no longer names the owner from this change on.
 */
export function settle(
  change: Change,
  context: PlacementContext,
  before: Entry,
  record: JobRecord,
  lost = before.lost ?? 0,
): Entry | undefined {
  const { keys } = context;
  const id = record.id;
  change.move(before.record.state, record.state);
  const base: Entry = {
    record,
    order: before.order,
    ...(before.payload !== undefined ? { payload: before.payload } : { parts: before.parts }),
    ...(lost > 0 ? { lost } : {}),
  };
  switch (record.state) {
    case "waiting":
    case "failed":
      return placeQueued(change, keys, base);
    case "dead":
      change.set(keys.record(id), encodeEntry(base));
      change.set(keys.deadEntry(record.finishedAt ?? 0, id), EMPTY);
      return base;
    case "completed":
    case "cancelled":
      if (context.retention > 0) {
        change.set(keys.record(id), encodeFinished(record), context.retention);
      } else change.delete(keys.record(id));
      dropPayload(change, keys, before);
      return undefined;
    case "active":
      throw new TypeError(`Cannot settle job ${id} as active`);
  }
}

/** The entry of a queued job claimed by `owner` (the record is unchanged). */
export function claimed(entry: Entry, owner: string): Entry {
  const { trial: _, ...rest } = entry;
  return { ...rest, owner };
}

/**
 * A job's try starts at `seq`: the record goes active, remembering what it replaced. A job
 * claimed from the backlog counts as accepted at once (`accepted`).
 */
export function started(entry: Entry, seq: number, now: number, accepted = false): Entry {
  const from = entry.record.state === "failed" ? "failed" : "waiting";
  return {
    ...entry,
    record: startTry(entry.record, now),
    trial: {
      seq,
      accepted,
      confirmed: false,
      from,
      ...(entry.record.startedAt === undefined ? {} : { startedBefore: entry.record.startedAt }),
    },
  };
}

/** The record as it was before the try in progress started (the try is undone). */
export function undoneTry(entry: Entry): JobRecord {
  const trial = entry.trial;
  if (!trial) return entry.record;
  const { startedAt: _, ...rest } = entry.record;
  return {
    ...rest,
    state: trial.from,
    attempts: Math.max(0, entry.record.attempts - 1),
    ...(trial.startedBefore === undefined ? {} : { startedAt: trial.startedBefore }),
  };
}

/** The record after the try's confirmed outcome applies. */
export function finished(
  entry: Entry,
  outcome: JobOutcome | undefined,
  defaults: ResolvedDefaults,
  now: number,
  random: () => number,
): JobRecord {
  return finishTry(entry.record, outcome ?? COMPLETED, defaults, now, random);
}

/** Why a job held by a lost instance comes back. */
export interface Recovery {
  /** The job's new record. */
  readonly record: JobRecord;
  /** Its lost-instance count afterwards. */
  readonly lost: number;
}

/**
 * A job held by an instance that is gone comes back (see the module documentation). A cancel
 * request for it ends it cancelled.
 */
export function recover(
  entry: Entry,
  options: {
    readonly defaults: ResolvedDefaults;
    readonly now: number;
    readonly random: () => number;
    readonly cancelRequested: boolean;
    readonly instance: string;
  },
): Recovery {
  const { record, trial } = entry;
  const lost = entry.lost ?? 0;
  const { defaults, now, random } = options;
  if (options.cancelRequested) {
    return { record: { ...record, state: "cancelled", finishedAt: now }, lost };
  }
  if (!trial) return { record, lost };
  if (trial.confirmed) {
    return { record: finished(entry, trial.outcome, defaults, now, random), lost };
  }
  if (!trial.accepted) return { record: undoneTry(entry), lost };
  const lostNow = lost + 1;
  if (lostNow > defaults.lostLimit) {
    const error = {
      name: "InstanceLostError",
      message: `the instance running it (${options.instance}) was lost ${lostNow} times`,
    };
    return {
      record: finishTry(record, { kind: "failed", error }, defaults, now, random),
      lost: lostNow,
    };
  }
  return { record: undoneTry(entry), lost: lostNow };
}
