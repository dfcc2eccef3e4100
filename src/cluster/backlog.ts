/**
 * The shared backlog: what any instance of a shared flow does with jobs it does not hold. Every
 * call reads KV and writes with optimistic checks (nothing of the backlog is kept in memory:
 * other instances write it too), retrying a bounded number of times when another writer got
 * there first.
 *
 * - **enqueue**: one commit per group of jobs, each new job checked absent (`versionstamp:
 *   null` on its record and finished keys), so a MessageID is created once across the flow. A
 *   known one changes nothing and is reported as it is. A batch too large for one commit is
 *   split (in order); a crash between its commits keeps a prefix, which a repeated call heals.
 * - **maxBacklog** is checked against the `waiting` and `failed` counters, read before the
 *   commit. They are exact (every commit that moves a job sums its counters), but the check is
 *   not serialized with other writers: jobs that other instances enqueue, or that fail back
 *   into the backlog, between the read and the commit can take the backlog past the limit by at
 *   most their number. Claims meanwhile only make room.
 * - **cancel** of a queued job cancels it here (checked on its record). A job held by another
 *   instance gets a cancel request under that instance, checked on the record so that a job
 *   that moved meanwhile is looked at again; its owner acts on it on its next lease round.
 * - **candidates** lists due jobs for a claim, band by band (highest priority first), and the
 *   earliest due time of the rest; an empty band's marker is removed under a check on it, so a
 *   concurrent enqueue into that band (which rewrites the marker) keeps it.
 *
 * @module
 */

import type { Clock } from "../core/clock.ts";
import {
  infoOf,
  isQueued,
  type JobInfo,
  type JobRecord,
  newRecord,
  reviveDead,
} from "../lifecycle/job_record.ts";
import type { KvEntryLike, KvKey } from "../queue/deno_kv/port.ts";
import {
  type BacklogCounts,
  BacklogFullError,
  type DeadLetterPage,
  type EnqueueResult,
  type JobStoreSettings,
  type NewJob,
} from "../backlog/job_store.ts";
import {
  decodeCounter,
  decodeEntry,
  decodeStored,
  type Entry,
  INLINE_BYTES,
  splitPayload,
  utf8Bytes,
} from "./codec.ts";
import { type ClusterKeys, COUNTERS } from "./keys.ts";
import { readStarted, withStart } from "./started_tries.ts";
import { Change, type ClusterKvLike, commitChanges, listAll, readMany } from "./kv_writes.ts";
import {
  dropPayload,
  type PlacementContext,
  placeQueued,
  readyKeyOf,
  settle,
} from "./placement.ts";

/** Orders one process gives out within a millisecond before running ahead of the clock. */
const ORDER_PER_MS = 1024;
/** How often a write that lost a race is tried again with fresh reads. */
const RACE_ATTEMPTS = 8;
/** Not-due entries counted per band when `counts` splits waiting from scheduled. */
export const SCHEDULED_SCAN = 1000;

/** A due job a claim may take: its ready entry as listed. */
export interface Candidate {
  readonly key: KvKey;
  readonly versionstamp: string;
  readonly entry: Entry;
  readonly band: number;
}

/** What a listing of due jobs found. */
export interface Candidates {
  /** Due jobs in ready order. */
  readonly due: Candidate[];
  /** The earliest due time of a queued job not yet due (Infinity: none seen). */
  readonly nextDue: number;
}

/** A job changed by a backlog call, for the owner's listener. */
export interface BacklogNotice {
  readonly job: JobInfo;
  readonly previous: JobRecord["state"] | undefined;
}

/** What a cancel found. */
export interface CancelResult {
  /** The job as it is now (`active` when an instance holds it). */
  readonly job: JobInfo | undefined;
  /** The change made here, if any. */
  readonly notice?: BacklogNotice;
}

/** The shared backlog of one flow, as one instance reaches it. */
export class SharedBacklog {
  readonly #kv: ClusterKvLike;
  readonly #keys: ClusterKeys;
  readonly #settings: JobStoreSettings;
  readonly #clock: Clock;
  readonly #placement: PlacementContext;
  #order = 0;

  constructor(
    kv: ClusterKvLike,
    keys: ClusterKeys,
    settings: JobStoreSettings,
    clock: Clock,
  ) {
    this.#kv = kv;
    this.#keys = keys;
    this.#settings = settings;
    this.#clock = clock;
    this.#placement = { keys, retention: settings.retention };
  }

  /** The placement context (keys, retention). */
  get placement(): PlacementContext {
    return this.#placement;
  }

