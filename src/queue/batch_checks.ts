/**
 * The checks every work queue makes before it applies a `commit`, in one place: each stored job
 * has a MessageID and JSON text; a batch that stores a job not yet held must start at the next
 * store sequence; an accepted MessageID must be held already or stored by the same batch. They
 * run before anything is applied, so a batch that fails them changes nothing.
 *
 * @module
 */

import { type QueueBatch, QueueConflictError } from "./work_queue.ts";

/** A stored job's identity and payload, as every queue requires them. */
export function checkStoredJob(messageId: string, payload: string): void {
  if (typeof messageId !== "string" || messageId.trim() === "") {
    throw new TypeError("Cannot store a job: messageId must be a non-blank string");
  }
  if (typeof payload !== "string" || payload === "") {
    throw new TypeError(`Cannot store ${messageId}: payload must be non-empty JSON text`);
  }
}

/**
 * Check `batch` against a queue whose next store sequence is `nextSeq` and which holds the jobs
 * `held` answers true for; `checkJob` checks each stored job (a queue with a payload limit adds
 * it there). Returns the MessageIDs the batch stores for the first time, in batch order (a
 * repeated one as often as it is repeated). No `Set` of them is made unless the batch accepts a
 * job that is not held: an engine hashes a fresh string dearly the first time it is a key.
 */
export function checkBatch(
  batch: QueueBatch,
  nextSeq: number,
  held: (messageId: string) => boolean,
  checkJob: (messageId: string, payload: string) => void = checkStoredJob,
): readonly string[] {
  const fresh: string[] = [];
  for (const job of batch.store?.jobs ?? []) {
    checkJob(job.messageId, job.payload);
    if (!held(job.messageId)) fresh.push(job.messageId);
  }
  if (fresh.length > 0 && batch.store!.firstSeq !== nextSeq) {
    throw new QueueConflictError(
      `Cannot store a batch at ${batch.store!.firstSeq}: the next sequence is ${nextSeq}`,
    );
  }
  let stored: Set<string> | undefined;
  for (const id of batch.accept ?? []) {
    if (held(id)) continue;
    stored ??= new Set(fresh);
    if (!stored.has(id)) throw new QueueConflictError(`Cannot accept ${id}: unknown MessageID`);
  }
  return fresh;
}
