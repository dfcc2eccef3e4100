/**
 * The in-memory job store: the {@linkcode JobStore} contract in its plainest form, for flows that
 * need no durability (a process exit loses the jobs) and as the model the Deno KV store is checked
 * against. Where a job is kept, and how it moves, is the engine's story (`job_store_engine.ts`);
 * this store's journal keeps nothing.
 *
 * @module
 */

import { JobStoreEngine, type JobStoreEngineOptions, MEMORY_JOURNAL } from "./job_store_engine.ts";

/** Options of {@linkcode MemoryJobStore}. */
export type MemoryJobStoreOptions = JobStoreEngineOptions;

/**
 * A process-local job store.
 *
 * @example A delayed job becomes due
 * ```ts
 * import { MemoryJobStore } from "./memory_job_store.ts";
 * import { planJob } from "../lifecycle/job_options.ts";
 * import { SimulatedClock } from "../core/clock.ts";
 *
 * const clock = new SimulatedClock();
 * const store = new MemoryJobStore({ clock });
 * await store.load(); // a JobQueue's controller does this at start
 * await store.enqueue([{ id: "j1", payload: "1", plan: planJob({ delay: 1000 }, clock.now()) }]);
 * console.assert((await store.take(10)).length === 0);
 * clock.advance(1000);
 * console.assert((await store.take(10))[0].messageId === "j1");
 * ```
 */
export class MemoryJobStore extends JobStoreEngine {
  /** Creates an empty store; throws an error naming a bad option. */
  constructor(options: MemoryJobStoreOptions = {}) {
    super("MemoryJobStore", MEMORY_JOURNAL, options);
  }
}
