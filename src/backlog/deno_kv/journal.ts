/**
 * The Deno KV journal of a job store: it persists every change of the store's index before the
 * store's call resolves, fenced by an epoch, and reads the whole store back at load.
 *
 * - **Fencing.** `open` writes the next epoch under a check on the current one, then reads
 *   everything; every commit checks the epoch key's versionstamp, which only `open` changes, so a
 *   store that another process opened since gets `QueueFencedError` and writes nothing.
 * - **Commits.** One call's changes (job records, payload parts, the cursor) go in one atomic
 *   commit; a change too large for one (a large batch) is split across consecutive commits in
 *   order. Each is fenced; a crash between them keeps a prefix, which the store's idempotent
 *   operations heal when the call is repeated.
 * - **Errors.** `database is locked` means not applied and is rethrown (retriable). Any other
 *   failed commit has an unknown outcome; the store then re-reads the journal (`reread`) before
 *   its next call.
 * - **Slots.** Each job's keys are numbered by its slot (`records.ts`), which the journal hands out
 *   in write order and remembers per MessageID; a load continues after the highest slot in use
 *   (or still listed by a record of started tries). The journal also remembers which record of
 *   started tries, or of finished jobs, each job is in.
 * - **Finished jobs** (completed, cancelled) move to records of finished jobs, one per commit,
 *   written with `expireIn` of the retention (KV forgets them even if the store's count-based
 *   eviction never gets to them). A load reads only the live jobs, so a restart does not wait
 *   for the history; the finished ones are read afterwards, and a call that mentions a
 *   MessageID the store does not know waits for that read (the history is not keyed by
 *   MessageID).
 *
 * @module
 */

import { QueueConflictError, QueueFencedError } from "../../queue/work_queue.ts";
import { KV_LIMITS, type KvEntryLike, type KvKey, type KvLike } from "../../queue/deno_kv/port.ts";
import { encodedKeySize } from "../../queue/deno_kv/layout.ts";
import { decodeEpoch, encodeEpoch } from "../../queue/deno_kv/codec.ts";
import type { Journal, JournalChange, JournalEntry, JournalSnapshot } from "../job_store_engine.ts";
import { isQueued, startTry } from "../../lifecycle/job_record.ts";
import { utf8Length } from "../../core/utf8.ts";
import {
  decodeEntry,
  decodeGroup,
  decodeMeta,
  decodeTries,
  encodeEntry,
  encodeFinished,
  encodeGroup,
  encodeMeta,
  encodeTries,
  FORMAT_VERSION,
  GROUP_BYTES,
  INLINE_BYTES,
  type JobSlot,
  JobStoreKeys,
  joinPayload,
  malformed,
  splitPayload,
  type StartedTry,
} from "./records.ts";
import { SharedRecords } from "./shared_records.ts";

/** One KV write. */
type Write =
  | {
    readonly kind: "set";
    readonly key: KvKey;
    readonly value: Uint8Array;
    readonly expireIn?: number;
  }
  | { readonly kind: "delete"; readonly key: KvKey };

const ATTEMPTS = 3;
/** Tries in one record of started tries (at most about 75 bytes each: a value holds 64 KiB). */
const TRIES_PER_RECORD = 600;

/** A {@linkcode Journal} on a Deno KV handle (Deno's, or npm `@deno/kv` on Node and Bun). */
export class DenoKvJournal implements Journal {
  readonly #kv: KvLike;
  readonly #keys: JobStoreKeys;
  readonly #retention: number;
  /** The epoch key's versionstamp under the epoch this journal writes with. */
  #epochVs: string | null = null;
  #epoch = 0;
  /** How many parts each kept payload has (so a delete removes exactly those). */
  readonly #parts = new Map<string, number>();
  /** Each known job's slot, by MessageID: live jobs from the load, finished ones once read. */
  readonly #slots = new Map<string, JobSlot>();
  /** The slot the next new job gets. */
  #nextSlot = 1;
  /** The append cursor as last read or written. */
  #currentSeq = 0;
  /** Whether the meta record says this format version (else the next commit writes it). */
  #metaCurrent = false;
  /** The jobs still in the try each record of started tries lists (by its first sequence). */
  readonly #tries = new SharedRecords();
  /** The finished jobs the store keeps from each record of finished jobs (by its number). */
  readonly #groups = new SharedRecords();
  /** The number of the next record of finished jobs. */
  #nextGroup = 1;
  /** Records of finished jobs numbered from here were written since the last load or re-read. */
  #firstNewGroup = 1;
  /** The read of the finished jobs since the last load or re-read. */
  #history: Promise<JournalEntry[]> | undefined;
  /** Counts loads and re-reads: a history read begun before the latest one fails. */
  #reads = 0;