  /** Add jobs; a known MessageID changes nothing. Resolves once the new ones are durable. */
  async enqueue(
    jobs: readonly NewJob[],
  ): Promise<{ results: EnqueueResult[]; notices: BacklogNotice[] }> {
    const now = this.#clock.now();
    const firsts = new Map<string, NewJob>();
    for (const job of jobs) if (!firsts.has(job.id)) firsts.set(job.id, job);
    const known = new Map<string, JobRecord>();
    /** Finished records past their retention, by versionstamp: replaced. */
    const stale = new Map<string, string>();
    let pending = [...firsts.keys()];
    const size = await this.#backlogSize();
    if (size + pending.length > this.#settings.maxBacklog) {
      // Near the limit: only the jobs that are really new count.
      await this.#lookUp(pending, now, known, stale);
      pending = pending.filter((id) => !known.has(id));
      if (pending.length > 0 && size + pending.length > this.#settings.maxBacklog) {
        throw new BacklogFullError(this.#settings.maxBacklog, size, pending.length);
      }
    }
    const created = new Map<string, JobRecord>();
    for (let attempt = 1; pending.length > 0; attempt++) {
      const changes = pending.map((id) => this.#create(firsts.get(id)!, now, stale.get(id)));
      const outcome = await commitChanges(this.#kv, this.#keys, [], changes);
      changes.slice(0, outcome.applied).forEach((_, i) => {
        const id = pending[i];
        created.set(id, newRecord(id, firsts.get(id)!.plan, now));
      });
      pending = pending.slice(outcome.applied);
      if (outcome.ok) break;
      if (attempt >= RACE_ATTEMPTS) {
        throw new Error(`Cannot enqueue: other writers changed these jobs ${attempt} times`);
      }
      // Someone created (or finished) some of these meanwhile: look them up and go on.
      await this.#lookUp(pending, now, known, stale);
      pending = pending.filter((id) => !known.has(id));
    }
    const results: EnqueueResult[] = [];
    const notices: BacklogNotice[] = [];
    const reported = new Set<string>();
    for (const job of jobs) {
      const record = created.get(job.id);
      if (record && !reported.has(job.id)) {
        reported.add(job.id);
        const info = infoOf(record, now);
        results.push({ job: info, created: true });
        notices.push({ job: info, previous: undefined });
      } else {
        results.push({ job: infoOf(record ?? known.get(job.id)!, now), created: false });
      }
    }
    return { results, notices };
  }

  /** A new job's writes; `replaces` is the versionstamp of a finished record past retention. */
  #create(job: NewJob, now: number, replaces: string | undefined): Change {
    const keys = this.#keys;
    const change = new Change().check(keys.record(job.id), replaces ?? null);
    const record = newRecord(job.id, job.plan, now);
    // Submission order across processes: the enqueue's time, then this process's count.
    const order = this.#order = Math.max(this.#order + 1, Math.floor(now) * ORDER_PER_MS);
    let entry: Entry;
    if (utf8Bytes(job.payload) <= INLINE_BYTES) {
      entry = { record, order, payload: job.payload };
    } else {
      const parts = splitPayload(job.payload);
      parts.forEach((part, n) => change.set(keys.part(job.id, n), part));
      entry = { record, order, parts: parts.length };
    }
    placeQueued(change, keys, entry);
    return change.move(undefined, record.state);
  }

  /** Which of `ids` are known now (into `known`); finished ones past retention go to `stale`. */
  async #lookUp(
    ids: readonly string[],
    now: number,
    known: Map<string, JobRecord>,
    stale: Map<string, string>,
  ): Promise<void> {
    const entries = await readMany(this.#kv, ids.map((id) => this.#keys.record(id)));
    const held = new Map<string, Entry[]>(); // by owner: claimed, with no try in the record
    ids.forEach((id, i) => {
      stale.delete(id);
      const { value, versionstamp } = entries[i];
      if (versionstamp === null) return;
      const stored = decodeStored(value, id);
      if (stored.entry) {
        known.set(id, stored.entry.record);
        const owner = stored.entry.owner;
        if (owner !== undefined && !stored.entry.trial) {
          held.set(owner, [...held.get(owner) ?? [], stored.entry]);
        }
      } else if (this.#expired(stored.finished, now)) stale.set(id, versionstamp);
      else known.set(id, stored.finished);
    });
    for (const [owner, jobs] of held) {
      // Their owner may have started their tries in a tries record (`started_tries.ts`).
      const { starts } = await readStarted(this.#kv, this.#keys, owner);
      for (const entry of jobs) {
        known.set(entry.record.id, withStart(entry, starts.get(entry.record.id)).record);
      }
    }
  }

  /** A job as it is now, or undefined. */
  async get(id: string): Promise<JobInfo | undefined> {
    const now = this.#clock.now();
    const found = await this.#read(id, now);
    if (!found) return undefined;
    let entry = found.entry;
    if (entry?.owner !== undefined && !entry.trial) {
      // Held, with no try in its record: its owner may have started one in a tries record.
      const { starts } = await readStarted(this.#kv, this.#keys, entry.owner);
      entry = withStart(entry, starts.get(id));
    }
    return infoOf(entry?.record ?? found.finished!, now);
  }

  /** The live entry or finished record of `id` (a finished one past retention is unknown). */
  async #read(
    id: string,
    now: number,
  ): Promise<{ entry?: Entry; finished?: JobRecord; versionstamp: string } | undefined> {
    const [{ value, versionstamp }] = await readMany(this.#kv, [this.#keys.record(id)]);
    if (versionstamp === null) return undefined;
    const { entry, finished } = decodeStored(value, id);
    if (entry) return { entry, versionstamp };
    return this.#expired(finished, now) ? undefined : { finished, versionstamp };
  }

  #expired(record: JobRecord, now: number): boolean {
    return now - (record.finishedAt ?? now) > this.#settings.retention;
  }

  /**
   * Cancel a job. A queued one is cancelled here; one held by `self` is reported `active` (its
   * controller cancels it); one held by another instance gets a cancel request there.
   */
  async cancel(id: string, self: string | undefined): Promise<CancelResult> {
    for (let attempt = 1;; attempt++) {
      const now = this.#clock.now();
      const found = await this.#read(id, now);
      if (!found) return { job: undefined };
      if (!found.entry) return { job: infoOf(found.finished!, now) };
      const { entry } = found;
      const info = infoOf(entry.record, now);
      if (entry.owner === self && self !== undefined) {
        return { job: { ...info, state: "active" } };
      }
      const change = new Change().check(this.#keys.record(id), found.versionstamp);
      let notice: BacklogNotice | undefined;
      if (entry.owner !== undefined) {
        change.set(this.#keys.cancel(entry.owner, id), new Uint8Array(0));
      } else if (isQueued(entry.record)) {
        change.delete(readyKeyOf(this.#keys, entry));
        const record: JobRecord = { ...entry.record, state: "cancelled", finishedAt: now };
        settle(change, this.#placement, entry, record);
        notice = { job: infoOf(record, now), previous: entry.record.state };
      } else {
        return { job: info }; // dead: nothing to cancel
      }
      const outcome = await commitChanges(this.#kv, this.#keys, [], [change]);
      if (outcome.ok) {
        return notice ? { job: notice.job, notice } : { job: { ...info, state: "active" } };
      }
      if (attempt >= RACE_ATTEMPTS) {
        throw new Error(`Cannot cancel ${id}: it changed under ${attempt} attempts`);
      }
    }
  }

  /** Dead jobs, oldest death first. */
  async deadLetters(limit: number, cursor?: string): Promise<DeadLetterPage> {
    const now = this.#clock.now();
    const keys = this.#keys;
    const after = parseCursor(cursor);
    const selector = after
      ? { prefix: keys.dead, start: [...keys.deadEntry(after.at, after.id), 0] }
      : { prefix: keys.dead };
    const listed = await listAll(this.#kv, selector, limit + 1);
    const depth = keys.dead.length;
    const page = listed.slice(0, limit).flatMap((entry) => {
      const [at, id] = [entry.key[depth], entry.key[depth + 1]];
      return typeof at === "number" && typeof id === "string" ? [{ at, id }] : [];
    });
    const records = await readMany(this.#kv, page.map(({ id }) => keys.record(id)));
    const jobs = page.flatMap(({ id }, i) => {
      if (records[i].versionstamp === null) return [];
      const record = decodeStored(records[i].value, id).entry?.record;
      return record?.state === "dead" ? [infoOf(record, now)] : [];
    });
    const last = page.at(-1);
    return listed.length > limit && last ? { jobs, cursor: `${last.at}:${last.id}` } : { jobs };
  }

  /** Give a dead job a fresh set of tries; undefined when it is not dead. */
  async retryDead(id: string): Promise<BacklogNotice | undefined> {
    for (let attempt = 1;; attempt++) {
      const now = this.#clock.now();
      const found = await this.#read(id, now);
      const entry = found?.entry;
      if (!entry || entry.record.state !== "dead") return undefined;
      const change = new Change()
        .check(this.#keys.record(id), found.versionstamp)
        .delete(this.#keys.deadEntry(entry.record.finishedAt ?? 0, id));
      const record = reviveDead(entry.record, now);
      settle(change, this.#placement, entry, record, 0);
      if ((await commitChanges(this.#kv, this.#keys, [], [change])).ok) {
        return { job: infoOf(record, now), previous: "dead" };
      }
      if (attempt >= RACE_ATTEMPTS) throw new Error(`Cannot retry ${id}: it kept changing`);
    }
  }

  /** Every dead job's id, oldest death first. */
  async deadIds(): Promise<string[]> {
    const depth = this.#keys.dead.length;
    const listed = await listAll(this.#kv, { prefix: this.#keys.dead });
    return listed.flatMap((entry) => {
      const id = entry.key[depth + 1];
      return typeof id === "string" ? [id] : [];
    });
  }

  /** Forget a dead job; false when it is not dead. */
  async deleteDead(id: string): Promise<boolean> {
    for (let attempt = 1;; attempt++) {
      const found = await this.#read(id, this.#clock.now());
      const entry = found?.entry;
      if (!entry || entry.record.state !== "dead") return false;
      const change = new Change()
        .check(this.#keys.record(id), found.versionstamp)
        .delete(this.#keys.record(id))
        .delete(this.#keys.deadEntry(entry.record.finishedAt ?? 0, id))
        .move("dead", undefined);
      dropPayload(change, this.#keys, entry);
      if ((await commitChanges(this.#kv, this.#keys, [], [change])).ok) return true;
      if (attempt >= RACE_ATTEMPTS) throw new Error(`Cannot delete ${id}: it kept changing`);
    }
  }

  /**
   * Up to `want` due jobs in ready order (bands from the highest priority), and the earliest due
   * time among the queued jobs listed that are not due yet.
   */
  async candidates(want: number, now: number): Promise<Candidates> {
    const keys = this.#keys;
    const due: Candidate[] = [];
    let nextDue = Infinity;
    const bandDepth = keys.bands.length;
    const bands = await listAll(this.#kv, { prefix: keys.bands });
    for (const marker of bands) {
      if (due.length >= want) break;
      const band = marker.key[bandDepth];
      if (typeof band !== "number") continue;
      const listed = await listAll(this.#kv, { prefix: keys.readyBand(band) }, want - due.length);
      if (listed.length === 0) {
        await this.#dropBand(marker);
        continue;
      }
      for (const entry of listed) {
        const runAt = entry.key[bandDepth + 1];
        const id = entry.key[bandDepth + 3];
        if (typeof runAt !== "number" || typeof id !== "string") continue;
        if (runAt > now) {
          nextDue = Math.min(nextDue, runAt);
          break;
        }
        due.push({
          key: entry.key as KvKey,
          versionstamp: entry.versionstamp!,
          entry: decodeEntry(entry.value, id),
          band,
        });
      }
    }
    return { due, nextDue };
  }

  /** Remove an empty band's marker, unless an enqueue rewrote it meanwhile. */
  async #dropBand(marker: KvEntryLike): Promise<void> {
    const change = new Change().check(marker.key as KvKey, marker.versionstamp).delete(
      marker.key as KvKey,
    );
    await commitChanges(this.#kv, this.#keys, [], [change]).catch(() => {});
  }

  /** Jobs waiting or failed across the flow (claimed ones included). */
  async #backlogSize(): Promise<number> {
    const [waiting, failed] = await readMany(this.#kv, [
      this.#keys.counter("waiting"),
      this.#keys.counter("failed"),
    ]);
    return decodeCounter(waiting.value) + decodeCounter(failed.value);
  }

  /**
   * How many jobs are where across the flow: the counters, with scheduled jobs (waiting, not
   * due) counted per band up to {@linkcode SCHEDULED_SCAN} (beyond that, a lower bound).
   */
  async counts(now: number): Promise<BacklogCounts> {
    const keys = this.#keys;
    const values = await readMany(this.#kv, COUNTERS.map((name) => keys.counter(name)));
    const [waiting, failed, active, dead] = values.map((entry) => decodeCounter(entry.value));
    let scheduled = 0;
    const bandDepth = keys.bands.length;
    for (const marker of await listAll(this.#kv, { prefix: keys.bands })) {
      const band = marker.key[bandDepth];
      if (typeof band !== "number") continue;
      const selector = {
        prefix: keys.readyBand(band),
        start: [...keys.readyBand(band), Math.floor(now) + 1],
      };
      for (const entry of await listAll(this.#kv, selector, SCHEDULED_SCAN)) {
        const id = entry.key[bandDepth + 3];
        if (typeof id !== "string") continue;
        if (decodeEntry(entry.value, id).record.state === "waiting") scheduled += 1;
      }
    }
    return {
      waiting: Math.max(0, waiting - scheduled),
      scheduled,
      failed: Math.max(0, failed),
      active: Math.max(0, active),
      dead: Math.max(0, dead),
    };
  }
}

function parseCursor(cursor: string | undefined): { at: number; id: string } | undefined {
  if (typeof cursor !== "string") return undefined;
  const colon = cursor.indexOf(":");
  const at = Number(cursor.slice(0, colon));
  const id = cursor.slice(colon + 1);
  return colon > 0 && Number.isFinite(at) && id !== "" ? { at, id } : undefined;
}
