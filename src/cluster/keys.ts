/**
 * The keys of a shared flow on Deno KV, under its prefix `P`:
 *
 * ```text
 * [P, "record", id]                        a live job (record, order, payload, owner, try), or a
 *                                          completed or cancelled one (expires with retention)
 * [P, "parts", id, n]                      payload parts of a large payload, n = 0, 1, ...
 * [P, "ready", band, runAt, order, id]     a queued job's place: a copy of its record entry
 * [P, "band", band]                        a band that may hold ready entries (band = -priority)
 * [P, "dead", finishedAt, id]              a dead job, oldest death first
 * [P, "count", bucket]                     KvU64 counters: waiting, failed, active, dead
 * [P, "wake"]                              KvU64: one more for every commit that readies a job
 * [P, "fence", instance]                   {"epoch":n}: every write of the instance checks it
 * [P, "lease", instance]                   the instance's lease and figures (the registry)
 * [P, "owned", instance, epoch, n]         a list of jobs one claim took (`owned_index.ts`);
 *                                          [P, "owned", instance, id] in older stores
 * [P, "tries", instance, epoch, n]         tries one unit started (`started_tries.ts`)
 * [P, "cursor", instance]                  the instance's work-queue append cursor
 * [P, "cancel", instance, id]              a cancel request for a job the instance holds
 * [P, "paused"]                            {"paused":bool,"at":ms}: the flow's pause flag, shared
 *                                          with the single-instance store (`pause_flag.ts`)
 * ```
 *
 * Ready entries sort by band (higher priority first, because the band is the negated
 * priority), then due time, then submission order: listing a band from its start yields its due
 * jobs first. None of these names is used by the single-instance stores (`epoch`, `meta`,
 * `job`, `done`, `payload`, `try`, `finished`, `flags`, `accepted`, `completed`, `part`), so a
 * prefix holding one cannot be mistaken for a shared flow: `load` migrates a `DenoKvJobStore`'s
 * (`migration.ts`) and refuses a `DenoKvWorkQueue`'s.
 *
 * @module
 */

import type { KvKey } from "../queue/deno_kv/port.ts";

/** The counters of a shared flow: how many live jobs are in each state bucket. */
export type CounterName = "waiting" | "failed" | "active" | "dead";

/** Every counter, in the order `counts()` reads them. */
export const COUNTERS: readonly CounterName[] = ["waiting", "failed", "active", "dead"];

/** The band of a priority: its negation (0 stays +0, so that one band holds priority 0). */
export function bandOf(priority: number): number {
  return priority === 0 ? 0 : -priority;
}

/** The keys of one shared flow. */
export class ClusterKeys {
  /** List prefix of the live job records. */
  readonly records: KvKey;
  /** List prefix of the ready entries. */
  readonly ready: KvKey;
  /** List prefix of the band markers. */
  readonly bands: KvKey;
  /** List prefix of the dead-letter order. */
  readonly dead: KvKey;
  /** List prefix of the leases (the instance registry). */
  readonly leases: KvKey;
  /** Keys a single-instance store writes under the same prefix (`load` migrates them). */
  readonly singleInstanceMarkers: readonly KvKey[];

  /** Keys under `prefix`. */
  constructor(readonly prefix: KvKey) {
    this.records = [...prefix, "record"];
    this.ready = [...prefix, "ready"];
    this.bands = [...prefix, "band"];
    this.dead = [...prefix, "dead"];
    this.leases = [...prefix, "lease"];
    this.singleInstanceMarkers = [[...prefix, "epoch"], [...prefix, "meta"]];
  }

  /** A job's record (live or finished). */
  record(id: string): KvKey {
    return [...this.records, id];
  }

  /** Part `n` of a large payload. */
  part(id: string, n: number): KvKey {
    return [...this.prefix, "parts", id, n];
  }

  /** A queued job's ready entry. */
  readyEntry(priority: number, runAt: number, order: number, id: string): KvKey {
    return [...this.ready, bandOf(priority), runAt, order, id];
  }

  /** List prefix of one band's ready entries. */
  readyBand(band: number): KvKey {
    return [...this.ready, band];
  }

  /** The marker of a band. */
  band(band: number): KvKey {
    return [...this.bands, band];
  }

  /** A dead job's place in the dead-letter order. */
  deadEntry(finishedAt: number, id: string): KvKey {
    return [...this.dead, finishedAt, id];
  }

  /** A counter. */
  counter(name: CounterName): KvKey {
    return [...this.prefix, "count", name];
  }

  /** The wake counter (`waker.ts`). */
  get wake(): KvKey {
    return [...this.prefix, "wake"];
  }

  /** An instance's fence. */
  fence(instance: string): KvKey {
    return [...this.prefix, "fence", instance];
  }

  /** An instance's lease. */
  lease(instance: string): KvKey {
    return [...this.leases, instance];
  }

  /** List prefix of the jobs an instance holds. */
  ownedBy(instance: string): KvKey {
    return [...this.prefix, "owned", instance];
  }

  /** An instance's append cursor. */
  cursor(instance: string): KvKey {
    return [...this.prefix, "cursor", instance];
  }

  /** List prefix of the cancel requests for an instance. */
  cancelsFor(instance: string): KvKey {
    return [...this.prefix, "cancel", instance];
  }

  /** A cancel request for a job an instance holds. */
  cancel(instance: string, id: string): KvKey {
    return [...this.cancelsFor(instance), id];
  }
}
