/**
 * Test utilities: a simulated clock for deterministic tests of code built on workpull, the
 * conformance suite that any {@linkcode DurableWorkQueue} adapter can run, and `RemoteKv`, a Deno
 * KV handle behind the round trips and faults of a hosted KV (for benchmarks and fault tests).
 *
 * @example Drive time by hand
 * ```ts
 * import { SimulatedClock } from "./testing.ts";
 * const clock = new SimulatedClock();
 * clock.advance(2000);
 * console.assert(clock.now() === 2000);
 * ```
 *
 * @example Check an adapter against the queue contract with node:test
 * ```ts ignore
 * import { describe, test } from "node:test";
 * import { runWorkQueueConformance } from "./testing.ts";
 * import { MemoryWorkQueue } from "./mod.ts";
 *
 * await runWorkQueueConformance("my queue", {
 *   open: () => ({ queue: new MemoryWorkQueue(), close() {} }),
 * }, { test, describe });
 * ```
 *
 * @module
 */

export { settle, SimulatedClock } from "./src/core/clock.ts";
export {
  capabilitiesOf,
  type ConformanceCase,
  type ConformanceRegistration,
  type ConformanceReport,
  ConformanceSkipError,
  type QueueCapability,
  type QueueFactory,
  type QueueFixture,
  runConformanceCases,
  runWorkQueueConformance,
  workQueueConformanceCases,
} from "./src/testing/queue_conformance.ts";
export * from "./src/queue/work_queue.ts";
export {
  type ConformanceClock,
  jobStoreCapabilitiesOf,
  type JobStoreCapability,
  type JobStoreCase,
  type JobStoreCasesOptions,
  jobStoreConformanceCases,
  type JobStoreDifference,
  type JobStoreFactory,
  type JobStoreFixture,
  type JobStoreOpenOptions,
  type JobStoreRegistration,
  runJobStoreConformance,
} from "./src/testing/job_store_conformance.ts";
export * from "./src/testing/remote_kv.ts";
