/**
 * Leases and takeover: how the instances of a shared flow notice that one of them died, and how
 * exactly one survivor gives its jobs back to the backlog.
 *
 * - **Renewal.** An instance rewrites its lease (`[P, "lease", id]`: when it lapses on the
 *   wall clock, its address and figures) every `renewInterval`, in a commit checked on its fence.
 *   A renewal that finds the fence moved means another process took the instance over: it is
 *   fenced. An instance whose renewals failed until its own lease lapsed (on its own clock)
 *   claims nothing until a renewal succeeds again.
 * - **Takeover.** On the same timer every instance reads the leases (the instance registry).
 *   A lease past its `expiresAt` is taken over: first the dead instance's fence is bumped and its
 *   lease rewritten ("taken over by", lapsing a TTL from now), in one commit checked on the
 *   survivor's own fence, on the lease as read (the instance did not renew, nobody else started a
 *   takeover) and on the dead instance's fence as read: of survivors racing, exactly one commit
 *   lands, and the others' checks on the lease fail from then on. Then every job the dead
 *   instance held goes back (`placement.recover`), in commits checked on both fences, so a
 *   restart of the dead instance under the same id (which bumps its fence again) stops a
 *   takeover midway without harm; then its lease, cursor and leftover cancel requests are
 *   removed and its fence is set to expire. A survivor that dies midway leaves the rewritten
 *   lease to lapse, and another survivor takes over from there.
 * - **Cancel requests** left for this instance are picked up on the same timer and handed to its
 *   controller.
 *
 * Clocks: a lease's `expiresAt` is written on its holder's wall clock and compared on the
 * survivors'. A survivor whose clock runs ahead by `d` takes over `d` early. That costs
 * duplicates, never correctness (the fence makes a live instance that was taken over fail its
 * next write), as long as clocks agree well within the TTL, as NTP-synchronised hosts do.
 *
 * @module
 */

import type { Clock } from "../core/clock.ts";
import { infoOf } from "../lifecycle/job_record.ts";
import type { ResolvedDefaults } from "../lifecycle/job_options.ts";
import type { KvEntryLike } from "../queue/deno_kv/port.ts";
import type { BacklogNotice } from "./backlog.ts";
import {
  decodeFence,
  decodeLease,
  decodeStored,
  encodeFence,
  encodeLease,
  type Lease,
} from "./codec.ts";
import type { ClusterKeys } from "./keys.ts";
import { Change, type ClusterKvLike, commitChanges, listAll, readMany } from "./kv_writes.ts";
import { retryLocked } from "../queue/deno_kv/retry_locked.ts";
import { type PlacementContext, recover, settle } from "./placement.ts";
import { dropAll, readOwned } from "./owned_index.ts";
import { readStarted, withStart } from "./started_tries.ts";
import type { InstanceQueue } from "./instance_queue.ts";

/** A retired instance's fence is kept this long after a takeover, ms (then KV drops it). */
const RETIRED_FENCE_MS = 7 * 86_400_000;

/** A lease as read, with its versionstamp. */
export interface ListedLease {
  readonly lease: Lease;
  readonly versionstamp: string;
}

/** What a takeover did. */
export interface Takeover {
  /** The instance taken over. */
  readonly instance: string;
  /** Its epoch that was fenced. */
  readonly epoch: number;
  /** How many of its jobs went back (or ended). */
  readonly jobs: number;
  /** When its lease had lapsed, epoch ms (on its holder's clock). */
  readonly expiredAt: number;
  /** When the takeover ended, epoch ms (on this instance's clock). */
  readonly at: number;
}

/** What the leases need from their store. */
export interface LeaseContext {
  readonly kv: ClusterKvLike;
  readonly keys: ClusterKeys;
  readonly instance: string;
  readonly address: string | undefined;
  readonly clock: Clock;
  readonly random: () => number;
  readonly defaults: ResolvedDefaults;
  readonly placement: PlacementContext;
  readonly queue: InstanceQueue;
  /** The controller's figures (connected workers, jobs at them, jobs in its pool). */
  figures(): { readonly workers: number; readonly inFlight: number; readonly pending: number };
  /** A job changed (after the change is durable). */
  notify(notice: BacklogNotice): void;
}

/** An instance's lease, the registry, and takeovers. */
export class Leases {
  readonly #c: LeaseContext;
  readonly #ttl: number;
  /** When this instance's lease lapses, on its own clock (conservative: measured before writing). */
  #expiresAt = 0;
  #startedAt = 0;

  constructor(context: LeaseContext, ttl: number) {
    this.#c = context;
    this.#ttl = ttl;
  }

  /** The lease value for `epoch`, written by a load: the lease lapses a TTL from now. */
  leaseFor(epoch: number): Uint8Array {
    const now = this.#c.clock.now();
    this.#startedAt = now;
    this.#expiresAt = now + this.#ttl;
    return this.#value(epoch, now);
  }

  #value(epoch: number, now: number): Uint8Array {
    const { held } = this.#c.queue.figures;
    const figures = this.#c.figures();
    return encodeLease({
      id: this.#c.instance,
      epoch,
      expiresAt: now + this.#ttl,
      heartbeat: now,
      startedAt: this.#startedAt,
      ...(this.#c.address === undefined ? {} : { address: this.#c.address }),
      workers: figures.workers,
      inFlight: figures.inFlight,
      pending: figures.pending,
      claimed: held,
    });
  }

  /** Whether this instance's lease has lapsed on its own clock. */
  get lapsed(): boolean {
    return this.#c.clock.now() > this.#expiresAt;
  }

