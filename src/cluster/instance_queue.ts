/**
 * One instance's part of a shared flow: the jobs it claimed from the shared backlog and the
 * tries its controller runs, as the controller's {@linkcode DurableWorkQueue}.
 *
 * - **The fence.** The instance's writes all check its fence key (`[P, "fence", id]`), which
 *   only `load` (a new epoch for this instance) and a takeover (by a survivor) change. So once
 *   another process fenced it, nothing it writes lands: its next write finds the fence moved and
 *   fails with {@linkcode QueueFencedError}, and it stays fenced until it loads again.
 * - **Memory.** While its epoch holds, no other process writes the jobs it holds (they only
 *   leave cancel requests beside them), so it keeps them in memory and writes without reading.
 *   After a write whose outcome is unknown it reads them back before its next call.
 * - **Claims** (`take`): due jobs are listed band by band, then claimed in commits that check
 *   each job's ready entry (it is still there, unchanged) and the fence, moving it from the
 *   ready index to this instance; the commits of a round are all in flight at once (they touch
 *   different jobs). Claimers spread out: among more candidates than they need, each prefers the
 *   ones its rank among the live instances picks (a hash of the MessageID), so instances with
 *   deep backlogs rarely touch the same jobs; whole higher-priority bands are always taken first.
 *   A commit that lost a race is dropped and the next round lists again.
 * - **Claiming ahead.** A take that got all it asked for claims one more of its size in the
 *   background (one round at a time), into the lookahead, which the next take (or `takeNow`, in
 *   the same turn) hands out first: the controller's grants rarely wait for KV's round trips.
 * - **Tries** (`store`, `accept`, `confirmMessage`, `commit`) follow the engine's rules (first
 *   store wins, accept of an unknown job is a conflict, confirm is idempotent, a try both
 *   accepted and confirmed applies its outcome with `finishTry`); a call's changes go in as
 *   many commits as KV's limits need, all in flight at once.
 * - **Load** (a new epoch) keeps the tries the controller must run again (accepted, not
 *   confirmed) and, for a handle reloading in the same process, what it still holds in memory;
 *   anything else it holds in KV (a previous process's claims and unaccepted tries) goes back to
 *   the shared backlog, as a takeover would put it.
 *
 * The controller's calls, the load and the leave run one at a time, in call order; claim rounds
 * run beside them (they add jobs; the calls write jobs already held), except while a load, a
 * re-read or a leave needs the held jobs to itself.
 *
 * @module
 */

import type { Clock } from "../core/clock.ts";
import { infoOf, type JobRecord, newRecord, tryTimeout } from "../lifecycle/job_record.ts";
import { planJob } from "../lifecycle/job_options.ts";
import type { KvKey } from "../queue/deno_kv/port.ts";
import {
  type LoadResult,
  type QueueBatch,
  type QueueBatchResult,
  QueueConflictError,
  QueueFencedError,
  type StoreResult,
  type UnconfirmedMessage,
} from "../queue/work_queue.ts";
import type { JobStoreSettings, ReadyJob } from "../backlog/job_store.ts";
import { copyBatch } from "../backlog/job_store_engine.ts";
import { checkBatch, checkStoredJob } from "../queue/batch_checks.ts";
import type { BacklogNotice, Candidate, SharedBacklog } from "./backlog.ts";
import {
  decodeCursor,
  decodeFence,
  decodeStored,
  encodeCursor,
  encodeEntry,
  encodeFence,
  type Entry,
  INLINE_BYTES,
  joinPayload,
  splitPayload,
  utf8Bytes,
} from "./codec.ts";
import type { ClusterKeys } from "./keys.ts";
import {
  Change,
  checkLimit,
  checkLimitKnown,
  checksLanded,
  type ClusterKvLike,
  commitChanges,
  type CommitOutcome,
  commitSideBySide,
  isTooManyChecks,
  listAll,
  readMany,
} from "./kv_writes.ts";
import { retryLocked } from "../queue/deno_kv/retry_locked.ts";
import { dropAll, encodeList, listKey, readOwned } from "./owned_index.ts";
import { holdsWorkQueue, migrateSingleInstance } from "./migration.ts";
import { encodeTries, readStarted, type Start, triesKey, withStart } from "./started_tries.ts";
import {
  claimed,
  finished,
  type PlacementContext,
  readyKeyOf,
  recover,
  settle,
  started,
} from "./placement.ts";

/** Claim rounds per `take` (each lists candidates afresh). */
const CLAIM_ROUNDS = 4;
/** Most candidates listed per claim round. */
const MAX_CANDIDATES = 500;
const LOAD_ATTEMPTS = 5;
/** Bytes of one claim commit's changes before it closes (KV allows 800 KiB). */
const CLAIM_BYTES = 600 * 1024;

/** A job this instance holds. */
interface Held {
  /** As in KV (owner: this instance). */
  readonly entry: Entry;
  /** Its payload text. */
  readonly payload: string;
  /** Given out by `take` in this process (the producer has it). */
  readonly handed: boolean;
  /** The owned list that names it (`owned_index.ts`). */
  readonly list: string;
  /** The tries record its try in progress is in, when its own record has none (`started_tries.ts`). */
  readonly tries?: string;
}

/** What a commit's shrink of the index does to memory once it lands. */
interface Shrinking {
  /** Lists rewritten (their new content) or deleted (undefined), by name. */
  readonly lists: Map<string, OwnedList | undefined>;
  /** Tries records deleted, by name. */
  readonly spentTries: readonly string[];
}