  /** A journal under `prefix`; finished jobs expire after `retention` ms. */
  constructor(kv: KvLike, prefix: KvKey, retention: number) {
    this.#kv = kv;
    this.#keys = new JobStoreKeys(prefix);
    this.#retention = retention;
  }

  /** Acquire writership under the next epoch, then read the whole store. */
  async open(
    signal?: AbortSignal,
    /** For the migration into the shared layout, which may find it begun. */
    migrating = false,
  ): Promise<{ epoch: number; snapshot: JournalSnapshot }> {
    const key = this.#keys.epoch;
    if (!migrating) await this.#refuseSharedFlow();
    for (let attempt = 1;; attempt++) {
      signal?.throwIfAborted();
      const [entry] = await this.#kv.getMany([key]);
      const epoch = (entry.versionstamp === null ? 0 : decodeEpoch(entry.value)) + 1;
      const result = await this.#kv.atomic()
        .check({ key, versionstamp: entry.versionstamp })
        .set(key, encodeEpoch(epoch))
        .commit();
      if (result.ok) {
        this.#epoch = epoch;
        this.#epochVs = result.versionstamp;
        return { epoch, snapshot: await this.#read() };
      }
      if (attempt === ATTEMPTS) {
        throw new Error(`Cannot load the job store: other loads won the epoch ${ATTEMPTS} times`);
      }
    }
  }

  /**
   * A prefix that holds a shared flow (`DenoKvClusterStore`, or a flow one migrated from this
   * store) is not opened: this store would see none of its jobs.
   */
  async #refuseSharedFlow(): Promise<void> {
    const prefix = this.#keys.prefix;
    for (const name of ["record", "lease"]) {
      for await (const _ of this.#kv.list({ prefix: [...prefix, name] }, { limit: 1 })) {
        throw new QueueConflictError(
          `Cannot load the job store: its prefix ${
            JSON.stringify(prefix)
          } holds a shared flow (DenoKvClusterStore); open it with DenoKvClusterStore`,
        );
      }
    }
  }

  /** Read the store again under `epoch` (after a write whose outcome is unknown). */
  async reread(epoch: number): Promise<JournalSnapshot> {
    await this.#checkEpoch(epoch);
    return await this.#read();
  }

