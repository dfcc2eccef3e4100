/**
 * The raw Deno KV baseline for the durable benchmarks: the `DenoKvWorkQueue` adapter's own
 * writes done directly with KV atomics, same keys and values. Per commit of `perCommit` jobs:
 * store them (and rewrite meta); accept them with one `accepted` record for the run; delete them
 * when confirmed, with the run's record, and remember them in one `completed` record, deleting
 * the oldest records past `completedWindow` (expiring after `completedRetention`, both at the
 * adapter's defaults, with the adapter's own ring). That is three commits, each checking the
 * epoch and meta versionstamps as the adapter does, and two mutations a job. Records are encoded as the adapter encodes them (one
 * `TextEncoder` call per job record), so the baseline pays no encoding cost the adapter avoids.
 *
 * @module
 */

import { CompletedRing } from "../../src/queue/deno_kv/completed.ts";
import {
  encodeAccepted,
  encodeEpoch,
  encodeJobText,
  encodeMeta,
} from "../../src/queue/deno_kv/codec.ts";
import { utf8Length } from "../../src/core/utf8.ts";
import { COMPLETED_DEFAULTS } from "../../src/queue/deno_kv/queue.ts";
import { KvQueueLayout } from "../../src/queue/deno_kv/layout.ts";

/**
 * Write `jobs` jobs through `kv` (a fresh store) the way the adapter would.
 *
 * @example
 * ```ts ignore
 * const kv = await Deno.openKv(":memory:");
 * await rawKvWrites(kv, 1000, 100);
 * ```
 */
export async function rawKvWrites(kv: Deno.Kv, jobs: number, perCommit: number): Promise<void> {
  const layout = new KvQueueLayout(["workpull"]);
  const epoch = await kv.atomic().set(layout.epochKey, encodeEpoch(1)).commit();
  if (!epoch.ok) throw new Error("cannot write the epoch");
  let metaVs: string | null = null;
  const completed = new CompletedRing();
  /** One commit fenced like the adapter's: epoch and meta unchanged, meta rewritten. */
  const commit = async (fill: (atomic: Deno.AtomicOperation) => void, currentSeq: number) => {
    const atomic = kv.atomic()
      .check({ key: layout.epochKey, versionstamp: epoch.versionstamp })
      .check({ key: layout.metaKey, versionstamp: metaVs });
    fill(atomic);
    const result = await atomic.set(layout.metaKey, encodeMeta(currentSeq)).commit();
    if (!result.ok) throw new Error("a check failed");
    metaVs = result.versionstamp;
  };
  for (let first = 1; first <= jobs; first += perCommit) {
    const last = Math.min(jobs, first + perCommit - 1);
    const ids: string[] = [];
    await commit((atomic) => {
      for (let s = first; s <= last; s++) {
        const id = crypto.randomUUID();
        ids.push(id);
        const payload = JSON.stringify({ n: s });
        const job = encodeJobText(id, utf8Length(id), payload, utf8Length(payload));
        atomic.set(layout.jobKey(s), job.record);
      }
    }, last);
    await commit(
      (atomic) => void atomic.set(layout.acceptedKey(first), encodeAccepted(last)),
      last,
    );
    await commit((atomic) => {
      atomic.delete(layout.acceptedKey(first));
      for (let s = first; s <= last; s++) atomic.delete(layout.jobKey(s));
      const done = ids.map((messageId, i) => ({ messageId, seq: first + i }));
      const writes = completed.plan(done, COMPLETED_DEFAULTS.window);
      for (const { n, value } of writes.sets) {
        atomic.set(layout.completedKey(n), value, { expireIn: COMPLETED_DEFAULTS.retention });
      }
      for (const n of writes.deletes) atomic.delete(layout.completedKey(n));
      completed.apply(writes);
    }, last);
  }
}