/** The claims of one commit, and the owned list naming them. */
interface ClaimGroup {
  readonly candidates: Candidate[];
  readonly change: Change;
  readonly name: string;
  readonly key: KvKey;
}

/** One owned list of this instance, as in KV. */
interface OwnedList {
  readonly key: KvKey;
  /** The MessageIDs it names in KV. */
  ids: readonly string[];
}

/** Most MessageIDs in one owned list (a value holds 64 KiB; a MessageID up to 256 characters). */
const LIST_IDS = 200;

/** What the instance queue needs from its store. */
export interface InstanceContext {
  readonly kv: ClusterKvLike;
  readonly keys: ClusterKeys;
  readonly instance: string;
  readonly settings: JobStoreSettings;
  readonly clock: Clock;
  readonly random: () => number;
  readonly backlog: SharedBacklog;
  /** The largest payload, UTF-8 bytes. */
  readonly maxPayloadBytes: number;
  /** The instance's lease lapsed on its own clock: claim nothing until it is renewed. */
  lapsed(): boolean;
  /** How many instances are live, and this one's rank among them (for spreading claims). */
  peers(): { readonly count: number; readonly rank: number };
  /** The lease value written with a new epoch. */
  leaseFor(epoch: number): Uint8Array;
  /** A job changed (after the change is durable). */
  notify(notice: BacklogNotice): void;
}

/** A job held in KV by this instance, as read back. */
interface Found {
  readonly entry: Entry;
  readonly cancelRequested: boolean;
}

/** The jobs one instance holds, and its controller's work queue over them. */
export class InstanceQueue {
  readonly #c: InstanceContext;
  readonly #placement: PlacementContext;
  #epoch = 0;
  #fenceVs: string | null = null;
  #fenced = false;
  #closed = false;
  #currentSeq = 0;
  #held = new Map<string, Held>();
  /** The last write's outcome is unknown: read the held jobs back before the next call. */
  #stale = false;
  #tail: Promise<unknown> = Promise.resolve();
  /** Claimed jobs not handed out yet, in claim order (the lookahead). */
  readonly #lookahead = new Set<string>();
  /** The controller's latest demand (the `max` of its latest take). */
  #demand = 1;
  /** The claim round in flight. */
  #claiming: Promise<boolean> | undefined;
  /** Tasks that need the held jobs to themselves (load, re-read, leave): no claims meanwhile. */
  #blocked = 0;
  /** This epoch's owned lists, by name. */
  #lists = new Map<string, OwnedList>();
  /** Lists naming jobs that left (durably): rewritten by the instance's next commit. */
  readonly #shrunk = new Set<string>();
  /** This epoch's tries records, by name, with the MessageIDs they list. */
  #tries = new Map<string, OwnedList>();
  /** Tries records some of whose jobs left: deleted by a later commit once all have. */
  readonly #triesShrunk = new Set<string>();
  #nextList = 0;
  /** The earliest due time the last empty claim round saw (Infinity: none). */
  nextDue = Infinity;

  constructor(context: InstanceContext, placement: PlacementContext) {
    this.#c = context;
    this.#placement = placement;
  }

  /** The current epoch (0 before the first load). */
  get epoch(): number {
    return this.#epoch;
  }

  /** Whether a load succeeded and the instance is neither fenced nor closed. */
  get live(): boolean {
    return this.#epoch > 0 && !this.#fenced && !this.#closed;
  }

  /** Whether another process fenced this instance (until it loads again). */
  get fenced(): boolean {
    return this.#fenced;
  }

