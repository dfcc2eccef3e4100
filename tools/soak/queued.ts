/**
 * What was still in the queue when the soak ended: the job numbers the controller's Deno KV file
 * holds accepted and unconfirmed, read after every process was reaped.
 *
 * The verifier counts an acknowledged job that never finished as **lost** only when it is not
 * there either: a job still unconfirmed in the durable queue is not lost, it runs after the next
 * start (that is the at-least-once promise). Whether it should have finished sooner is the
 * drain's verdict (`drain.ts`), which fails the soak on its own.
 *
 * The file is copied first and the copy loaded (a load takes a new epoch: it writes), so a kept
 * run's file stays as the soak left it. Only the classic soak's `DenoKvWorkQueue` is read; with
 * `--instances` the shared job store is not, and every unfinished job counts as lost as before.
 *
 * @module
 */

import { copyFileSync, existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, dirname, join } from "node:path";
import { DenoKvWorkQueue } from "../../deno_kv.ts";
import { jobNumber } from "./records.ts";

/** The key prefix of the classic soak controller's queue for `flow` (`controller_process.ts`). */
export function queuePrefix(flow: string): string[] {
  return ["soak", flow];
}

/**
 * The job numbers that `kvPath` (a KV file no process has open) holds accepted and unconfirmed
 * for `flow`; undefined when there is no such file.
 */
export async function readQueued(kvPath: string, flow: string): Promise<Set<number> | undefined> {
  if (!existsSync(kvPath)) return undefined;
  const copy = mkdtempSync(join(tmpdir(), "workpull-soak-kv-"));
  try {
    // The file and SQLite's companions (-wal, -shm), if any.
    const name = basename(kvPath);
    for (const file of readdirSync(dirname(kvPath))) {
      if (file.startsWith(name)) copyFileSync(join(dirname(kvPath), file), join(copy, file));
    }
    const kv = await Deno.openKv(join(copy, name));
    try {
      const queue = new DenoKvWorkQueue(kv, { prefix: queuePrefix(flow) });
      const { state } = await queue.load();
      const queued = new Set<number>();
      for (const job of state.unconfirmed) {
        const n = jobNumber(job.messageId);
        if (n > 0) queued.add(n);
      }
      return queued;
    } finally {
      kv.close();
    }
  } finally {
    rmSync(copy, { recursive: true, force: true });
  }
}