  /** Renew this instance's lease; false when the instance was fenced (taken over). */
  async renew(): Promise<boolean> {
    const { kv, keys, instance, queue } = this.#c;
    if (!queue.live) return false;
    const now = this.#c.clock.now();
    const value = this.#value(queue.epoch, now);
    const result = await retryLocked(() =>
      kv.atomic().check(queue.fenceCheck).set(keys.lease(instance), value).commit()
    );
    if (!result.ok) {
      queue.markFenced();
      return false;
    }
    this.#expiresAt = now + this.#ttl; // only a landed renewal extends it
    return true;
  }

  /** Every lease in the registry, as read now. */
  async list(): Promise<ListedLease[]> {
    const entries = await listAll(this.#c.kv, { prefix: this.#c.keys.leases });
    return entries.flatMap((entry: KvEntryLike) => {
      const lease = decodeLease(entry.value);
      return lease && entry.versionstamp ? [{ lease, versionstamp: entry.versionstamp }] : [];
    });
  }

  /**
   * Take over the instance whose lease is `listed` (it lapsed): undefined when another survivor
   * won, the instance renewed meanwhile, or this instance cannot write.
   */
  async takeOver(listed: ListedLease): Promise<Takeover | undefined> {
    const { kv, keys, queue, clock, defaults, random } = this.#c;
    const dead = listed.lease.id;
    if (!queue.live || dead === this.#c.instance) return undefined;
    const [fence] = await readMany(kv, [keys.fence(dead)]);
    const epoch = fence.versionstamp === null ? 0 : decodeFence(fence.value);
    const now = clock.now();
    const claim = encodeLease({
      ...listed.lease,
      expiresAt: now + this.#ttl,
      heartbeat: now,
      takenOverBy: this.#c.instance,
    });
    const bumped = await retryLocked(() =>
      kv.atomic()
        .check(queue.fenceCheck)
        .check({ key: keys.lease(dead), versionstamp: listed.versionstamp })
        .check({ key: keys.fence(dead), versionstamp: fence.versionstamp })
        .set(keys.fence(dead), encodeFence(epoch + 1))
        .set(keys.lease(dead), claim)
        .commit()
    );
    if (!bumped.ok) return undefined;
    const fences = [queue.fenceCheck, { key: keys.fence(dead), versionstamp: bumped.versionstamp }];

    const cancelDepth = keys.cancelsFor(dead).length;
    const index = await readOwned(kv, keys, dead);
    const owned = [...index.ids];
    const cancels = (await listAll(kv, { prefix: keys.cancelsFor(dead) })).flatMap((entry) => {
      const id = entry.key[cancelDepth];
      return typeof id === "string" ? [id] : [];
    });
    const cancelled = new Set(cancels);
    const records = await readMany(kv, owned.map((id) => keys.record(id)));
    const tries = await readStarted(kv, keys, dead);
    const changes: Change[] = [];
    /** The notice of each change (aligned), for the jobs that moved. */
    const notices: (BacklogNotice | undefined)[] = [];
    owned.forEach((id, i) => {
      const { value, versionstamp } = records[i];
      const stored = versionstamp === null ? undefined : decodeStored(value, id).entry;
      if (stored?.owner !== dead) return; // it left the dead instance before it died
      const entry = withStart(stored, tries.starts.get(id));
      const { record, lost } = recover(entry, {
        defaults,
        now,
        random,
        cancelRequested: cancelled.has(id),
        instance: dead,
      });
      const change = new Change();
      settle(change, this.#c.placement, entry, record, lost);
      changes.push(change);
      notices.push({ job: infoOf(record, now), previous: entry.record.state });
    });
    // The index and the requests go after every job came back (a takeover cut short leaves them
    // for the next survivor).
    for (
      const drop of dropAll([
        ...index.keys,
        ...tries.keys,
        ...cancels.map((id) => keys.cancel(dead, id)),
      ])
    ) {
      changes.push(drop);
      notices.push(undefined);
    }
    const retire = new Change()
      .delete(keys.lease(dead))
      .delete(keys.cursor(dead))
      .set(keys.fence(dead), encodeFence(epoch + 1), RETIRED_FENCE_MS);
    changes.push(retire);
    let applied: number;
    try {
      applied = (await commitChanges(kv, keys, fences, changes)).applied;
    } catch (error) {
      // An unknown outcome: the retirement comes last, so if the lease is gone every change
      // before it landed and the takeover is done; if not, a later round takes over what is left.
      const [lease] = await readMany(kv, [keys.lease(dead)]);
      if (lease.versionstamp !== null) throw error;
      applied = changes.length;
    }
    const moved = notices.slice(0, applied).filter((n): n is BacklogNotice => !!n);
    for (const notice of moved) this.#c.notify(notice);
    return {
      instance: dead,
      epoch,
      jobs: moved.length,
      expiredAt: listed.lease.expiresAt,
      at: clock.now(),
    };
  }

  /** The cancel requests left for this instance (each removed as it is read). */
  async cancelRequests(): Promise<string[]> {
    const { kv, keys, instance } = this.#c;
    const depth = keys.cancelsFor(instance).length;
    const listed = await listAll(kv, { prefix: keys.cancelsFor(instance) });
    const ids = listed.flatMap((entry) =>
      typeof entry.key[depth] === "string" ? [entry.key[depth] as string] : []
    );
    if (ids.length > 0) {
      const changes = ids.map((id) => new Change().delete(keys.cancel(instance, id)));
      await commitChanges(kv, keys, [], changes);
    }
    return ids;
  }
}
