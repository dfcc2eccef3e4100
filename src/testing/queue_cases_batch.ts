/**
 * Conformance cases for the optional group commit, `DurableWorkQueue.commit`: stores, then
 * accepts, then confirms in one all-or-nothing transaction, within the adapter's `batchLimits`.
 *
 * @module
 */

import type {
  BatchStoreJob,
  DurableWorkQueue,
  QueueBatchLimits,
  QueueEpoch,
} from "../queue/work_queue.ts";
import {
  type CaseContext,
  check,
  type ConformanceCase,
  defineCase,
  equal,
  fresh,
  message,
  payloadOf,
  payloadOfBytes,
  type QueueFactory,
  rejects,
  repeat,
  resolves,
  utf8Length,
} from "./conformance_kit.ts";

/**
 * The batch cases; each needs the `commit` capability.
 *
 * @example
 * ```ts
 * import { batchCases } from "./queue_cases_batch.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const cases = batchCases({ open: () => ({ queue: new MemoryWorkQueue(), close() {} }) });
 * await cases[0].run();
 * ```
 */
export function batchCases(factory: QueueFactory): ConformanceCase[] {
  const rule = (name: string, body: Parameters<typeof defineCase>[3]) =>
    defineCase(factory, name, ["commit"], body);
  return [
    rule("a batch applies its stores, then its accepts, then its confirms", async (ctx) => {
      const { epoch } = await ctx.queue.load();
      const result = await ctx.commit(epoch, {
        store: { firstSeq: 1, jobs: jobs("a", "b", "c") },
        accept: ["a", "b", "c"],
        confirm: ["b"],
      });
      equal(result.stored, [
        fresh(1, payloadOf("a")),
        fresh(2, payloadOf("b")),
        fresh(3, payloadOf("c")),
      ], "the stored results");
      const { state } = await ctx.queue.load();
      equal(
        state,
        { currentSeq: 3, unconfirmed: [message("a", 1), message("c", 3)] },
        "the state after the batch",
      );
    }),

    rule(
      "a batch storing a new job at a wrong firstSeq is a conflict and applies nothing",
      async (ctx) => {
        const { queue } = ctx;
        const { epoch } = await queue.load();
        await ctx.commit(epoch, { store: { firstSeq: 1, jobs: jobs("x") } });
        for (const firstSeq of [1, 3]) {
          const batch = { store: { firstSeq, jobs: jobs("y") }, accept: ["x"] };
          await rejects(
            ctx.commit(epoch, batch),
            "conflict",
            `a batch storing y at ${firstSeq} when the next is 2`,
          );
        }
        equal(
          (await queue.load()).state.unconfirmed,
          [],
          "unconfirmed: the accept in the failed batch must not apply",
        );
        const { epoch: next } = await queue.load();
        equal(
          await queue.store(next, { messageId: "y", proposedSeq: 2, payload: payloadOf("y") }),
          fresh(2, payloadOf("y")),
          "store of y afterwards",
        );
      },
    ),

    rule("a batch of already-stored jobs ignores firstSeq", async (ctx) => {
      const { epoch } = await ctx.queue.load();
      await ctx.commit(epoch, { store: { firstSeq: 1, jobs: jobs("a", "b") } });
      const again = await ctx.commit(epoch, {
        store: {
          firstSeq: 99,
          jobs: [{ messageId: "b", payload: "0" }, { messageId: "a", payload: "0" }],
        },
      });
      equal(
        again.stored,
        [repeat(2, payloadOf("b")), repeat(1, payloadOf("a"))],
        "the results of a batch of repeats",
      );
      equal((await ctx.queue.load()).state.currentSeq, 2, "currentSeq after the repeats");
    }),

    rule("already-stored jobs take no sequence in a batch", async (ctx) => {
      const { epoch } = await ctx.queue.load();
      await ctx.commit(epoch, { store: { firstSeq: 1, jobs: jobs("a") } });
      const result = await ctx.commit(epoch, { store: { firstSeq: 2, jobs: jobs("x", "a", "y") } });
      equal(result.stored, [
        fresh(2, payloadOf("x")),
        repeat(1, payloadOf("a")),
        fresh(3, payloadOf("y")),
      ], "the results of a mixed batch");
      equal((await ctx.queue.load()).state.currentSeq, 3, "currentSeq after the mixed batch");
    }),

    rule("a MessageID repeated inside one batch is stored once, first write wins", async (ctx) => {
      const { epoch } = await ctx.queue.load();
      const result = await ctx.commit(epoch, {
        store: {
          firstSeq: 1,
          jobs: [{ messageId: "m", payload: '"first"' }, { messageId: "m", payload: '"second"' }],
        },
      });
      equal(
        result.stored,
        [fresh(1, '"first"'), repeat(1, '"first"')],
        "the results of a batch storing m twice",
      );
      equal((await ctx.queue.load()).state.currentSeq, 1, "currentSeq after storing m twice");
    }),

    rule(
      "a batch accepting an unknown MessageID is a conflict and applies nothing",
      async (ctx) => {
        const { queue } = ctx;
        const { epoch } = await queue.load();
        const base = { store: { firstSeq: 1, jobs: jobs("a") }, accept: ["a"] };
        await rejects(
          ctx.commit(epoch, { ...base, accept: ["a", "ghost"] }),
          "conflict",
          "a batch accepting an unknown MessageID",
        );
        equal(
          await queue.store(epoch, { messageId: "a", proposedSeq: 1, payload: '"later"' }),
          fresh(1, '"later"'),
          "store of a afterwards: nothing applied",
        );
      },
    ),

    rule("a batch under a fenced epoch is rejected and applies nothing", async (ctx) => {
      const { queue } = ctx;
      const { epoch: old } = await queue.load();
      const { epoch } = await queue.load();
      await rejects(
        ctx.commit(old, { store: { firstSeq: 1, jobs: jobs("a") }, accept: ["a"] }),
        "fenced",
        "a batch under the earlier epoch",
      );
      equal(
        await queue.store(epoch, { messageId: "a", proposedSeq: 1, payload: '"later"' }),
        fresh(1, '"later"'),
        "store of a afterwards: nothing applied",
      );
    }),

    rule(
      "a batch repeating a MessageID in its accepts or confirms applies all or nothing",
      async (ctx) => {
        const { queue } = ctx;
        const { epoch } = await queue.load();
        await ctx.commit(epoch, {
          store: { firstSeq: 1, jobs: jobs("x", "y") },
          accept: ["x"],
          confirm: ["y"],
        });
        let applied = await settles(ctx.commit(epoch, { confirm: ["x", "x"] }));
        const loaded = (await queue.load()).state.unconfirmed.map((m) => m.messageId);
        equal(
          loaded,
          applied ? [] : ["x"],
          `unconfirmed after a batch confirming x twice ${applied ? "succeeded" : "failed"}`,
        );
        const { epoch: next } = await queue.load();
        applied = await settles(ctx.commit(next, { accept: ["y", "y"] }));
        if (!applied) {
          const again = await queue.store(next, { messageId: "y", proposedSeq: 3, payload: "0" });
          equal(
            again,
            repeat(2, payloadOf("y")),
            "re-store of y after a failed batch accepting y twice: y must be retained",
          );
        }
      },
    ),

    rule("batches at batchLimits are accepted", async (ctx) => {
      const limits = ctx.queue.batchLimits;
      check(limits !== undefined, "an adapter with commit must declare batchLimits");
      const { maxOperations, maxBytes } = limits;
      check(
        Number.isSafeInteger(maxOperations) && maxOperations >= 1,
        `batchLimits.maxOperations must be a positive integer, got ${maxOperations}`,
      );
      check(
        Number.isSafeInteger(maxBytes) && maxBytes >= 2 * maxOperations,
        `batchLimits.maxBytes ${maxBytes} is too small`,
      );
      await fullBatches(ctx, limits);
    }),
  ];
}

