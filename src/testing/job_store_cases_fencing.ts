/**
 * Conformance cases for ownership, in the order a takeover happens: a second `load()` (the
 * controller restarting) issues a greater epoch, gets back the tries in progress and fences every
 * write under the old epoch; a store reopened on the same storage (a restarted process) finds
 * every job as it was and fences the first one; and on a shared flow an instance whose lease
 * lapsed is taken over on a survivor's lease round: its writes fail with `QueueFencedError`, it
 * hands out nothing more, and the jobs it held reach the survivors through `take`.
 *
 * @module
 */

import type { JobStore } from "../backlog/job_store.ts";
import type { QueueEpoch } from "../queue/work_queue.ts";
import {
  check,
  completed,
  equal,
  failed,
  idsOf,
  type JobStoreCase,
  jobStoreCasesFor,
  type JobStoreFactory,
  rejects,
} from "./job_store_cases_kit.ts";

/** Where a fenced write is aimed. */
interface FencedWrites {
  /** The try in progress the writes confirm. */
  readonly tried: string;
  /** The next store sequence, as the writer knows it. */
  readonly nextSeq: number;
  /**
   * Also writes that would change nothing (a repeated accept, an empty commit): a store knows
   * that its own epoch is stale, while one fenced by another process need not notice a write it
   * does not make.
   */
  readonly unchanging: boolean;
}

/** Every kind of write under `epoch` on `store` must be fenced; `what` names the epoch. */
async function allFenced(
  store: JobStore,
  epoch: QueueEpoch,
  { tried, nextSeq, unchanging }: FencedWrites,
  what: string,
): Promise<void> {
  const late = { messageId: "late", payload: '"late"' };
  const outcome = completed("late");
  await rejects(
    store.confirmMessage(epoch, tried, { outcome }),
    "fenced",
    `confirmMessage ${what}`,
  );
  await rejects(store.store(epoch, { ...late, proposedSeq: nextSeq }), "fenced", `store ${what}`);
  if (store.commit) {
    await rejects(
      store.commit(epoch, { confirm: [tried], outcomes: new Map([[tried, outcome]]) }),
      "fenced",
      `a commit confirming a try ${what}`,
    );
    await rejects(
      store.commit(epoch, { store: { firstSeq: nextSeq, jobs: [late] } }),
      "fenced",
      `a commit storing a job ${what}`,
    );
  }
  if (!unchanging) return;
  await rejects(store.accept(epoch, tried), "fenced", `a repeated accept ${what}`);
  if (store.commit) await rejects(store.commit(epoch, {}), "fenced", `an empty commit ${what}`);
}

/**
 * The fencing and takeover cases, on `instances` stores of one flow.
 *
 * @example
 * ```ts
 * import { fencingCases } from "./job_store_cases_fencing.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 *
 * const cases = fencingCases({
 *   open: ({ settings }) => ({ stores: [new MemoryJobStore(settings)], close() {} }),
 * }, 1);
 * for (const rule of cases) if (rule.requires.length === 0) await rule.run();
 * ```
 */