  /** The check every write of this instance carries. */
  get fenceCheck(): { key: KvKey; versionstamp: string | null } {
    return { key: this.#c.keys.fence(this.#c.instance), versionstamp: this.#fenceVs };
  }

  /** How many jobs it holds, and how many of them are tries. */
  get figures(): { readonly held: number; readonly trying: number } {
    let trying = 0;
    for (const held of this.#held.values()) if (held.entry.trial) trying += 1;
    return { held: this.#held.size, trying };
  }

  /** Whether it holds `id`. */
  holds(id: string): boolean {
    return this.#held.has(id);
  }

  /** Stop writing for good (the store closes). */
  close(): void {
    this.#closed = true;
  }

  /** A write found the fence moved: fenced until the next load. */
  markFenced(): void {
    this.#fenced = true;
  }

  // ------------------------------------------------------------------------------------------
  // Load

  /** Take a new epoch for this instance and read back what it holds. */
  load(signal?: AbortSignal): Promise<LoadResult> {
    return this.#serial(signal, () => this.#alone(() => this.#load(signal)));
  }

  async #load(signal?: AbortSignal): Promise<LoadResult> {
    {
      const { kv, keys, instance } = this.#c;
      const markers = await readMany(kv, keys.singleInstanceMarkers, signal);
      if (markers.some((entry) => entry.versionstamp !== null)) {
        if (await holdsWorkQueue(kv, keys, signal)) {
          throw new QueueConflictError(
            "Cannot load the shared job store: its prefix holds a bare work queue " +
              "(DenoKvWorkQueue); give the shared flow a prefix of its own",
          );
        }
        // A flow of the single-instance store: it moves into the shared layout here.
        await migrateSingleInstance({ ...this.#c }, signal);
      }
      for (let attempt = 1;; attempt++) {
        signal?.throwIfAborted();
        const [fence] = await readMany(kv, [keys.fence(instance)], signal);
        const epoch = (fence.versionstamp === null ? 0 : decodeFence(fence.value)) + 1;
        const result = await retryLocked(
          () =>
            kv.atomic()
              .check({ key: keys.fence(instance), versionstamp: fence.versionstamp })
              .set(keys.fence(instance), encodeFence(epoch))
              .set(keys.lease(instance), this.#c.leaseFor(epoch))
              .commit(),
          signal,
        );
        if (result.ok) {
          this.#epoch = epoch;
          this.#nextList = 0;
          this.#fenceVs = result.versionstamp;
          this.#fenced = false;
          this.#closed = false;
          break;
        }
        if (attempt >= LOAD_ATTEMPTS) {
          throw new Error(
            `Cannot load the shared job store: instance ${instance}'s fence moved ${attempt} times`,
          );
        }
      }
      // Fenced the previous epoch; until the read below lands, memory is not to be trusted.
      this.#stale = true;
      await this.#syncHeld("load", signal);
      const unconfirmed: UnconfirmedMessage[] = [];
      for (const [messageId, { entry, payload }] of this.#held) {
        const trial = entry.trial;
        if (!trial?.accepted || trial.confirmed) continue;
        unconfirmed.push({
          messageId,
          seq: trial.seq,
          payload,
          attempt: entry.record.attempts,
          timeout: tryTimeout(entry.record, this.#c.settings.defaults),
          ...(entry.record.lost ? { lost: entry.record.lost } : {}),
        });
      }
      unconfirmed.sort((a, b) => a.seq - b.seq);
      return { epoch: this.#epoch, state: { currentSeq: this.#currentSeq, unconfirmed } };
    }
  }

  /**
   * Read what this instance holds in KV and make memory agree: jobs memory knows take KV's
   * state; on a load, accepted unconfirmed tries are kept (the controller runs them again);
   * anything else KV holds for it goes back to the backlog; what memory held that KV does not
   * is forgotten.
   */
  async #syncHeld(mode: "load" | "reread", signal?: AbortSignal): Promise<void> {
    this.#blocked += 1; // no claim round starts meanwhile, and the one in flight ends first
    try {
      await this.#claiming;
      await this.#readBackHeld(mode, signal);
    } finally {
      this.#blocked -= 1;
    }
  }

  /** Re-read the held jobs if the last write's outcome is unknown (inside a serial task). */
  async #syncIfStale(): Promise<void> {
    if (this.#stale) await this.#syncHeld("reread");
  }

  async #readBackHeld(mode: "load" | "reread", signal?: AbortSignal): Promise<void> {
    const { kv, keys, instance, clock, settings, random } = this.#c;
    const [fence, cursor] = await readMany(
      kv,
      [keys.fence(instance), keys.cursor(instance)],
      signal,
    );
    if (fence.versionstamp !== this.#fenceVs) {
      this.#fenced = true;
      throw new QueueFencedError(`Cannot read: instance ${instance} was fenced by another process`);
    }
    const found = await this.#readHeld(signal);
    const now = clock.now();
    const next = new Map<string, Held>();
    const changes: Change[] = [];
    const notices: BacklogNotice[] = [];
    const needPayload: string[] = [];
    /** Kept tries read from a tries record: their own records get them before those go. */
    const ownTries: Change[] = [];
    for (const [id, { entry: asStored, cancelRequested }] of found.jobs) {
      const entry = withStart(asStored, found.starts.get(id));
      const keep = (held: Held) => {
        next.set(id, held);
        if (entry !== asStored) {
          ownTries.push(new Change().set(keys.record(id), encodeEntry(entry)));
        }
      };
      const mine = this.#held.get(id);
      if (mine) {
        keep({ entry, payload: mine.payload, handed: mine.handed, list: "" });
        continue;
      }
      if (mode === "load" && entry.trial?.accepted && !entry.trial.confirmed) {
        keep({ entry, payload: entry.payload ?? "", handed: true, list: "" });
        if (entry.payload === undefined) needPayload.push(id);
        continue;
      }
      const { record, lost } = recover(entry, {
        defaults: settings.defaults,
        now,
        random,
        cancelRequested,
        instance,
      });
      const change = new Change();
      settle(change, this.#placement, entry, record, lost);
      changes.push(change);
      notices.push({ job: infoOf(record, now), previous: entry.record.state });
    }
    // The index starts afresh: new lists for what is kept, landing before the old keys go (a
    // commit that stops midway leaves a superset listed, never less).
    const lists = new Map<string, OwnedList>();
    const ids = [...next.keys()];
    const listChanges: Change[] = [];
    for (let i = 0; i < ids.length; i += LIST_IDS) {
      const chunk = ids.slice(i, i + LIST_IDS);
      const name = this.#newList();
      const key = listKey(keys, instance, this.#epoch, this.#nextList - 1);
      listChanges.push(new Change().set(key, encodeList(chunk)));
      lists.set(name, { key, ids: chunk });
      for (const id of chunk) next.set(id, { ...next.get(id)!, list: name });
    }
    const drops = dropAll([...found.index, ...found.triesKeys]);
    const all = [...listChanges, ...ownTries, ...changes, ...drops];
    if (all.length > 0) {
      const outcome = await commitChanges(kv, keys, [this.fenceCheck], all, signal);
      if (!outcome.ok) {
        this.#fenced = true;
        throw new QueueFencedError(`Cannot write: instance ${instance} was fenced meanwhile`);
      }
    }
    for (const id of needPayload) {
      const held = next.get(id)!;
      next.set(id, { ...held, payload: await this.#readPayload(held.entry, signal) });
    }
    let seq = cursor.versionstamp === null ? 0 : decodeCursor(cursor.value);
    for (const { entry } of next.values()) seq = Math.max(seq, entry.trial?.seq ?? 0);
    this.#held = next;
    this.#lists = lists;
    this.#shrunk.clear();
    this.#tries = new Map();
    this.#triesShrunk.clear();
    for (const id of [...this.#lookahead]) if (!next.has(id)) this.#lookahead.delete(id);
    this.#currentSeq = seq;
    this.#stale = false;
    for (const notice of notices) this.#c.notify(notice);
  }

  /** The name of a new owned list of this epoch (its key is `listKey(…, epoch, n)`). */
  #newList(): string {
    return `${this.#epoch}:${this.#nextList++}`;
  }

  /** The jobs KV says this instance holds, and every key of its owned index. */
  async #readHeld(signal?: AbortSignal): Promise<{
    jobs: Map<string, Found>;
    index: KvKey[];
    starts: Map<string, Start>;
    triesKeys: KvKey[];
  }> {
    const { kv, keys, instance } = this.#c;
    const depth = keys.cancelsFor(instance).length;
    const owned = await readOwned(kv, keys, instance, signal);
    const cancels = new Set(
      (await listAll(kv, { prefix: keys.cancelsFor(instance) }, undefined, signal)).flatMap((
        entry,
      ) => typeof entry.key[depth] === "string" ? [entry.key[depth] as string] : []),
    );
    const ids = [...owned.ids];
    const records = await readMany(kv, ids.map((id) => keys.record(id)), signal);
    const jobs = new Map<string, Found>();
    ids.forEach((id, i) => {
      const { versionstamp, value } = records[i];
      const entry = versionstamp === null ? undefined : decodeStored(value, id).entry;
      if (entry?.owner === instance) jobs.set(id, { entry, cancelRequested: cancels.has(id) });
    });
    const tries = await readStarted(kv, keys, instance, signal);
    return { jobs, index: owned.keys, starts: tries.starts, triesKeys: tries.keys };
  }

  /** A held job's payload (inline, or read from its parts). */
  async #readPayload(entry: Entry, signal?: AbortSignal): Promise<string> {
    if (entry.payload !== undefined) return entry.payload;
    const id = entry.record.id;
    const keys = Array.from({ length: entry.parts ?? 0 }, (_, n) => this.#c.keys.part(id, n));
    const parts = await readMany(this.#c.kv, keys, signal);
    return joinPayload(parts.map((part) => part.value), id);
  }

  // ------------------------------------------------------------------------------------------
  // Claims

  /**
   * Up to `max` claimed jobs for the controller: first the ones claimed ahead, then as many more
   * as claim rounds find. A take that got all it asked for (the backlog keeps up with demand)
   * claims one more such take ahead, in the background.
   */
  async take(max: number): Promise<readonly ReadyJob[]> {
    if (!this.#handing || max <= 0) return [];
    this.#demand = Math.max(1, Math.min(max, MAX_CANDIDATES));
    if (this.#stale) await this.#serial(undefined, () => this.#syncIfStale());
    const ready = this.#handOut(max);
    try {
      // Twice: a round already in flight (a background one) may have claimed for others.
      for (let round = 0; round < 2 && ready.length < max && this.#handing; round++) {
        const found = await this.#claimRound(max - ready.length);
        ready.push(...this.#handOut(max - ready.length));
        if (!found) break;
      }
    } catch (error) {
      // The jobs already taken from the lookahead are handed out whatever the claim did: they
      // are marked handed, and no later take would give them again.
      if (ready.length === 0) throw error;
      return ready;
    }
    if (ready.length === max) this.#topUp();
    return ready;
  }

  /**
   * `take` answered from the jobs claimed ahead, in this turn; undefined when there are too few
   * (the caller then uses `take`, which claims).
   */
  takeNow(max: number): readonly ReadyJob[] | undefined {
    if (!this.#handing || this.#stale || max <= 0 || this.#lookahead.size < max) return undefined;
    this.#demand = Math.max(1, Math.min(max, MAX_CANDIDATES));
    const ready = this.#handOut(max); // fewer only if a re-read dropped some
    this.#topUp();
    return ready.length > 0 ? ready : undefined;
  }

  /** Whether jobs may be handed out: live, its lease not lapsed. */
  get #handing(): boolean {
    return this.live && !this.#c.lapsed();
  }

  /** Hand out up to `max` claimed jobs from the lookahead, in the order they were claimed. */
  #handOut(max: number): ReadyJob[] {
    const ready: ReadyJob[] = [];
    for (const id of this.#lookahead) {
      if (ready.length >= max) break;
      this.#lookahead.delete(id);
      const held = this.#held.get(id);
      if (!held || held.handed || held.entry.trial) continue; // gone since (a re-read)
      const handed = { ...held, handed: true };
      this.#held.set(id, handed);
      ready.push(this.#readyJob(handed));
    }
    return ready;
  }

  /**
   * Claim one take of the controller's latest size ahead, in the background, so that its next
   * grant need not wait for KV. It holds at most that many jobs that no worker has yet; other
   * instances cannot claim them meanwhile (a leave or a takeover gives them back).
   */
  #topUp(): void {
    if (this.#claiming || !this.#handing || this.#stale) return;
    const want = this.#demand - this.#lookahead.size;
    if (want <= 0) return;
    this.#claimRound(want).catch(() => {
      // The next take claims again; a claim whose outcome is unknown marked the queue stale.
    });
  }

  /**
   * One claim round at a time: list up to `want` due jobs (more among several instances, whose
   * shares differ), claim them in commits that run side by side, and add the ones won to the
   * lookahead in ready order. Resolves to whether it found due jobs (a round in flight is
   * shared).
   */
  #claimRound(want: number): Promise<boolean> {
    this.#claiming ??= (async () => {
      let found = false;
      try {
        for (let round = 0; round < CLAIM_ROUNDS && want > 0; round++) {
          if (!this.#handing || this.#stale || this.#blocked > 0) break;
          const { count, rank } = this.#c.peers();
          const now = this.#c.clock.now();
          const listing = Math.min(MAX_CANDIDATES, Math.max(want, want * count));
          const { due, nextDue } = await this.#c.backlog.candidates(listing, now);
          this.nextDue = nextDue;
          if (due.length === 0) break;
          found = true;
          const chosen = choose(due, want, count, rank);
          const won = await this.#claim(chosen);
          for (const { candidate, list } of won) {
            const entry = claimed(candidate.entry, this.#c.instance);
            const payload = await this.#readPayload(entry);
            this.#held.set(entry.record.id, { entry, payload, handed: false, list });
            this.#lookahead.add(entry.record.id);
          }
          want -= won.length;
          if (won.length === chosen.length && due.length <= chosen.length) break; // all due
        }
      } finally {
        this.#claiming = undefined;
      }
      return found;
    })();
    return this.#claiming;
  }

  /**
   * Claim `chosen`, all in flight at once (they are different jobs; each commit holds as many as
   * KV's checks allow); returns the ones that landed, in the order chosen.
   */
  async #claim(
    chosen: readonly Candidate[],
  ): Promise<{ candidate: Candidate; list: string }[]> {
    const { kv, keys, instance } = this.#c;
    // One change a commit: the claims and the owned list naming them land together.
    const room = checkLimit(kv) - 1; // one check is the fence's
    const groups: ClaimGroup[] = [];
    let group: ClaimGroup | undefined;
    let bytes = 0; // the group's so far: a value's bytes stand for its job's (keys are small)
    for (const candidate of chosen) {
      if (
        !group || group.candidates.length >= Math.min(room, LIST_IDS) || bytes > CLAIM_BYTES
      ) {
        bytes = 0;
        const name = this.#newList();
        group = {
          candidates: [],
          change: new Change(),
          name,
          key: listKey(keys, instance, this.#epoch, this.#nextList - 1),
        };
        groups.push(group);
      }
      group.candidates.push(candidate);
      const value = encodeEntry(claimed(candidate.entry, instance));
      bytes += value.length + 512; // and up to 512 bytes of keys (two, and a check)
      group.change
        .check(candidate.key, candidate.versionstamp)
        .delete(candidate.key)
        .set(keys.record(candidate.entry.record.id), value);
    }
    for (const g of groups) {
      g.change.set(g.key, encodeList(g.candidates.map((c) => c.entry.record.id)));
    }
    if (!checkLimitKnown(kv) && groups[0] && groups[0].change.checks.length > 0) {
      // A KV whose limit is not known yet: the first commit alone tells (npm `@deno/kv` allows
      // ten checks); refused, nothing landed, and the claim is packed again.
      try {
        const first = await commitSideBySide(kv, keys, [this.fenceCheck], [groups[0].change]);
        checksLanded(kv, groups[0].change.checks.length + 1);
        const rest = await this.#claimGroups(groups.slice(1));
        return [...this.#won(groups.slice(0, 1), first), ...rest];
      } catch (error) {
        if (isTooManyChecks(error)) return this.#claim(chosen);
        this.#stale = true;
        throw error;
      }
    }
    return this.#claimGroups(groups);
  }

  /** Commit claim groups side by side; the ones won, in order. */
  async #claimGroups(groups: ClaimGroup[]): Promise<{ candidate: Candidate; list: string }[]> {
    if (groups.length === 0) return [];
    const { kv, keys } = this.#c;
    let outcome;
    try {
      outcome = await commitSideBySide(kv, keys, [this.fenceCheck], groups.map((g) => g.change));
    } catch (error) {
      this.#stale = true; // some claims may have landed: read them back before the next call
      throw error;
    }
    if (!outcome.ok && (await this.#fenceMoved())) this.#fenced = true;
    return this.#won(groups, outcome);
  }

  #won(groups: ClaimGroup[], outcome: CommitOutcome): { candidate: Candidate; list: string }[] {
    const won: { candidate: Candidate; list: string }[] = [];
    groups.forEach((g, i) => {
      if (!outcome.landed![i]) return;
      this.#lists.set(g.name, { key: g.key, ids: g.candidates.map((c) => c.entry.record.id) });
      for (const candidate of g.candidates) won.push({ candidate, list: g.name });
    });
    return won;
  }

  #readyJob({ entry, payload }: Held): ReadyJob {
    return {
      messageId: entry.record.id,
      payload,
      attempt: entry.record.attempts + 1,
      timeout: tryTimeout(entry.record, this.#c.settings.defaults),
      ...(entry.record.lost ? { lost: entry.record.lost } : {}), // workers lost in earlier tries
    };
  }

  async #fenceMoved(): Promise<boolean> {
    const [fence] = await readMany(this.#c.kv, [this.#c.keys.fence(this.#c.instance)]);
    return fence.versionstamp !== this.#fenceVs;
  }

  // ------------------------------------------------------------------------------------------
  // Tries: the controller's work queue

  /** Stores, accepts and confirms all-or-nothing, in one commit. */
  commit(epoch: number, batch: QueueBatch, signal?: AbortSignal): Promise<QueueBatchResult> {
    batch = copyBatch(batch); // read now: the call may run after the caller changed it
    return this.#serial(signal, () => this.#apply(epoch, batch, signal));
  }

  /** Store one job (see `commit`). */
  async store(
    epoch: number,
    messageId: string,
    proposedSeq: number,
    payload: string,
    signal?: AbortSignal,
  ): Promise<StoreResult> {
    const batch = { store: { firstSeq: proposedSeq, jobs: [{ messageId, payload }] } };
    const result = await this.#serial(signal, () => this.#apply(epoch, batch, signal));
    return result.stored[0];
  }

  async #apply(epoch: number, batch: QueueBatch, signal?: AbortSignal): Promise<QueueBatchResult> {
    if (epoch === 0 || epoch !== this.#epoch || this.#fenced || this.#closed) {
      throw new QueueFencedError(
        `Cannot write: epoch ${epoch} of instance ${this.#c.instance} is fenced (current ${this.#epoch})`,
      );
    }
    if (this.#stale) await this.#syncHeld("reread", signal);
    const { keys, instance, clock, settings, random } = this.#c;
    const now = clock.now();
    const jobs = batch.store?.jobs ?? [];
    const maxBytes = this.#c.maxPayloadBytes;
    const fresh = checkBatch(
      batch,
      this.#currentSeq + 1,
      (id) => Boolean(this.#held.get(id)?.entry.trial),
      (messageId, payload) => checkJob(messageId, payload, maxBytes),
    );
    const adopting = await this.#readForAdoption(
      [...new Set(fresh)].filter((id) => !this.#held.has(id)),
      signal,
    );
    // The batch's effect, per job, applied to memory once it is durable.
    const draft = new Map<string, Held | null>();
    const current = (id: string) => draft.has(id) ? draft.get(id) ?? undefined : this.#held.get(id);
    const changes = new Map<string, Change>();
    const changeOf = (id: string) => {
      let change = changes.get(id);
      if (!change) changes.set(id, change = new Change());
      return change;
    };
    const notices: BacklogNotice[] = [];
    /** Lists made for jobs stored without a claim, named by them. */
    const adoptedLists = new Map<string, OwnedList>();
    /** The lists of the jobs this call ends here (they shrink with a later commit). */
    const leaving: Held[] = [];
    /** Tries of claimed jobs started here, and the state each left. */
    const startedHere = new Map<string, Start>();
    const froms = new Map<string, JobRecord["state"]>();
    let seq = this.#currentSeq;
    const stored: StoreResult[] = [];
    for (const job of jobs) {
      const id = job.messageId;
      const held = current(id);
      if (held?.entry.trial) {
        stored.push({ seq: held.entry.trial.seq, alreadyStored: true, payload: held.payload });
        continue;
      }
      seq += 1;
      const base = held ??
        this.#adopt(changeOf(id), adoptedLists, adopting.get(id)!, job.payload, now);
      // A job claimed from the shared backlog needs no separate Accept (as in the engine): the
      // backlog is the producer's recoverable source, and this write takes the job out of it.
      const entry = started(base.entry, seq, now, held !== undefined);
      if (held) {
        startedHere.set(id, { seq, at: now, before: base.entry.record.attempts });
        froms.set(id, base.entry.record.state);
      } else changeOf(id).move(base.entry.record.state, "active");
      draft.set(id, { ...base, entry, handed: true });
      notices.push({ job: infoOf(entry.record, now), previous: base.entry.record.state });
      stored.push({
        seq,
        alreadyStored: false,
        payload: base.payload,
        ...(held ? { accepted: true } : {}),
      });
    }
    for (const id of batch.accept ?? []) {
      const held = current(id)!;
      const trial = held.entry.trial!;
      // Already accepted: a repeat, or a job claimed from the backlog. Nothing to write.
      if (!trial.accepted) {
        draft.set(id, { ...held, entry: { ...held.entry, trial: { ...trial, accepted: true } } });
        changeOf(id);
      }
    }
    for (const id of batch.confirm ?? []) {
      const held = current(id);
      const trial = held?.entry.trial;
      if (!held || !trial || trial.confirmed) continue;
      const outcome = batch.outcomes?.get(id);
      const confirmed = { ...trial, confirmed: true, ...(outcome ? { outcome } : {}) };
      draft.set(id, { ...held, entry: { ...held.entry, trial: confirmed } });
      changeOf(id);
    }
    // Tries started here whose jobs write nothing else now go in one tries record; a job also
    // confirmed (or otherwise written) in this call carries its start in its own change.
    const inRecord = new Map<string, Start>();
    for (const [id, start] of startedHere) {
      if (changes.has(id)) changes.get(id)!.move(froms.get(id), "active");
      else inRecord.set(id, start);
    }
    let triesName: string | undefined, triesKeyOf: KvKey | undefined;
    let triesChange: Change | undefined;
    if (inRecord.size > 0) {
      triesName = this.#newList();
      triesKeyOf = triesKey(keys, instance, this.#epoch, this.#nextList - 1);
      triesChange = new Change().set(triesKeyOf, encodeTries(inRecord));
      for (const id of inRecord.keys()) triesChange.move(froms.get(id), "active");
    }
    for (const [id, change] of changes) {
      const held = current(id)!;
      const trial = held.entry.trial!;
      if (!trial.accepted || !trial.confirmed) {
        change.set(keys.record(id), encodeEntry(held.entry));
        continue;
      }
      const record = finished(held.entry, trial.outcome, settings.defaults, now, random);
      settle(change, this.#placement, held.entry, record);
      draft.set(id, null);
      leaving.push(held);
      notices.push({ job: infoOf(record, now), previous: "active" });
    }
    const all = [...changes.values()];
    if (triesChange) all.push(triesChange);
    if (seq !== this.#currentSeq) {
      all.push(new Change().set(keys.cursor(instance), encodeCursor(seq)));
    }
    if (all.length === 0) return { stored };
    const shrinking = this.#shrinkLists(all);
    let outcome;
    try {
      outcome = await commitSideBySide(this.#c.kv, keys, [this.fenceCheck], all, signal);
    } catch (error) {
      this.#stale = true; // some of it may have landed
      throw error;
    }
    if (!outcome.ok) {
      if (outcome.applied > 0) this.#stale = true;
      if (await this.#fenceMoved()) {
        this.#fenced = true;
        throw new QueueFencedError(
          `Cannot write: instance ${instance} was fenced by another process (epoch ${epoch})`,
        );
      }
      // A job adopted here changed meanwhile: a retriable error, the next attempt reads it again.
      throw new Error(`Cannot commit: a job changed under instance ${instance}; retry`);
    }
    for (const [name, list] of adoptedLists) this.#lists.set(name, list);
    if (triesName) this.#tries.set(triesName, { key: triesKeyOf!, ids: [...inRecord.keys()] });
    this.#applyShrunk(shrinking);
    for (const held of leaving) {
      this.#shrunk.add(held.list);
      if (held.tries) this.#triesShrunk.add(held.tries);
    }
    for (const [id, held] of draft) {
      if (!held) this.#held.delete(id);
      else if (inRecord.has(id)) this.#held.set(id, { ...held, tries: triesName });
      else this.#held.set(id, held);
    }
    this.#currentSeq = seq;
    for (const notice of notices) this.#c.notify(notice);
    return { stored };
  }

  /** What KV holds for MessageIDs stored here without a claim (plain work-queue use). */
  async #readForAdoption(
    ids: readonly string[],
    signal?: AbortSignal,
  ): Promise<Map<string, Adoption>> {
    const { kv, keys } = this.#c;
    const entries = await readMany(kv, ids.map((id) => keys.record(id)), signal);
    const found = new Map<string, Adoption>();
    for (const [i, id] of ids.entries()) {
      const { value, versionstamp } = entries[i];
      const entry = versionstamp === null ? undefined : decodeStored(value, id).entry;
      if (entry) {
        if (entry.owner !== undefined) {
          throw new QueueConflictError(`Cannot store ${id}: instance ${entry.owner} holds it`);
        }
        const payload = await this.#readPayload(entry, signal);
        found.set(id, { id, entry, versionstamp: versionstamp!, payload });
      } else found.set(id, { id, finishedVs: versionstamp });
    }
    return found;
  }

  /** Take over a job stored without a claim: a queued or dead one, or a new one. */
  #adopt(
    change: Change,
    lists: Map<string, OwnedList>,
    adoption: Adoption,
    payload: string,
    now: number,
  ): Held {
    const { keys, instance } = this.#c;
    const id = adoption.id;
    const list = this.#newList();
    const key = listKey(keys, instance, this.#epoch, this.#nextList - 1);
    change.set(key, encodeList([id]));
    lists.set(list, { key, ids: [id] });
    if (adoption.entry) {
      const { entry } = adoption;
      change.check(keys.record(id), adoption.versionstamp!);
      if (entry.record.state === "dead") {
        change.delete(keys.deadEntry(entry.record.finishedAt ?? 0, id));
      } else change.delete(readyKeyOf(keys, entry));
      return { entry: claimed(entry, instance), payload: adoption.payload!, handed: true, list };
    }
    change.check(keys.record(id), adoption.finishedVs ?? null);
    const record: JobRecord = newRecord(id, planJob({}, now), now);
    change.move(undefined, record.state);
    let entry: Entry;
    if (utf8Bytes(payload) <= INLINE_BYTES) entry = { record, order: 0, payload, owner: instance };
    else {
      const parts = splitPayload(payload);
      parts.forEach((part, n) => change.set(keys.part(id, n), part));
      entry = { record, order: 0, parts: parts.length, owner: instance };
    }
    return { entry, payload, handed: true, list };
  }

  /**
   * Add to a commit of this instance the rewrite of every list that names jobs gone since (their
   * changes landed before): the list keeps the jobs still held, or goes once none is; and the
   * deletion of every tries record none of whose jobs is left in its try. Returns what memory
   * becomes once the commit lands.
   */
  #shrinkLists(all: Change[]): Shrinking {
    const lists = new Map<string, OwnedList | undefined>();
    const spentTries: string[] = [];
    for (const name of this.#triesShrunk) {
      const tries = this.#tries.get(name);
      if (!tries || tries.ids.some((id) => this.#held.get(id)?.tries === name)) continue;
      all.push(new Change().delete(tries.key));
      spentTries.push(name);
    }
    for (const name of this.#shrunk) {
      const list = this.#lists.get(name);
      if (!list) continue;
      const ids = list.ids.filter((id) => this.#held.get(id)?.list === name);
      if (ids.length === list.ids.length) continue;
      if (ids.length === 0) {
        all.push(new Change().delete(list.key));
        lists.set(name, undefined);
      } else {
        all.push(new Change().set(list.key, encodeList(ids)));
        lists.set(name, { key: list.key, ids });
      }
    }
    return { lists, spentTries };
  }

  #applyShrunk({ lists, spentTries }: Shrinking): void {
    for (const name of spentTries) {
      this.#triesShrunk.delete(name);
      this.#tries.delete(name);
    }
    for (const [name, list] of lists) {
      this.#shrunk.delete(name);
      if (list) this.#lists.set(name, list);
      else this.#lists.delete(name);
    }
  }

  /**
   * Give the jobs claimed ahead back to the shared backlog, as they were (no worker is left to
   * run them here; another instance's may).
   */
  handBackLookahead(): Promise<number> {
    // The usual case (nothing claimed ahead, no claim in flight) needs no turn of its own.
    if (this.#lookahead.size === 0 && !this.#claiming) return Promise.resolve(0);
    return this.#serial(undefined, () =>
      this.#alone(async () => {
        if (!this.live || this.#lookahead.size === 0) return 0;
        const { kv, keys, clock } = this.#c;
        const now = clock.now();
        const back = [...this.#lookahead].flatMap((id) => {
          const held = this.#held.get(id);
          return held && !held.handed && !held.entry.trial ? [held] : [];
        });
        const changes = back.map((held) => {
          const change = new Change();
          settle(change, this.#placement, held.entry, held.entry.record);
          return change;
        });
        const outcome = await commitSideBySide(kv, keys, [this.fenceCheck], changes);
        let count = 0;
        back.forEach((held, i) => {
          if (!outcome.landed![i]) return;
          const id = held.entry.record.id;
          this.#lookahead.delete(id);
          this.#held.delete(id);
          this.#shrunk.add(held.list);
          count += 1;
          this.#c.notify({ job: infoOf(held.entry.record, now), previous: "waiting" });
        });
        if (!outcome.ok) this.#stale = true;
        return count;
      }));
  }

  // ------------------------------------------------------------------------------------------
  // Leaving

  /**
   * Hand everything back to the shared backlog (claims, and tries undone) and remove the lease:
   * a graceful exit, so no survivor has to wait for the lease to lapse.
   */
  leave(): Promise<number> {
    return this.#serial(undefined, () => this.#alone(() => this.#handBack()));
  }

  async #handBack(): Promise<number> {
    {
      if (this.#epoch === 0 || this.#fenced) return 0;
      const { kv, keys, instance, clock } = this.#c;
      if (this.#stale) await this.#syncHeld("reread");
      const now = clock.now();
      const changes: Change[] = [];
      const notices: BacklogNotice[] = [];
      for (const { entry } of this.#held.values()) {
        const record = recover(
          { ...entry, trial: entry.trial && { ...entry.trial, accepted: false } },
          { ...this.#recoveryOptions(now), cancelRequested: false },
        ).record;
        const change = new Change();
        settle(change, this.#placement, entry, record);
        changes.push(change);
        notices.push({ job: infoOf(record, now), previous: entry.record.state });
      }
      changes.push(
        ...dropAll([...this.#lists.values(), ...this.#tries.values()].map((list) => list.key)),
      );
      changes.push(new Change().delete(keys.lease(instance)).delete(keys.cursor(instance)));
      const outcome = await commitChanges(kv, keys, [this.fenceCheck], changes);
      if (!outcome.ok) {
        this.#fenced = true;
        return 0;
      }
      const count = this.#held.size;
      this.#held.clear();
      this.#lists.clear();
      this.#shrunk.clear();
      this.#tries.clear();
      this.#triesShrunk.clear();
      this.#lookahead.clear();
      this.#closed = true;
      for (const notice of notices) this.#c.notify(notice);
      return count;
    }
  }

  /** Run `task` with the held jobs to itself: after the claim round in flight, and none meanwhile. */
  async #alone<T>(task: () => Promise<T>): Promise<T> {
    this.#blocked += 1;
    try {
      await this.#claiming;
      return await task();
    } finally {
      this.#blocked -= 1;
    }
  }

  #recoveryOptions(now: number) {
    return {
      defaults: this.#c.settings.defaults,
      now,
      random: this.#c.random,
      instance: this.#c.instance,
    };
  }

  /** Calls run one at a time in call order; one aborted while waiting never runs. */
  #serial<T>(signal: AbortSignal | undefined, task: () => Promise<T>): Promise<T> {
    const run = this.#tail.then(() => {
      signal?.throwIfAborted();
      return task();
    });
    this.#tail = run.then(() => {}, () => {});
    return run;
  }
}

/** What KV holds for a MessageID stored without a claim. */
interface Adoption {
  readonly id: string;
  /** A live, unheld job (queued or dead). */
  readonly entry?: Entry;
  readonly versionstamp?: string;
  readonly payload?: string;
  /** The versionstamp of a finished record there (replaced by the new job). */
  readonly finishedVs?: string | null;
}

/**
 * Which `want` of the due candidates to claim: whole bands first (highest priority first); in
 * the band that has more than is wanted, this instance's share first (the MessageID's hash
 * modulo the live instances equals its rank), then the others, each in ready order.
 */
export function choose(
  due: readonly Candidate[],
  want: number,
  count: number,
  rank: number,
): Candidate[] {
  if (due.length <= want) return [...due];
  const chosen: Candidate[] = [];
  for (let i = 0; i < due.length && chosen.length < want;) {
    let j = i;
    while (j < due.length && due[j].band === due[i].band) j++;
    const band = due.slice(i, j);
    const room = want - chosen.length;
    if (band.length <= room) chosen.push(...band);
    else {
      const mine = (c: Candidate) => count <= 1 || hash(c.entry.record.id) % count === rank;
      chosen.push(...[...band.filter(mine), ...band.filter((c) => !mine(c))].slice(0, room));
    }
    i = j;
  }
  return chosen;
}

/** FNV-1a, 32 bits. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** A stored job's identity and payload, and its payload within `maxBytes`. */
function checkJob(messageId: string, payload: string, maxBytes: number): void {
  checkStoredJob(messageId, payload);
  if (payload.length * 3 > maxBytes && utf8Bytes(payload) > maxBytes) {
    throw new RangeError(
      `Cannot store ${messageId}: its payload is ${
        utf8Bytes(payload)
      } bytes; the maximum is ${maxBytes}`,
    );
  }
}
