/**
 * The last few failed tries of a job queue, newest first, for the dashboard: each time a try
 * ends failed (to be retried) or dead, from the queue's `job` events. A fixed number is kept,
 * with long error messages cut, so the list stays small whatever the workers report.
 *
 * @module
 */

import type { JobQueue } from "../backlog/job_queue.ts";

/** One failed try. */
export interface RecentFailure {
  /** The job's MessageID. */
  readonly id: string;
  /** `failed` (it will be retried) or `dead` (out of tries). */
  readonly state: "failed" | "dead";
  /** Which try it was. */
  readonly attempt: number;
  /** The worker that ran it, when known. */
  readonly worker?: string;
  /** The error's name and message (cut to 300 characters). */
  readonly error?: { readonly name: string; readonly message: string };
  /** When it failed, Unix ms. */
  readonly at: number;
}

const KEPT = 20;
const MAX_MESSAGE = 300;
const lists = new WeakMap<JobQueue, RecentFailures>();

/**
 * The recent failures of one job queue.
 *
 * @example
 * ```ts
 * import { JobQueue } from "../backlog/job_queue.ts";
 * import { RecentFailures } from "./recent_failures.ts";
 * const queue = new JobQueue({ name: "jobs" });
 * console.assert(RecentFailures.of(queue).list().length === 0);
 * ```
 */
export class RecentFailures {
  #items: RecentFailure[] = [];

  /** The list of `queue`, created (and subscribed) on first use. */
  static of(queue: JobQueue): RecentFailures {
    let list = lists.get(queue);
    if (!list) lists.set(queue, list = new RecentFailures(queue));
    return list;
  }

  private constructor(queue: JobQueue) {
    queue.watchJobs((job, previous) => {
      if (previous !== "active" || (job.state !== "failed" && job.state !== "dead")) return;
      const error = job.error && {
        name: job.error.name.slice(0, 100),
        message: job.error.message.slice(0, MAX_MESSAGE),
      };
      this.#items = [
        {
          id: job.id,
          state: job.state,
          attempt: job.attempts,
          ...(job.worker === undefined ? {} : { worker: job.worker }),
          ...(error ? { error } : {}),
          at: Date.now(),
        },
        ...this.#items.slice(0, KEPT - 1),
      ];
    });
  }

  /** The failures, newest first. */
  list(): readonly RecentFailure[] {
    return this.#items;
  }
}
