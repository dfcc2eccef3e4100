import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { MemoryWorkQueue } from "../src/queue/memory_queue.ts";
import {
  type ConformanceCase,
  ConformanceSkipError,
  type QueueFactory,
  runConformanceCases,
  runWorkQueueConformance,
  workQueueConformanceCases,
} from "../src/testing/queue_conformance.ts";
import { BrokenWorkQueue, QUEUE_FAULTS, type QueueFault } from "../src/testing/broken_queues.ts";

const memory: QueueFactory = { open: () => ({ queue: new MemoryWorkQueue(), close() {} }) };

await runWorkQueueConformance("MemoryWorkQueue conformance", memory, { test, describe });

/** The rules each broken queue must be caught breaking; it must pass every other case. */
const caught: Record<QueueFault, string[]> = {
  "unfenced": [
    "writes under an earlier epoch or under epoch 0 are fenced and change nothing",
    "an epoch that was never issued is fenced",
    "concurrent loads issue distinct epochs and only the newest one writes",
    "a batch under a fenced epoch is rejected and applies nothing",
  ],
  "last-write-wins": [
    "storing a retained MessageID again returns the first write and appends nothing",
    "compaction keeps first-write-wins for retained jobs; a compacted MessageID counts as new",
    "concurrent stores of one MessageID make exactly one first write, seen by every caller",
    "a batch of already-stored jobs ignores firstSeq",
    "a MessageID repeated inside one batch is stored once, first write wins",
    "batches at batchLimits are accepted",
  ],
  "racy": [
    "concurrent stores of one MessageID make exactly one first write, seen by every caller",
    "concurrent stores of distinct MessageIDs get unique, contiguous sequences",
    "concurrent accepts and confirms lose no update",
    "writes racing a load either land before it (and are loaded) or are fenced",
  ],
  "leaky-state": ["returned states and results are copies the caller may change"],
  "partial-batch": ["a batch accepting an unknown MessageID is a conflict and applies nothing"],
};

describe("the conformance suite can fail", () => {
  for (const fault of QUEUE_FAULTS) {
    test(`it catches exactly the rules a "${fault}" queue breaks`, async () => {
      const factory: QueueFactory = {
        open: () => ({ queue: new BrokenWorkQueue(fault), close() {} }),
      };
      const reports = await runConformanceCases(workQueueConformanceCases(factory));
      const failed = reports.filter((report) => report.status === "failed");
      assert.deepEqual(failed.map((report) => report.name).sort(), [...caught[fault]].sort());
      for (const report of failed) {
        const text = String((report.error as Error).message);
        assert.ok(text.startsWith(`Conformance rule violated: ${report.name}\n`), text);
      }
    });
  }

  test("a case reports an unexpected error from the adapter as a violation of its rule", async () => {
    const queue = new MemoryWorkQueue();
    queue.load = () => Promise.reject(new TypeError("backend exploded"));
    const [first] = workQueueConformanceCases({ open: () => ({ queue, close() {} }) });
    await assert.rejects(
      first.run(),
      /Conformance rule violated: .*\n {2}unexpected TypeError: backend exploded/,
    );
  });

  test("every case closes its fixture, also when it fails", async () => {
    let opened = 0;
    let closed = 0;
    const factory: QueueFactory = {
      open: () => {
        opened += 1;
        return { queue: new BrokenWorkQueue("unfenced"), close: () => void (closed += 1) };
      },
    };
    await runConformanceCases(workQueueConformanceCases(factory));
    assert.ok(opened > 30);
    assert.equal(closed, opened);
  });
});

describe("registering the suite with a test runner", () => {
  test("cases needing an absent capability are registered as skipped, with the reason", async () => {
    const registered: { name: string; skip?: string }[] = [];
    await runWorkQueueConformance("memory", memory, {
      test: (name, options) => registered.push({ name, skip: options.skip }),
    });
    const skipped = registered.filter((entry) => entry.skip !== undefined);
    assert.deepEqual(skipped.map((entry) => entry.skip).sort(), [
      "the fixture lacks corrupt",
      "the fixture lacks failNextLoad",
      "the fixture lacks maxPayloadBytes",
      "the fixture lacks reopen",
    ]);
    assert.ok(registered.every((entry) => entry.name.startsWith("memory: ")));
  });

  test("a case run without its capability rejects with ConformanceSkipError", async () => {
    const cases = workQueueConformanceCases(memory);
    const needsReopen = cases.find((rule: ConformanceCase) => rule.requires.includes("reopen"))!;
    await assert.rejects(needsReopen.run(), ConformanceSkipError);
  });

  test("a known failure that starts passing fails its test", async () => {
    const tests: (() => Promise<void>)[] = [];
    await runWorkQueueConformance("memory", memory, {
      test: (_name, _options, fn) => tests.push(fn),
      knownFailures: { "every load returns a strictly greater epoch": "pretend" },
    });
    const outcomes = await Promise.allSettled(tests.map((fn) => fn()));
    const reasons = outcomes.flatMap((outcome) =>
      outcome.status === "rejected" ? [String(outcome.reason)] : []
    );
    assert.equal(reasons.filter((reason) => /now passes: remove it/.test(reason)).length, 1);
  });

  test("a known failure naming no case is refused", async () => {
    await assert.rejects(
      runWorkQueueConformance("memory", memory, {
        test: () => {},
        knownFailures: { "no such rule": "x" },
      }),
      TypeError,
    );
  });
});