/** Four batches that each use the whole operation and byte budget in a different shape. */
async function fullBatches(ctx: CaseContext, limits: QueueBatchLimits): Promise<void> {
  const { queue } = ctx;
  const { maxOperations: ops, maxBytes } = limits;
  const maxPayload = Math.min(queue.maxPayloadBytes ?? maxBytes, maxBytes);
  let { epoch } = await queue.load();
  const counter = { next: 1 };

  // 1. Confirm (and so compact) accepted jobs, and fill the bytes with the fewest stores.
  const stores1 = Math.min(ops, Math.max(1, Math.ceil(maxBytes / maxPayload)));
  const confirms = await prepare(ctx, epoch, limits, ops - stores1, "accept", counter);
  const big = fill(maxBytes - sumBytes(confirms), stores1, maxPayload, "big", counter.next);
  let result = await resolves(
    ctx.commit(epoch, { store: { firstSeq: counter.next, jobs: big }, confirm: confirms }),
    `a batch of ${confirms.length} confirms and ${big.length} stores`,
  );
  checkFresh(result.stored, big, counter);
  equal(
    (await queue.load()).state.unconfirmed,
    [],
    "unconfirmed after confirming every accepted job",
  );
  ({ epoch } = await queue.load());
  await checkRetained(queue, epoch, big.slice(0, 1));

  // 2. Only stores, the bytes spread evenly.
  const many = fill(maxBytes, ops, maxPayload, "s", counter.next);
  result = await resolves(
    ctx.commit(epoch, { store: { firstSeq: counter.next, jobs: many } }),
    `a batch of ${many.length} stores`,
  );
  checkFresh(result.stored, many, counter);

  // 3. Store and confirm the same jobs in one batch.
  const half = Math.max(1, Math.floor(ops / 2));
  const pairs = fill(maxBytes - half * 12, half, maxPayload, "p", counter.next);
  result = await resolves(
    ctx.commit(epoch, {
      store: { firstSeq: counter.next, jobs: pairs },
      confirm: pairs.map((j) => j.messageId).slice(0, ops - pairs.length),
    }),
    `a batch storing and confirming ${pairs.length} jobs`,
  );
  checkFresh(result.stored, pairs, counter);

  // 4. Accept (and so compact) confirmed jobs.
  const confirmed = await prepare(ctx, epoch, limits, ops, "confirm", counter);
  await resolves(
    ctx.commit(epoch, { accept: confirmed }),
    `a batch of ${confirmed.length} accepts`,
  );
  equal(
    (await queue.load()).state,
    { currentSeq: counter.next - 1, unconfirmed: [] },
    "the state after the full batches",
  );
}

