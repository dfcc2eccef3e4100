/**
 * Conformance cases for linearizability (reference-semantics §4.1, §4.7 case 12): calls issued
 * together with `Promise.all` must behave as if they ran one at a time in some order.
 *
 * @module
 */

import type { StoreResult } from "../queue/work_queue.ts";
import {
  casesFor,
  check,
  type ConformanceCase,
  equal,
  fresh,
  isConflict,
  isFenced,
  job,
  message,
  payloadOf,
  type QueueFactory,
  rejects,
} from "./conformance_kit.ts";

/**
 * The concurrency cases.
 *
 * @example
 * ```ts
 * import { concurrencyCases } from "./queue_cases_concurrency.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const cases = concurrencyCases({ open: () => ({ queue: new MemoryWorkQueue(), close() {} }) });
 * await cases[0].run();
 * ```
 */
export function concurrencyCases(factory: QueueFactory): ConformanceCase[] {
  const rule = casesFor(factory);
  return [
    rule(
      "concurrent stores of one MessageID make exactly one first write, seen by every caller",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        const results = await Promise.allSettled(
          range(16).map((i) => queue.store(epoch, job("x", 1, JSON.stringify(i)))),
        );
        const values = fulfilled(
          results,
          "a concurrent store of one new MessageID at currentSeq + 1",
        );
        const firsts = values.filter((result) => !result.alreadyStored);
        check(
          firsts.length === 1,
          `exactly one store must be the first write, got ${firsts.length}`,
        );
        for (const result of values) {
          equal(
            { ...result, alreadyStored: false },
            firsts[0],
            "every caller's view of the first write",
          );
        }
        equal(
          await queue.store(epoch, job("y", 2)),
          fresh(2, payloadOf("y")),
          "the next store after the race",
        );
      },
    ),

    rule(
      "concurrent stores of distinct MessageIDs get unique, contiguous sequences",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        const n = 24;
        const results = await Promise.allSettled(
          range(n).map((i) => queue.store(epoch, job(`m${i}`, i + 1))),
        );
        const won: number[] = [];
        results.forEach((result, i) => {
          if (result.status === "rejected") {
            check(
              isConflict(result.reason),
              `store of m${i} at ${i + 1} must succeed or conflict, got ${String(result.reason)}`,
            );
            return;
          }
          equal(result.value, fresh(i + 1, payloadOf(`m${i}`)), `store of m${i} at ${i + 1}`);
          won.push(i + 1);
        });
        const k = won.length;
        equal(
          won.sort((a, b) => a - b),
          range(k).map((i) => i + 1),
          "the sequences of the successful stores",
        );
        check(k >= 1, "at least one concurrent store must succeed");
        const same = await Promise.allSettled(
          range(8).map((i) => queue.store(epoch, job(`s${i}`, k + 1))),
        );
        const winners = same.filter((result) => result.status === "fulfilled");
        check(
          winners.length === 1,
          `exactly one of 8 stores proposing ${k + 1} must succeed, got ${winners.length}`,
        );
        for (const result of same) {
          if (result.status === "rejected") {
            check(
              isConflict(result.reason),
              `a losing store must conflict, got ${String(result.reason)}`,
            );
          }
        }
        equal((await queue.load()).state.currentSeq, k + 1, "currentSeq after the races");
      },
    ),

    rule("concurrent accepts and confirms lose no update", [], async ({ queue }) => {
      const { epoch } = await queue.load();
      const ids = range(30).map((i) => `j${i}`);
      for (const [i, id] of ids.entries()) await queue.store(epoch, job(id, i + 1));
      // Pairs (even, odd): the even job is accepted twice; the odd one confirmed and accepted once
      // each, so whichever order they run in, no call meets a compacted job.
      const calls = ids.flatMap((id, i) =>
        i % 2 === 1 ? [] : [
          queue.accept(epoch, id),
          queue.confirmMessage(epoch, ids[i + 1]),
          queue.accept(epoch, id),
          queue.accept(epoch, ids[i + 1]),
        ]
      );
      const results = await Promise.allSettled(calls);
      for (const result of results) {
        check(
          result.status === "fulfilled",
          `a concurrent accept or confirm failed: ${
            String((result as PromiseRejectedResult).reason)
          }`,
        );
      }
      const even = ids.flatMap((id, i) => (i % 2 === 0 ? [message(id, i + 1)] : []));
      equal((await queue.load()).state.unconfirmed, even, "the jobs left accepted and unconfirmed");
    }),

    rule(
      "concurrent loads issue distinct epochs and only the newest one writes",
      [],
      async ({ queue }) => {
        const results = await Promise.allSettled(range(5).map(() => queue.load()));
        const epochs = fulfilled(results, "a concurrent load").map((result) => result.epoch);
        check(
          new Set(epochs).size === epochs.length,
          `concurrent loads returned epochs ${epochs.join(", ")}`,
        );
        const newest = Math.max(...epochs);
        for (const epoch of epochs.filter((epoch) => epoch !== newest)) {
          await rejects(
            queue.store(epoch, job("a", 1)),
            "fenced",
            `store under the older epoch ${epoch}`,
          );
        }
        equal(
          await queue.store(newest, job("a", 1)),
          fresh(1, payloadOf("a")),
          "store under the newest epoch",
        );
      },
    ),

    rule(
      "writes racing a load either land before it (and are loaded) or are fenced",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        const ids = range(20).map((i) => `r${i}`);
        for (const [i, id] of ids.entries()) await queue.store(epoch, job(id, i + 1));
        const accepts = ids.map((id) => queue.accept(epoch, id));
        const load = queue.load();
        const settled = await Promise.allSettled(accepts);
        const { state } = await load;
        const landed = ids.filter((_, i) => settled[i].status === "fulfilled");
        settled.forEach((result, i) => {
          if (result.status === "rejected") {
            check(
              isFenced(result.reason),
              `accept of ${ids[i]} must succeed or be fenced, got ${String(result.reason)}`,
            );
          }
        });
        equal(
          state.unconfirmed.map((m) => m.messageId),
          landed,
          "the jobs the racing load returned",
        );
      },
    ),

    rule("concurrent batches apply one at a time", ["commit"], async (ctx) => {
      const { epoch } = await ctx.queue.load();
      const size = 5;
      const results = await Promise.allSettled(
        range(10).map((b) =>
          ctx.commit(epoch, {
            store: {
              firstSeq: 1 + b * size,
              jobs: range(size).map((i) => ({
                messageId: `b${b}-${i}`,
                payload: payloadOf(`b${b}-${i}`),
              })),
            },
          })
        ),
      );
      const applied: number[] = [];
      results.forEach((result, b) => {
        if (result.status === "rejected") {
          check(
            isConflict(result.reason),
            `batch ${b} must succeed or conflict, got ${String(result.reason)}`,
          );
          return;
        }
        const expected = range(size).map((i) => fresh(1 + b * size + i, payloadOf(`b${b}-${i}`)));
        equal(result.value.stored, expected, `the results of batch ${b}`);
        applied.push(b);
      });
      equal(applied, range(applied.length), "the batches that applied");
      equal(
        (await ctx.queue.load()).state.currentSeq,
        applied.length * size,
        "currentSeq after the batches",
      );
    }),
  ];
}

function range(n: number): number[] {
  return Array.from({ length: n }, (_, i) => i);
}

function fulfilled<T extends StoreResult | { epoch: number }>(
  results: PromiseSettledResult<T>[],
  what: string,
): T[] {
  return results.map((result) => {
    check(
      result.status === "fulfilled",
      `${what} failed: ${String((result as PromiseRejectedResult).reason)}`,
    );
    return result.value;
  });
}
