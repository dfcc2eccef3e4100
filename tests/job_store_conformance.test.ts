/**
 * The job store conformance suite (`src/testing/job_store_conformance.ts`) on every job store:
 * `MemoryJobStore`; `DenoKvJobStore` on a KV file; `DenoKvClusterStore` as one instance and as
 * three instances of one flow, each its own store object with its own instance id and its own KV
 * handle on one file (as three processes would be). Time is a `SimulatedClock` the suite moves;
 * the shared flow's instances read it through a clock that sets no timers, so their lease rounds
 * run when the suite says (`renew()`), as in `cluster_store.test.ts`. Then checks that the suite
 * itself can fail: broken stores are caught, every fixture is closed, skips name their reason.
 * Runs on Deno's KV and, under Bun and Node, on npm `@deno/kv`.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryJobStore } from "../src/backlog/memory_job_store.ts";
import type { JobStore } from "../src/backlog/job_store.ts";
import { DenoKvJobStore } from "../src/backlog/deno_kv/job_store.ts";
import { type ClusterKvLike, DenoKvClusterStore } from "../src/cluster/cluster_store.ts";
import { type Clock, SimulatedClock } from "../src/core/clock.ts";
import {
  jobStoreConformanceCases,
  type JobStoreFactory,
  runJobStoreConformance,
} from "../src/testing/job_store_conformance.ts";
import { ConformanceSkipError } from "../src/testing/conformance_kit.ts";
import { kvClient, openKv } from "./fixtures/open_kv.ts";

const CLIENT = kvClient === "deno" ? "Deno.openKv" : "npm @deno/kv";

/** A simulated wall clock at a plausible epoch time (stores persist epoch ms). */
function wallTime(): SimulatedClock {
  const clock = new SimulatedClock();
  clock.advance(1_700_000_000_000);
  return clock;
}

/** A temporary directory for one fixture's KV file, and its removal. */
function tempDir(): { path: string; remove(): void } {
  const dir = mkdtempSync(join(tmpdir(), "workpull-store-conformance-"));
  return {
    path: join(dir, "flow.kv"),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

const memory: JobStoreFactory = {
  open({ instances, settings }) {
    if (instances !== 1) throw new RangeError("a MemoryJobStore is a flow of its own");
    const clock = wallTime();
    const store = new MemoryJobStore({ ...settings, clock });
    return { stores: [store], clock, close: () => store.close() };
  },
};

const denoKv: JobStoreFactory = {
  async open({ instances, settings }) {
    if (instances !== 1) throw new RangeError("a DenoKvJobStore owns its prefix alone");
    const dir = tempDir();
    const clock = wallTime();
    const handles: { close(): void }[] = [];
    const opened: JobStore[] = [];
    /** A store on a handle of its own on the file, as a process would open it. */
    const open = async () => {
      const kv = await openKv(dir.path);
      handles.push(kv);
      const store = new DenoKvJobStore(kv, { ...settings, clock, prefix: ["flow"] });
      opened.push(store);
      return store;
    };
    return {
      stores: [await open()],
      clock,
      reopen: open,
      close() {
        for (const store of opened) store.close();
        for (const kv of handles) kv.close();
        dir.remove();
      },
    };
  },
};

/** The shared flow's lease TTL: far above the backoffs and delays the cases wait out. */
const LEASE_TTL = 10_000;

const cluster: JobStoreFactory = {
  async open({ instances, settings }) {
    const dir = tempDir();
    const clock = wallTime();
    // The simulated time without timers: the suite runs each instance's lease rounds itself.
    const leaseClock: Clock = { now: () => clock.now(), setTimeout: () => ({ cancel() {} }) };
    const handles: { close(): void }[] = [];
    const opened: JobStore[] = [];
    /** Instance `k` of the flow, on a KV handle of its own (a process of its own). */
    const open = async (k: number) => {
      const kv = await openKv(dir.path);
      handles.push(kv);
      const store = new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
        ...settings,
        prefix: ["flow"],
        clock: leaseClock,
        instance: { id: `instance-${k}`, leaseTtl: LEASE_TTL },
      });
      opened.push(store);
      return store;
    };
    const stores: JobStore[] = [];
    for (let k = 0; k < instances; k++) stores.push(await open(k));
    return {
      stores,
      clock,
      leaseTtl: LEASE_TTL,
      // Documented in docs/ARCHITECTURE.md (shared mode): "`retainedJobs` is not applied (it
      // counts per process)"; "FIFO within a priority is therefore approximate across
      // instances" (claims spread by a hash of the MessageID).
      differences: instances > 1 ? ["no-retained-jobs", "approximate-fifo"] : ["no-retained-jobs"],
      reopen: () => open(0),
      close() {
        for (const store of opened) store.close();
        for (const kv of handles) kv.close();
        dir.remove();
      },
    };
  },
};

// Known failures: real store bugs the suite found (not fixed here; see each reason).

await runJobStoreConformance("MemoryJobStore conformance (job store)", memory, {
  test,
  describe,
});

await runJobStoreConformance(`DenoKvJobStore conformance (${CLIENT}, job store)`, denoKv, {
  test,
  describe,
});

await runJobStoreConformance(
  `DenoKvClusterStore conformance (${CLIENT}, one instance, job store)`,
  cluster,
  {
    test,
    describe,
    instances: 1,
  },
);

await runJobStoreConformance(
  `DenoKvClusterStore conformance (${CLIENT}, three instances of one flow, job store)`,
  cluster,
  {
    test,
    describe,
    instances: 3,
  },
);

// ---------------------------------------------------------------------------------------------
// The suite itself

