/**
 * The raw Deno KV baseline of the backlog benchmarks: the Deno KV job store's own writes done
 * directly with KV atomics, same keys and values (`src/backlog/deno_kv/records.ts`), each commit
 * checking the epoch key as the store's journal does, `perCommit` jobs in each commit:
 *
 * - **ingest**: per job its record with its (small) payload in it (what `POST /jobs` writes);
 * - **drain**: per commit one record of the tries it starts (plus the append cursor), then the
 *   jobs' records deleted, one record of the finished jobs written with an expiry, and the tries
 *   record deleted (what completed tries write).
 *
 * @module
 */

import { encodeEpoch } from "../../src/queue/deno_kv/codec.ts";
import {
  encodeEntry,
  encodeFinished,
  encodeGroup,
  encodeMeta,
  encodeTries,
  JobStoreKeys,
} from "../../src/backlog/deno_kv/records.ts";
import { finishTry, newRecord, startTry } from "../../src/lifecycle/job_record.ts";
import { planJob, resolveDefaults } from "../../src/lifecycle/job_options.ts";

const DEFAULTS = resolveDefaults({});
/** A finished job's retention (the store's default: a day). */
const RETENTION = 86_400_000;

/** A fresh store's keys under `["raw"]` and its epoch; `commit` fences like the journal. */
async function fenced(kv: Deno.Kv) {
  const keys = new JobStoreKeys(["raw"]);
  const epoch = await kv.atomic().set(keys.epoch, encodeEpoch(1)).commit();
  if (!epoch.ok) throw new Error("cannot write the epoch");
  const commit = async (fill: (atomic: Deno.AtomicOperation) => void) => {
    const atomic = kv.atomic().check({ key: keys.epoch, versionstamp: epoch.versionstamp });
    fill(atomic);
    if (!(await atomic.commit()).ok) throw new Error("the epoch check failed");
  };
  return { keys, commit };
}

/** Ids, slots (as the store's journal numbers them), payloads and records of `jobs` new jobs. */
function newJobs(jobs: number) {
  const now = Date.now();
  return Array.from({ length: jobs }, (_, i) => {
    const id = crypto.randomUUID();
    const payload = JSON.stringify({ n: i });
    return { id, slot: i + 1, n: i, payload, record: newRecord(id, planJob({}, now), now) };
  });
}

/**
 * Ingest: write `jobs` new jobs (record and payload) `perCommit` at a time; jobs/s.
 *
 * @example
 * ```ts ignore
 * const kv = await Deno.openKv(":memory:");
 * console.log(await rawBacklogIngest(kv, 1000, 100));
 * ```
 */
export async function rawBacklogIngest(
  kv: Deno.Kv,
  jobs: number,
  perCommit: number,
): Promise<number> {
  const { keys, commit } = await fenced(kv);
  const all = newJobs(jobs);
  const started = performance.now();
  for (let first = 0; first < jobs; first += perCommit) {
    const batch = all.slice(first, first + perCommit);
    await commit((atomic) => {
      for (const job of batch) {
        atomic.set(
          keys.job(job.slot),
          encodeEntry({ record: job.record, order: job.n }, job.payload),
        );
      }
    });
  }
  return jobs / ((performance.now() - started) / 1000);
}

/**
 * Drain: write `jobs` jobs (not timed), then take and complete them, `perCommit` per commit;
 * jobs/s of the take and completion writes.
 *
 * @example
 * ```ts ignore
 * const kv = await Deno.openKv(":memory:");
 * console.log(await rawBacklogDrain(kv, 1000, 100));
 * ```
 */
export async function rawBacklogDrain(
  kv: Deno.Kv,
  jobs: number,
  perCommit: number,
): Promise<number> {
  const { keys, commit } = await fenced(kv);
  const all = newJobs(jobs);
  for (let first = 0; first < jobs; first += perCommit) {
    const batch = all.slice(first, first + perCommit);
    await commit((atomic) => {
      for (const job of batch) {
        atomic.set(
          keys.job(job.slot),
          encodeEntry({ record: job.record, order: job.n }, job.payload),
        );
      }
    });
  }
  const started = performance.now();
  for (let first = 0; first < jobs; first += perCommit) {
    const batch = all.slice(first, first + perCommit);
    const now = Date.now();
    const taken = batch.map((job) => startTry(job.record, now));
    await commit((atomic) => {
      const tries = batch.map((job, i) => [job.slot, first + i + 1, 1, now] as const);
      atomic.set(keys.triesFrom(first + 1), encodeTries(tries));
      atomic.set(keys.meta, encodeMeta(first + batch.length));
    });
    await commit((atomic) => {
      const finished = batch.map((job, i) => {
        atomic.delete(keys.job(job.slot));
        const done = finishTry(taken[i], { kind: "completed" }, DEFAULTS, now, Math.random);
        return encodeFinished({ record: done });
      });
      atomic.set(keys.group(first / perCommit + 1), encodeGroup(finished), { expireIn: RETENTION });
      atomic.delete(keys.triesFrom(first + 1));
    });
  }
  return jobs / ((performance.now() - started) / 1000);
}