export function fencingCases(factory: JobStoreFactory, instances: number): JobStoreCase[] {
  const rule = jobStoreCasesFor(factory, instances);
  return [
    rule(
      "a second load issues a greater epoch, returns the tries in progress, and fences every write under the old epoch",
      {},
      async (ctx) => {
        const k = ctx.instances - 1;
        await ctx.at(0).enqueue([ctx.job("x"), ctx.job("y")]);
        const taken = await ctx.take(k, 2);
        equal(idsOf(taken).sort(), ["x", "y"], "the jobs taken");
        const x = taken.find((job) => job.messageId === "x")!;
        const [{ seq }] = await ctx.start(k, [x]);
        const old = ctx.epoch(k);
        const { epoch, state } = await ctx.load(k);
        check(epoch > old, `the second load's epoch ${epoch} is not greater than ${old}`);
        check(state.currentSeq >= seq, `the cursor ${state.currentSeq} is behind x's ${seq}`);
        equal(
          state.unconfirmed.map((job) => [job.messageId, job.seq, job.payload]),
          [["x", seq, x.payload]],
          "the tries in progress",
        );
        const store = ctx.at(k);
        const writes = { tried: "x", nextSeq: ctx.cursor(k) + 1, unchanging: true };
        await allFenced(store, old, writes, `under the old epoch ${old} (current ${epoch})`);
        await allFenced(store, 0, writes, "under epoch 0");
        await allFenced(store, epoch + 1, writes, `under an epoch never issued (${epoch + 1})`);
        equal((await ctx.at(0).get("x"))?.state, "active", "x after the fenced writes");
        equal(await ctx.at(0).get("late"), undefined, "the job a fenced write tried to store");
        await ctx.finish(k, "x", completed("x"));
        equal((await ctx.at(1).get("x"))?.state, "completed", "x, confirmed under the new epoch");
      },
    ),

    rule(
      "a store reopened on the same storage finds every job as it was and fences the first one",
      { requires: ["reopen"], settings: { defaults: { attempts: 3 } } },
      async (ctx) => {
        await ctx.at(0).enqueue(["a", "b", "c", "w"].map((id) => ctx.job(id, {}, `"${id}"`)));
        await ctx.at(0).enqueue([ctx.job("s", { delay: 600_000 })]);
        const taken = await ctx.take(0, 3);
        equal(taken.length, 3, "jobs instance 0 took");
        const results = await ctx.start(0, taken);
        const ids = idsOf(taken);
        const [tried, done, failing] = ids;
        const seqOf = new Map(ids.map((id, n) => [id, results[n].seq]));
        await ctx.finish(0, done, completed(5));
        await ctx.finish(0, failing, failed("x"));
        const old = ctx.epoch(0);
        const { store, loaded } = await ctx.reopen();
        equal(
          loaded.state.unconfirmed.map((job) => [job.messageId, job.seq, job.payload]),
          [[tried, seqOf.get(tried), `"${tried}"`]],
          "the tries in progress the reopened store loaded",
        );
        check(
          loaded.state.currentSeq >= seqOf.get(tried)!,
          `the reopened store's cursor ${loaded.state.currentSeq} is behind`,
        );
        const states = await Promise.all(ids.map((id) => store.get(id)));
        equal(
          states.map((job) => [job?.id, job?.state, job?.attempts]),
          [[tried, "active", 1], [done, "completed", 1], [failing, "failed", 1]],
          "the jobs the reopened store reads",
        );
        equal((await store.get(done))?.result, 5, "the completed job's result");
        equal((await store.get("s"))?.state, "scheduled", "the delayed job");
        await allFenced(
          ctx.at(0),
          old,
          { tried, nextSeq: ctx.cursor(0) + 1, unchanging: false },
          `by the first store once reopened (epoch ${old})`,
        );
        equal(await store.get("late"), undefined, "the job a fenced write tried to store");
        equal((await store.get(tried))?.state, "active", "the try after the fenced writes");
        const alive = store.commit
          ? store.commit(loaded.epoch, {
            confirm: [tried],
            outcomes: new Map([[tried, completed(1)]]),
          })
          : store.confirmMessage(loaded.epoch, tried, { outcome: completed(1) });
        await alive;
        equal(
          (await store.get(tried))?.state,
          "completed",
          "the try confirmed by the reopened store",
        );
        const left = ["a", "b", "c", "w"].filter((id) => !ids.includes(id));
        equal(idsOf(await store.take(10)), left, "what the reopened store hands out");
      },
    ),

    rule(
      "an instance whose lease lapsed is taken over: its writes are fenced and its jobs reach the survivors",
      { requires: ["shared", "leases", "clock"] },
      async (ctx) => {
        const ttl = ctx.fixture.leaseTtl!;
        const victim = ctx.instances - 1;
        const survivors = Array.from({ length: victim }, (_, i) => i);
        const ids = ["t1", "t2", "t3"];
        await ctx.at(0).enqueue(ids.map((id) => ctx.job(id)));
        const held = await ctx.take(victim, 3);
        equal(idsOf(held).sort(), ids, "the jobs the victim took");
        const [first, second, claimed] = held;
        await ctx.start(victim, [first, second]);
        equal((await ctx.at(0).get(first.messageId))?.state, "active", "a try at the victim");
        // The victim hangs: the survivors renew within the TTL, the victim's lease lapses.
        ctx.stop(victim);
        await ctx.advance(Math.floor(ttl / 2));
        await ctx.advance(Math.ceil(ttl / 2) + 1);
        const victimStore = ctx.at(victim);
        const epoch = ctx.epoch(victim);
        await rejects(
          ctx.finish(victim, first.messageId, completed("late")),
          "fenced",
          "the victim's confirmation",
        );
        await rejects(
          ctx.start(victim, [claimed]),
          "fenced",
          "the victim starting a try of a job it took",
        );
        await allFenced(
          victimStore,
          epoch,
          { tried: second.messageId, nextSeq: ctx.cursor(victim) + 1, unchanging: false },
          "by the victim",
        );
        equal(await victimStore.take(10), [], "what the victim hands out");
        const back = await ctx.takeAll(survivors);
        equal([...back.keys()].sort(), ids, "the jobs the survivors take");
        for (const { at, job } of back.values()) {
          check(survivors.includes(at), `${job.messageId} went to instance ${at}`);
          equal(job.attempt, 1, `${job.messageId}'s attempt (a lost instance uses no try)`);
          await ctx.start(at, [job]);
          await ctx.finish(at, job.messageId, completed(job.messageId));
        }
        const states = await Promise.all(ids.map((id) => ctx.at(0).get(id)));
        equal(
          states.map((job) => [job?.state, job?.result]),
          ids.map((id) => ["completed", id]),
          "the jobs in the end",
        );
      },
    ),
  ];
}