/** Stores `count` small jobs and accepts or confirms them, in batches within the limits. */
async function prepare(
  ctx: CaseContext,
  epoch: QueueEpoch,
  limits: QueueBatchLimits,
  count: number,
  mark: "accept" | "confirm",
  counter: { next: number },
): Promise<string[]> {
  const ids: string[] = [];
  const perBatch = Math.max(
    1,
    Math.floor(Math.min(limits.maxOperations / 2, limits.maxBytes / 40)),
  );
  for (let done = 0; done < count; done += perBatch) {
    const batch = Array.from({ length: Math.min(perBatch, count - done) }, (_, i) => ({
      messageId: `${mark[0]}${counter.next + i}`,
      payload: "0",
    }));
    const marks = batch.map((j) => j.messageId);
    const marking = mark === "accept" ? { accept: marks } : { confirm: marks };
    await ctx.commit(epoch, { store: { firstSeq: counter.next, jobs: batch }, ...marking });
    counter.next += batch.length;
    ids.push(...marks);
  }
  return ids;
}

/** `count` jobs whose MessageIDs and payloads add up to at most `bytes`, each payload ≤ `max`. */
function fill(
  bytes: number,
  count: number,
  max: number,
  tag: string,
  firstSeq: number,
): BatchStoreJob[] {
  const ids = Array.from({ length: count }, (_, i) => `${tag}${firstSeq + i}`);
  let left = bytes - sumBytes(ids);
  return ids.map((messageId, i) => {
    const size = Math.max(2, Math.min(max, Math.floor(left / (count - i))));
    left -= size;
    return { messageId, payload: payloadOfBytes(size) };
  });
}

function checkFresh(
  stored: readonly { seq: number; alreadyStored: boolean; payload: string }[],
  expected: readonly BatchStoreJob[],
  counter: { next: number },
): void {
  equal(
    stored,
    expected.map((j, i) => fresh(counter.next + i, j.payload)),
    "the stored results of a full batch",
  );
  counter.next += expected.length;
}

async function checkRetained(
  queue: DurableWorkQueue,
  epoch: QueueEpoch,
  retained: readonly BatchStoreJob[],
) {
  for (const j of retained) {
    const result = await queue.store(epoch, {
      messageId: j.messageId,
      proposedSeq: 1,
      payload: "0",
    });
    check(
      result.alreadyStored && result.payload === j.payload,
      `re-store of ${j.messageId} must return its first write`,
    );
  }
}

function sumBytes(ids: readonly string[]): number {
  return ids.reduce((sum, id) => sum + utf8Length(id), 0);
}

function jobs(...ids: string[]): BatchStoreJob[] {
  return ids.map((messageId) => ({ messageId, payload: payloadOf(messageId) }));
}

/** True if the promise resolved, false if it rejected with a conflict. */
async function settles(promise: Promise<unknown>): Promise<boolean> {
  try {
    await promise;
    return true;
  } catch (error) {
    check(
      (error as Error)?.name === "QueueConflictError",
      `expected success or QueueConflictError, got ${String(error)}`,
    );
    return false;
  }
}
