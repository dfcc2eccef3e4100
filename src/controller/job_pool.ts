/**
 * The controller's pool: accepted jobs waiting for a worker, in dispatch order (new jobs at the
 * tail, requeued ones at the head), with the total size of their payloads, which bounds how far
 * ahead of the workers' demand the controller takes jobs (its `lookaheadBytes`).
 *
 * @module
 */

import { Deque } from "../core/deque.ts";
import type { Job } from "./binding.ts";

/**
 * Jobs waiting for a worker, and the characters of their payloads' JSON text.
 *
 * @example
 * ```ts ignore
 * const pool = new JobPool();
 * pool.pushBack(job);
 * console.assert(pool.length === 1 && pool.chars === job.payload.length);
 * ```
 */
export class JobPool {
  readonly #jobs = new Deque<Job>();
  #chars = 0;

  /** How many jobs wait. */
  get length(): number {
    return this.#jobs.length;
  }

  /** The characters of the waiting jobs' payloads. */
  get chars(): number {
    return this.#chars;
  }

  /** Add a job at the tail (a newly accepted or reloaded job). */
  pushBack(job: Job): void {
    this.#jobs.pushBack(job);
    this.#chars += job.payload.length;
  }

  /** Add a job at the head (a requeued job). */
  pushFront(job: Job): void {
    this.#jobs.pushFront(job);
    this.#chars += job.payload.length;
  }

  /** Take the head, the next job to dispatch. */
  shift(): Job | undefined {
    const job = this.#jobs.shift();
    if (job) this.#chars -= job.payload.length;
    return job;
  }

  /** Take `job` out wherever it is; true when it was here. O(n). */
  remove(job: Job): boolean {
    if (!this.#jobs.remove((held) => held === job)) return false;
    this.#chars -= job.payload.length;
    return true;
  }

  /** Drop every job. */
  clear(): void {
    this.#jobs.clear();
    this.#chars = 0;
  }
}
