/**
 * A conformance suite that any `JobStore` can run, beside the one for `DurableWorkQueue`
 * adapters: the backlog (idempotent enqueue, `maxBacklog`, the order of `take`, due times), tries
 * and their outcomes (results, retries with backoff, dead letters), cancel, pause, retention,
 * `counts()`, the owner's listener, and fencing (a reload, a reopen, a takeover of a lapsed
 * instance).
 *
 * The story of a run, in order:
 *
 * 1. The adapter supplies a factory that opens one flow's stores for a case: one store, or
 *    several instances sharing the flow (`open({ instances, settings })`), with a clock the
 *    suite moves where the store takes one (`job_store_cases_kit.ts` describes the fixture).
 * 2. {@linkcode runJobStoreConformance} opens one fixture to learn its capabilities, then
 *    registers every case with the runner's `test` function; a case needing an absent
 *    capability is registered as skipped, with the reason, never as passed.
 * 3. Each case opens a fresh fixture, loads every store as a job queue's controller does at
 *    start, drives the stores as the job queue's producer and controller do (take, a try started
 *    by a commit, its outcome on the confirmation, lease rounds on a shared flow), checks one
 *    rule, closes the fixture, and rejects with `Conformance rule violated: <rule>` when the
 *    store breaks it. With several instances, each step goes to another instance than the last,
 *    so the same rules check that the instances agree.
 *
 * The suite is runner-agnostic and runtime-agnostic: it imports no `Deno.*`, `Bun.*` or `node:*`
 * API, and nothing in it sleeps: time moves only when a case moves the fixture's clock.
 *
 * @module
 */

import { type ConformanceRegistration, registerConformance } from "./queue_conformance.ts";
import {
  jobStoreCapabilitiesOf,
  type JobStoreCase,
  type JobStoreFactory,
} from "./job_store_cases_kit.ts";
import { backlogCases } from "./job_store_cases_backlog.ts";
import { tryCases } from "./job_store_cases_tries.ts";
import { controlCases } from "./job_store_cases_control.ts";
import { fencingCases } from "./job_store_cases_fencing.ts";

export {
  type ConformanceClock,
  jobStoreCapabilitiesOf,
  type JobStoreCapability,
  type JobStoreCase,
  type JobStoreDifference,
  type JobStoreFactory,
  type JobStoreFixture,
  type JobStoreOpenOptions,
} from "./job_store_cases_kit.ts";

/** Options of {@linkcode jobStoreConformanceCases}. */
export interface JobStoreCasesOptions {
  /** How many instances of one flow each case opens. Default 1. */
  readonly instances?: number;
}

/**
 * Every job store conformance case for the stores that `factory` opens.
 *
 * @example Run the cases by hand
 * ```ts
 * import { jobStoreConformanceCases } from "./job_store_conformance.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 * import { SimulatedClock } from "../core/clock.ts";
 *
 * const cases = jobStoreConformanceCases({
 *   open: ({ settings }) => {
 *     const clock = new SimulatedClock();
 *     return { stores: [new MemoryJobStore({ ...settings, clock })], clock, close() {} };
 *   },
 * });
 * console.assert(cases.length > 25);
 * await cases[0].run();
 * ```
 */
export function jobStoreConformanceCases(
  factory: JobStoreFactory,
  options: JobStoreCasesOptions = {},
): JobStoreCase[] {
  const instances = options.instances ?? 1;
  if (!Number.isSafeInteger(instances) || instances < 1) {
    throw new RangeError(
      `Cannot build the job store cases: instances must be a positive integer, got ${instances}`,
    );
  }
  return [
    ...backlogCases(factory, instances),
    ...tryCases(factory, instances),
    ...controlCases(factory, instances),
    ...fencingCases(factory, instances),
  ];
}

/** A test runner's registration functions and the suite's options. */
export interface JobStoreRegistration extends ConformanceRegistration {
  /** How many instances of one flow each case opens. Default 1. */
  readonly instances?: number;
}

/**
 * Registers every job store case as a test. Opens one fixture first to learn its capabilities,
 * so that a case needing an absent one is registered as skipped (with the reason), never as
 * passed. A case named in `knownFailures` is registered as a test that passes while the case
 * still fails and fails once it passes.
 *
 * With `node:test` (Deno, Bun, Node): `await runJobStoreConformance("MyStore", factory,
 * { test, describe })` at the top level of a test module.
 *
 * @example Register the suite with any runner's test function
 * ```ts
 * import { runJobStoreConformance } from "./job_store_conformance.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 *
 * const registered: string[] = [];
 * await runJobStoreConformance("MemoryJobStore", {
 *   open: ({ settings }) => ({ stores: [new MemoryJobStore(settings)], close() {} }),
 * }, { test: (name) => registered.push(name) });
 * console.assert(registered.length > 25);
 * ```
 */
export async function runJobStoreConformance(
  name: string,
  factory: JobStoreFactory,
  registration: JobStoreRegistration,
): Promise<void> {
  const { instances = 1 } = registration;
  const cases = jobStoreConformanceCases(factory, { instances });
  const probe = await factory.open({ instances, settings: {} });
  let caps;
  try {
    caps = jobStoreCapabilitiesOf(probe);
  } finally {
    await probe.close();
  }
  registerConformance(name, cases, caps, registration);
}
