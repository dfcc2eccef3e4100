/**
 * A conformance suite that any `DurableWorkQueue` adapter can run: the cases of
 * reference-semantics §4.7 plus linearizability under `Promise.all`, defensive copies,
 * cancellation, and, for adapters with `commit`, the batch rules and `batchLimits`.
 *
 * The suite is runner-agnostic and runtime-agnostic: each case is a `{ name, requires, run }`
 * record whose `run()` opens a fresh fixture, checks one rule and rejects with an Error starting
 * `Conformance rule violated: <rule>` when the adapter breaks it. It imports no `Deno.*`, `Bun.*`
 * or `node:*` API.
 *
 * @module
 */

import {
  capabilitiesOf,
  type ConformanceCase,
  ConformanceSkipError,
  type QueueFactory,
} from "./conformance_kit.ts";
import { contractCases } from "./queue_cases_contract.ts";
import { fencingCases } from "./queue_cases_fencing.ts";
import { concurrencyCases } from "./queue_cases_concurrency.ts";
import { batchCases } from "./queue_cases_batch.ts";

export {
  capabilitiesOf,
  type ConformanceCase,
  ConformanceSkipError,
  type QueueCapability,
  type QueueFactory,
  type QueueFixture,
} from "./conformance_kit.ts";

/**
 * Every conformance case for the adapter that `factory` opens.
 *
 * @example Run the cases by hand
 * ```ts
 * import { workQueueConformanceCases } from "./queue_conformance.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const cases = workQueueConformanceCases({
 *   open: () => ({ queue: new MemoryWorkQueue(), close() {} }),
 * });
 * console.assert(cases.length > 30);
 * await cases[0].run();
 * ```
 */
export function workQueueConformanceCases(factory: QueueFactory): ConformanceCase[] {
  return [
    ...fencingCases(factory),
    ...contractCases(factory),
    ...concurrencyCases(factory),
    ...batchCases(factory),
  ];
}

/** The outcome of one case in {@linkcode runConformanceCases}. */
export interface ConformanceReport {
  /** The case's rule. */
  readonly name: string;
  /** What happened. */
  readonly status: "passed" | "failed" | "skipped";
  /** The failure or skip reason. */
  readonly error?: unknown;
}

/**
 * Runs cases one after another without a test runner and reports each outcome.
 *
 * @example Count the failures of an adapter
 * ```ts
 * import { runConformanceCases, workQueueConformanceCases } from "./queue_conformance.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const factory = { open: () => ({ queue: new MemoryWorkQueue(), close() {} }) };
 * const reports = await runConformanceCases(workQueueConformanceCases(factory).slice(0, 3));
 * console.assert(reports.every((report) => report.status === "passed"));
 * ```
 */
export async function runConformanceCases(
  cases: readonly ConformanceCase[],
): Promise<ConformanceReport[]> {
  const reports: ConformanceReport[] = [];
  for (const rule of cases) {
    try {
      await rule.run();
      reports.push({ name: rule.name, status: "passed" });
    } catch (error) {
      const status = error instanceof ConformanceSkipError ? "skipped" : "failed";
      reports.push({ name: rule.name, status, error });
    }
  }
  return reports;
}

/** A test runner's registration functions, e.g. `node:test`'s, and suite options. */
export interface ConformanceRegistration {
  /** Registers one test; `skip` carries the reason a case cannot run. */
  test(name: string, options: { skip?: string }, fn: () => Promise<void>): unknown;
  /** Groups the tests under the adapter's name when given. */
  describe?(name: string, fn: () => void): unknown;
  /**
   * Cases this adapter is known to fail, by name, with the reason. Each is registered as a test
   * that passes while the case still fails and fails once the case passes (remove it then).
   */
  readonly knownFailures?: Readonly<Record<string, string>>;
}

/**
 * Registers every case as a test. Opens one fixture first to learn its capabilities, so that a
 * case needing an absent one is registered as skipped (with the reason), never as passed.
 *
 * With `node:test` (Deno, Bun, Node): `await runWorkQueueConformance("MyQueue", factory,
 * { test, describe })` at the top level of a test module.
 *
 * @example Register the suite with any runner's test function
 * ```ts
 * import { runWorkQueueConformance } from "./queue_conformance.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const registered: string[] = [];
 * await runWorkQueueConformance("MemoryWorkQueue", {
 *   open: () => ({ queue: new MemoryWorkQueue(), close() {} }),
 * }, { test: (name) => registered.push(name) });
 * console.assert(registered.length > 30);
 * ```
 */
export async function runWorkQueueConformance(
  name: string,
  factory: QueueFactory,
  registration: ConformanceRegistration,
): Promise<void> {
  const probe = await factory.open();
  let caps;
  try {
    caps = capabilitiesOf(probe);
  } finally {
    await probe.close();
  }
  registerConformance(name, workQueueConformanceCases(factory), caps, registration);
}

/** A case as its registration sees it (a work queue's or a job store's). */
interface RegisteredCase {
  readonly name: string;
  readonly requires: readonly string[];
  run(): Promise<void>;
}

/**
 * Register `cases` as tests: a case needing a capability the fixture lacks as skipped (with the
 * reason), a known failure as a test that passes while the case fails; one naming no case is an
 * error. Both conformance suites register their cases here.
 */
export function registerConformance(
  name: string,
  cases: readonly RegisteredCase[],
  caps: ReadonlySet<string>,
  registration: ConformanceRegistration,
): void {
  const { test, describe, knownFailures = {} } = registration;
  const unknown = Object.keys(knownFailures).filter((key) => !cases.some((c) => c.name === key));
  if (unknown.length > 0) {
    throw new TypeError(
      `Cannot register the suite: knownFailures names no case: ${unknown.join("; ")}`,
    );
  }
  const prefix = describe ? "" : `${name}: `;
  const register = () => {
    for (const rule of cases) {
      const missing = rule.requires.filter((cap) => !caps.has(cap));
      const options = missing.length > 0 ? { skip: `the fixture lacks ${missing.join(", ")}` } : {};
      const known = knownFailures[rule.name];
      if (known === undefined) {
        test(`${prefix}${rule.name}`, options, () => rule.run());
      } else {
        test(`${prefix}${rule.name} (known failure: ${known})`, options, () => expectFailure(rule));
      }
    }
  };
  if (describe) describe(name, register);
  else register();
}

async function expectFailure(rule: RegisteredCase): Promise<void> {
  try {
    await rule.run();
  } catch (error) {
    if (!(error instanceof ConformanceSkipError)) return;
    throw error;
  }
  throw new Error(`The known failure "${rule.name}" now passes: remove it from knownFailures`);
}