  /** Persist `change` under `epoch`, in one commit if it fits, else in consecutive ones. */
  async commit(epoch: number, change: JournalChange, signal?: AbortSignal): Promise<void> {
    if (epoch !== this.#epoch || this.#epochVs === null) {
      throw new QueueFencedError(`Cannot write: epoch ${epoch} is fenced (current ${this.#epoch})`);
    }
    const writes = this.#writes(change);
    for (const batch of this.#batches(writes)) {
      signal?.throwIfAborted();
      const atomic = this.#kv.atomic().check({
        key: this.#keys.epoch,
        versionstamp: this.#epochVs,
      });
      for (const write of batch) {
        if (write.kind === "delete") atomic.delete(write.key);
        else if (write.expireIn === undefined) atomic.set(write.key, write.value);
        else atomic.set(write.key, write.value, { expireIn: write.expireIn });
      }
      // A throw is either "database is locked" (not applied: retriable as it is) or an unknown
      // outcome, after which the store re-reads the journal before its next call.
      const result = await atomic.commit();
      if (!result.ok) {
        throw new QueueFencedError(`Cannot write: epoch ${epoch} is fenced by a newer load`);
      }
    }
    if (change.currentSeq !== undefined) this.#currentSeq = change.currentSeq;
    this.#metaCurrent = true;
  }

  /** A job's slot: the one it has, or the next one for a job not written before. */
  #slot(id: string): JobSlot {
    let slot = this.#slots.get(id);
    if (slot === undefined) {
      slot = this.#nextSlot++;
      this.#slots.set(id, slot);
    }
    return slot;
  }

  /**
   * The writes of one change. What the journal remembers (slots, payload parts, shared records)
   * is updated as they are planned: a commit that fails makes the store re-read it all.
   */
  #writes(change: JournalChange): Write[] {
    const writes: Write[] = [];
    const keys = this.#keys;
    const started: StartedTry[] = [];
    const startedIds: string[] = [];
    const ended: [string, JournalEntry][] = [];
    for (const [id, entry] of change.entries) {
      this.#tries.leave(id);
      const slot = this.#slots.get(id);
      if (
        entry?.started && entry.active && entry.record.startedAt !== undefined &&
        typeof slot === "number" && !change.payloads.has(id)
      ) {
        // A try started from the backlog: listed in this commit's record of started tries.
        started.push([slot, entry.active.seq, entry.record.attempts, entry.record.startedAt]);
        startedIds.push(id);
        continue;
      }
      const wasFinished = change.wereFinished.has(id);
      // A job finished in a record of finished jobs leaves it; one of version 1 has its own key.
      const grouped = wasFinished && this.#groups.leave(id);
      if (!entry && (slot === undefined || grouped)) { // nothing (else) to delete
        this.#slots.delete(id);
        continue;
      }
      const place = this.#slot(id);
      // Where its record was: its live key, version 1's finished key, or a record of finished jobs.
      const was = grouped ? undefined : wasFinished ? keys.done(place) : keys.job(place);
      if (!entry) {
        if (was) writes.push({ kind: "delete", key: was });
        this.#payloadWrites(id, place, undefined, writes);
        this.#slots.delete(id);
        continue;
      }
      const finished = entry.record.state === "completed" || entry.record.state === "cancelled";
      if (was && (finished || wasFinished)) writes.push({ kind: "delete", key: was });
      if (finished) {
        ended.push([id, entry]);
        this.#payloadWrites(id, place, undefined, writes);
        continue;
      }
      // A small payload goes in the job's own value: one key a job, not two.
      const payload = entry.payload;
      let value = encodeEntry(entry, payload);
      let separate = payload;
      if (payload !== undefined && value.length <= INLINE_BYTES) separate = undefined;
      else if (payload !== undefined) value = encodeEntry(entry);
      writes.push({ kind: "set", key: keys.job(place), value });
      this.#payloadWrites(id, place, separate, writes);
    }
    this.#groupWrites(ended, writes);
    for (const [id, payload] of change.payloads) {
      if (change.entries.has(id)) continue; // written with its entry
      if (payload === undefined && !this.#parts.has(id)) continue;
      this.#payloadWrites(id, this.#slot(id), payload, writes);
    }
    for (let i = 0; i < started.length; i += TRIES_PER_RECORD) {
      const chunk = started.slice(i, i + TRIES_PER_RECORD);
      const first = Math.min(...chunk.map(([, seq]) => seq));
      writes.push({ kind: "set", key: keys.triesFrom(first), value: encodeTries(chunk) });
      this.#tries.hold(first, startedIds.slice(i, i + TRIES_PER_RECORD));
    }
    for (const first of this.#tries.takeSpent()) {
      writes.push({ kind: "delete", key: keys.triesFrom(first) });
    }
    for (const group of this.#groups.takeSpent()) {
      writes.push({ kind: "delete", key: keys.group(group) });
    }
    if (change.currentSeq !== undefined || !this.#metaCurrent) {
      const currentSeq = change.currentSeq ?? this.#currentSeq;
      writes.push({ kind: "set", key: keys.meta, value: encodeMeta(currentSeq) });
    }
    return writes;
  }

  /**
   * Write the jobs that finished in this change as records of finished jobs, as few as fit a
   * value each, expiring after the retention.
   */
  #groupWrites(ended: readonly [string, JournalEntry][], writes: Write[]): void {
    let ids: string[] = [];
    let texts: string[] = [];
    let bytes = 0;
    const flush = () => {
      if (ids.length === 0) return;
      const group = this.#nextGroup++;
      writes.push({
        kind: "set",
        key: this.#keys.group(group),
        value: encodeGroup(texts),
        ...(this.#retention > 0 ? { expireIn: this.#retention } : {}),
      });
      this.#groups.hold(group, ids);
      ids = [];
      texts = [];
      bytes = 0;
    };
    for (const [id, entry] of ended) {
      const text = encodeFinished(entry);
      const size = utf8Length(text);
      if (bytes + size > GROUP_BYTES) flush();
      ids.push(id);
      texts.push(text);
      bytes += size + 1;
    }
    flush();
  }

  /** Write `payload` in parts of its own (undefined: none), deleting the parts no longer used. */
  #payloadWrites(
    id: string,
    slot: JobSlot,
    payload: string | undefined,
    writes: Write[],
  ): void {
    const before = this.#parts.get(id) ?? 0;
    if (payload === undefined && before === 0) return;
    const split = payload === undefined ? [] : splitPayload(payload);
    split.forEach((part, n) =>
      writes.push({ kind: "set", key: this.#keys.payload(slot, n), value: part })
    );
    for (let n = split.length; n < before; n++) {
      writes.push({ kind: "delete", key: this.#keys.payload(slot, n) });
    }
    if (split.length === 0) this.#parts.delete(id);
    else this.#parts.set(id, split.length);
  }

  /** Split writes into groups that each fit one atomic commit (with its epoch check). */
  *#batches(writes: readonly Write[]): Iterable<Write[]> {
    const checkBytes = encodedKeySize(this.#keys.epoch);
    let batch: Write[] = [];
    let bytes = checkBytes;
    let setKeyBytes = 0;
    for (const write of writes) {
      const keySize = encodedKeySize(write.key);
      const size = write.kind === "set" ? 2 * keySize + write.value.length : keySize;
      const setKey = write.kind === "set" ? keySize : 0;
      if (
        batch.length > 0 &&
        (batch.length + 1 > KV_LIMITS.maxMutations || bytes + size > KV_LIMITS.maxMutationBytes ||
          setKeyBytes + setKey > KV_LIMITS.maxSetKeyBytes)
      ) {
        yield batch;
        batch = [];
        bytes = checkBytes;
        setKeyBytes = 0;
      }
      batch.push(write);
      bytes += size;
      setKeyBytes += setKey;
    }
    if (batch.length > 0) yield batch;
  }

  /** Every retained finished job (one read per load or re-read, shared by its callers). */
  readFinished(): Promise<JournalEntry[]> {
    const history = this.#history ??= this.#readHistory();
    // A failed read (a closed handle, a backend error) is tried again by the next caller.
    history.catch(() => {
      if (this.#history === history) this.#history = undefined;
    });
    return history;
  }

  /** The retained finished jobs among `ids`: the history is read once, then filtered. */
  async lookupFinished(ids: readonly string[]): Promise<JournalEntry[]> {
    const wanted = new Set(ids);
    return (await this.readFinished()).filter((entry) => wanted.has(entry.record.id));
  }

  async #readHistory(): Promise<JournalEntry[]> {
    const reads = this.#reads;
    const depth = this.#keys.prefix.length;
    // Each MessageID's latest finished entry: version 1's own records first, then the records
    // of finished jobs in commit order (a job run again after it finished is in a later one).
    const latest = new Map<string, { entry: JournalEntry; group?: number }>();
    for await (const entry of list(this.#kv, this.#keys.finished)) {
      const id = entry.key[depth + 1];
      if (typeof id !== "string") continue; // a hint only: an unreadable one is skipped
      try {
        latest.set(id, { entry: decodeEntry(entry.value, `finished job ${id}`, id) });
      } catch {
        continue; // skipped likewise
      }
    }
    const groups: number[] = [];
    for await (const entry of list(this.#kv, this.#keys.groups)) {
      const group = entry.key[depth + 1];
      // A record written since the load holds jobs the store knows (or forgot since).
      if (typeof group !== "number" || group >= this.#firstNewGroup) continue;
      let jobs: JournalEntry[];
      try {
        jobs = decodeGroup(entry.value, `finished jobs record ${group}`);
      } catch {
        continue;
      }
      groups.push(group);
      for (const job of jobs) latest.set(job.record.id, { entry: job, group });
    }
    // A re-read since: the history read it starts counts, this one would adopt stale slots.
    if (reads !== this.#reads) throw new Error("The history read was overtaken by a re-read");
    const kept = new Map<number, string[]>(groups.map((group) => [group, []]));
    const entries: JournalEntry[] = [];
    for (const [id, { entry, group }] of latest) {
      // A job the store knows otherwise (live, or finished since the load) is not this one.
      if (this.#slots.has(id) || this.#groups.has(id)) continue;
      if (group === undefined) this.#slots.set(id, id);
      else kept.get(group)!.push(id);
      entries.push(entry);
    }
    for (const [group, ids] of kept) this.#groups.hold(group, ids);
    return entries;
  }

  /** Throws `QueueFencedError` unless `epoch` still owns the store. */
  async #checkEpoch(epoch: number): Promise<void> {
    const [entry] = await this.#kv.getMany([this.#keys.epoch]);
    if (epoch !== this.#epoch || entry.versionstamp !== this.#epochVs) {
      throw new QueueFencedError(`Cannot write: epoch ${epoch} is fenced by a newer load`);
    }
  }

  /** Everything the store keeps. No other writer can change it meanwhile: they are fenced. */
  async #read(): Promise<JournalSnapshot> {
    const [meta] = await this.#kv.getMany([this.#keys.meta]);
    const { version, currentSeq } = meta.versionstamp === null
      ? { version: 0, currentSeq: 0 }
      : decodeMeta(meta.value);
    this.#slots.clear();
    this.#parts.clear();
    this.#tries.clear();
    this.#groups.clear();
    this.#history = undefined;
    this.#reads += 1;
    let highest = 0;
    const entries: JournalEntry[] = [];
    const payloads = new Map<string, string>();
    const inSlot = new Map<number, number>(); // slot -> index in entries
    const depth = this.#keys.prefix.length;
    for await (const entry of list(this.#kv, this.#keys.jobs)) {
      const slot = entry.key[depth + 1];
      if (!isSlot(slot) || entry.key.length !== depth + 2) {
        throw malformed(`a job key has the wrong shape (${entry.key.map(String).join("/")})`);
      }
      const read = decodeEntry(entry.value, `job ${slot}`, keyId(slot));
      this.#slots.set(read.record.id, slot);
      if (read.payload !== undefined) payloads.set(read.record.id, read.payload);
      if (typeof slot === "number") inSlot.set(slot, entries.length);
      if (typeof slot === "number") highest = Math.max(highest, slot);
      entries.push(read);
    }
    for await (const entry of list(this.#kv, this.#keys.tries)) {
      const first = entry.key[depth + 1];
      if (!Number.isSafeInteger(first) || entry.key.length !== depth + 2) {
        throw malformed(`a tries key has the wrong shape (${entry.key.map(String).join("/")})`);
      }
      const ids: string[] = [];
      for (const [slot, seq, attempt, at] of decodeTries(entry.value, `tries record ${first}`)) {
        highest = Math.max(highest, slot); // a new job must not get a slot a record still lists
        const index = inSlot.get(slot);
        if (index === undefined) continue; // the job was deleted or finished since
        const { record } = entries[index];
        // Still queued with the tries before this one: the try is in progress.
        if (!isQueued(record) || record.attempts !== attempt - 1) continue;
        entries[index] = {
          record: startTry(record, at),
          active: { seq, accepted: true, confirmed: false, outcome: undefined },
        };
        ids.push(record.id);
      }
      this.#tries.hold(first as number, ids); // none left in it: deleted by the next commit
    }
    const parts = new Map<JobSlot, Uint8Array[]>();
    for await (const entry of list(this.#kv, this.#keys.payloads)) {
      const [slot, n] = [entry.key[depth + 1], entry.key[depth + 2]];
      if (!isSlot(slot) || typeof n !== "number" || !(entry.value instanceof Uint8Array)) {
        throw malformed(`a payload key has the wrong shape (${entry.key.map(String).join("/")})`);
      }
      const found = parts.get(slot) ?? [];
      found[n] = entry.value;
      parts.set(slot, found);
      if (typeof slot === "number") highest = Math.max(highest, slot);
    }
    const ids = new Map<JobSlot, string>();
    for (const [id, slot] of this.#slots) ids.set(slot, id);
    for (const [slot, found] of parts) {
      const id = ids.get(slot);
      if (id === undefined) throw malformed(`the payload in slot ${slot} has no job`);
      if (found.some((part) => part === undefined)) {
        throw malformed(`the payload of job ${id} has a missing part`);
      }
      payloads.set(id, joinPayload(found, id));
      this.#parts.set(id, found.length);
    }
    this.#nextSlot = Math.floor(highest) + 1;
    // Records of finished jobs are numbered on after the last one.
    let lastGroup = 0;
    const last = this.#kv.list({ prefix: this.#keys.groups }, { reverse: true, limit: 1 });
    for await (const entry of last) {
      const group = entry.key[depth + 1];
      if (Number.isSafeInteger(group)) lastGroup = group as number;
    }
    this.#nextGroup = this.#firstNewGroup = lastGroup + 1;
    this.#currentSeq = currentSeq;
    this.#metaCurrent = version === FORMAT_VERSION;
    return { currentSeq, entries, payloads };
  }
}

/** A key part that can be a slot: a positive integer, or a MessageID (format version 1). */
function isSlot(part: unknown): part is JobSlot {
  return typeof part === "string" || (Number.isSafeInteger(part) && (part as number) > 0);
}

/** The MessageID a key names itself (format version 1 keys), for its record to match. */
function keyId(slot: JobSlot): string | undefined {
  return typeof slot === "string" ? slot : undefined;
}

function list(kv: KvLike, prefix: KvKey): AsyncIterable<KvEntryLike> {
  return kv.list({ prefix }, { batchSize: KV_LIMITS.maxListBatch });
}
