/**
 * Count the confirmations a durable queue has written, so that a durable run ends when its last
 * confirmation is durable, as a raw KV run ends with its last commit. (The controller counts a
 * confirmation when the worker sends it; the queue may write it some commits later.)
 *
 * @module
 */

import type { DurableWorkQueue } from "../../src/queue/work_queue.ts";

/**
 * Wrap `queue`'s `commit` and `confirmMessage` in place; `count()` is the number of
 * confirmations they have written so far.
 *
 * @example
 * ```ts ignore
 * const queue = new DenoKvWorkQueue(kv);
 * const written = countWrittenConfirmations(queue);
 * // … run jobs through a controller on `queue` …
 * await until(() => written.count() >= jobs, "every confirmation written", 60_000);
 * ```
 */
export function countWrittenConfirmations(queue: DurableWorkQueue): { count(): number } {
  let written = 0;
  const commit = queue.commit?.bind(queue);
  if (commit) {
    queue.commit = async (epoch, batch, options) => {
      const result = await commit(epoch, batch, options);
      written += batch.confirm?.length ?? 0;
      return result;
    };
  }
  const confirmMessage = queue.confirmMessage.bind(queue);
  queue.confirmMessage = async (epoch, messageId, options) => {
    await confirmMessage(epoch, messageId, options);
    written += 1;
  };
  return { count: () => written };
}