/** A store that delegates to a MemoryJobStore, with some calls replaced: a broken store. */
function broken(overrides: (inner: MemoryJobStore) => Partial<JobStore>): JobStoreFactory {
  return {
    open({ settings }) {
      const clock = wallTime();
      const inner = new MemoryJobStore({ ...settings, clock });
      const bound: Record<string, unknown> = {
        settings: inner.settings,
        clock: inner.clock,
        batchLimits: inner.batchLimits,
      };
      const methods = [
        "listen",
        "enqueue",
        "take",
        "takeNow",
        "get",
        "cancel",
        "deadLetters",
        "retryDead",
        "retryAllDead",
        "deleteDead",
        "counts",
        "load",
        "store",
        "accept",
        "confirmMessage",
        "commit",
        "close",
      ] as const;
      for (const name of methods) {
        bound[name] = (inner[name] as (...args: unknown[]) => unknown).bind(inner);
      }
      const store = Object.assign(bound, overrides(inner)) as unknown as JobStore;
      return { stores: [store], clock, close: () => inner.close() };
    },
  };
}

/** The names of the cases `factory` fails, each checked to name its rule first. */
async function failures(factory: JobStoreFactory): Promise<string[]> {
  const failed: string[] = [];
  for (const rule of jobStoreConformanceCases(factory)) {
    try {
      await rule.run();
    } catch (error) {
      if (error instanceof ConformanceSkipError) continue;
      const text = String((error as Error).message);
      assert.ok(text.startsWith(`Conformance rule violated: ${rule.name}\n`), text);
      failed.push(rule.name);
    }
  }
  return failed;
}

describe("the job store conformance suite can fail", () => {
  test("it catches a store that writes under any epoch", async () => {
    const failed = await failures(broken((inner) => {
      let latest = 0;
      return {
        load: async (options) => {
          const result = await inner.load(options);
          latest = result.epoch;
          return result;
        },
        store: (_epoch, request, options) => inner.store(latest, request, options),
        accept: (_epoch, id, options) => inner.accept(latest, id, options),
        confirmMessage: (_epoch, id, options) => inner.confirmMessage(latest, id, options),
        commit: (_epoch, batch, options) => inner.commit(latest, batch, options),
      };
    }));
    assert.deepEqual(failed, [
      "a second load issues a greater epoch, returns the tries in progress, and fences every write under the old epoch",
    ]);
  });

  test("it catches a store that hands out the last submitted job first", async () => {
    const failed = await failures(broken((inner) => ({
      take: async (max) => (await inner.take(max)).toReversed(),
      takeNow: () => undefined,
    })));
    assert.ok(
      failed.includes(
        "take hands out higher priorities first and, within a priority, the earliest due first",
      ),
      failed.join("\n"),
    );
    assert.ok(
      failed.includes(
        "jobs due at the same time within a priority are handed out in submission order",
      ),
      failed.join("\n"),
    );
  });

  test("it catches a store whose counts are stale and whose enqueue creates duplicates", async () => {
    const failed = await failures(broken((inner) => ({
      counts: () => ({ waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 }),
      enqueue: async (jobs) =>
        (await inner.enqueue(jobs)).map((result) => ({ ...result, created: true })),
    })));
    for (
      const name of [
        "counts() agree with the jobs in each state",
        "a MessageID repeated inside one batch is created once, and its first payload wins",
        "concurrent enqueues of one MessageID on every instance create it exactly once",
      ]
    ) {
      assert.ok(failed.includes(name), `${name} not caught: ${failed.join("\n")}`);
    }
  });

  test("every case closes its fixture, also when it fails", async () => {
    let opened = 0;
    let closed = 0;
    const factory: JobStoreFactory = {
      open(options) {
        opened += 1;
        const fixture = memory.open(options) as Awaited<ReturnType<JobStoreFactory["open"]>>;
        return { ...fixture, close: () => void (closed += 1, fixture.close()) };
      },
    };
    await failures(factory);
    assert.ok(opened > 25, `${opened} fixtures opened`);
    assert.equal(closed, opened);
  });
});

describe("registering the job store suite with a test runner", () => {
  test("cases needing an absent capability are registered as skipped, with the reason", async () => {
    const registered: { name: string; skip?: string }[] = [];
    await runJobStoreConformance("memory", memory, {
      test: (name, options) => registered.push({ name, skip: options.skip }),
    });
    const skips = [...new Set(registered.flatMap((entry) => entry.skip ? [entry.skip] : []))];
    assert.deepEqual(skips.sort(), [
      "the fixture lacks pause",
      "the fixture lacks pause, reopen",
      "the fixture lacks reopen",
      "the fixture lacks shared, leases",
    ]);
    assert.ok(registered.every((entry) => entry.name.startsWith("memory: ")));
  });

  test("a known failure that starts passing fails its test", async () => {
    const tests: (() => Promise<void>)[] = [];
    await runJobStoreConformance("memory", memory, {
      test: (_name, _options, fn) => tests.push(fn),
      knownFailures: { "counts() agree with the jobs in each state": "pretend" },
    });
    const outcomes = await Promise.allSettled(tests.map((fn) => fn()));
    const reasons = outcomes.flatMap((outcome) =>
      outcome.status === "rejected" ? [String(outcome.reason)] : []
    );
    assert.equal(reasons.filter((reason) => /now passes: remove it/.test(reason)).length, 1);
  });

  test("a known failure naming no case is refused", async () => {
    await assert.rejects(
      runJobStoreConformance("memory", memory, {
        test: () => {},
        knownFailures: { "no such rule": "x" },
      }),
      TypeError,
    );
  });
});
