/**
 * What a soak's controller (the classic controller process, or a shared-mode instance) journals:
 * every worker bound and unbound, every requeue and every self-restart, each with the
 * controller's current session, and every durable commit with its start and end. The verifier
 * reads these to tell which binding handed out a run, when it ended, and which confirmations
 * were durable when the controller was killed (`evidence.ts`, `classify.ts`).
 *
 * @module
 */

import type {
  QueueBatch,
  QueueBatchResult,
  QueueCallOptions,
  WorkPullingController,
} from "../../mod.ts";
import { type Journal, wallClock } from "./journal.ts";

/** Journal `controller`'s binding events to `journal`, as process `pid`. */
export function journalBindings(
  controller: WorkPullingController,
  journal: Journal,
  pid: number,
): void {
  controller.addEventListener("worker-bound", (event) => {
    journal.write({
      ev: "bound",
      pid,
      session: controller.session,
      ep: event.worker,
      binding: event.binding,
      t: wallClock(),
    });
  });
  controller.addEventListener("worker-unbound", (event) => {
    journal.write({
      ev: "unbound",
      pid,
      session: controller.session,
      ep: event.worker,
      binding: event.binding,
      reason: event.reason,
      requeued: event.requeued,
      t: wallClock(),
    });
  });
  controller.addEventListener("requeued", (event) => {
    journal.write({
      ev: "requeued",
      pid,
      session: controller.session,
      ep: event.worker,
      ids: [...event.messageIds],
      t: wallClock(),
    });
  });
  controller.addEventListener("restarted", (event) => {
    journal.write({
      ev: "restarted",
      pid,
      session: event.session,
      cause: String(event.cause),
      t: wallClock(),
    });
  });
}

/**
 * Journal every commit of `queue` (replacing its `commit`): start, end, and what it carried.
 * `full` marks a commit that may have left queued confirmations for the next one: at the
 * operation limit, or retried (a retry after a timed-out attempt drops its confirmations).
 * `confirmedAtStart`: also journal each confirmation it carries as applied just before it (for
 * a controller whose confirmations are not journaled when applied).
 */
export function journalCommits(
  queue: {
    commit(
      epoch: number,
      batch: QueueBatch,
      options?: QueueCallOptions,
    ): Promise<QueueBatchResult>;
  },
  journal: Journal,
  pid: number,
  maxOperations: number,
  confirmedAtStart = false,
): void {
  // A retried unit keeps the start of its first attempt: what it carries was fixed then.
  let failedSince: number | undefined;
  const commit = queue.commit.bind(queue);
  queue.commit = async (epoch: number, batch: QueueBatch, options?: QueueCallOptions) => {
    const s = failedSince ?? wallClock();
    let result;
    try {
      result = await commit(epoch, batch, options);
    } catch (error) {
      failedSince = s;
      throw error;
    }
    const retried = failedSince !== undefined;
    failedSince = undefined;
    const stores = batch.store?.jobs.length ?? 0;
    const accepts = batch.accept?.length ?? 0;
    const confirms = batch.confirm?.length ?? 0;
    if (confirmedAtStart) {
      for (const id of batch.confirm ?? []) journal.write({ ev: "confirmed", pid, id, t: s - 1 });
    }
    journal.write({
      ev: "commit",
      pid,
      s,
      e: wallClock(),
      stores,
      accepts,
      confirms,
      full: retried || stores + accepts + confirms >= maxOperations - 1,
    });
    return result;
  };
}
