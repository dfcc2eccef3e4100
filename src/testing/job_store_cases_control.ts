/**
 * Conformance cases for what the API does to jobs besides running them, and what the store
 * reports: `cancel` ends a waiting, scheduled or failed job at once, leaves an active one to its
 * controller (on a shared flow, the instance holding it hears a cancel request on its next lease
 * round), and reports anything else as it is; a pause written on one instance is read on every
 * instance and outlives a reopen; finished jobs are kept for the retention and within
 * `retainedJobs`, dead ones until retried or deleted; `counts()` agree with the jobs in each
 * state; and the owner's listener hears each change.
 *
 * @module
 */

import type { JobInfo, JobRecord } from "../lifecycle/job_record.ts";
import {
  CANCELLED,
  check,
  completed,
  equal,
  failed,
  type JobStoreCase,
  jobStoreCasesFor,
  type JobStoreFactory,
  show,
} from "./job_store_cases_kit.ts";

const NO_JOBS = { waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 };

/**
 * The cancel, pause, retention, counts and listener cases, on `instances` stores of one flow.
 *
 * @example
 * ```ts
 * import { controlCases } from "./job_store_cases_control.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 *
 * const cases = controlCases({
 *   open: ({ settings }) => ({ stores: [new MemoryJobStore(settings)], close() {} }),
 * }, 1);
 * for (const rule of cases) if (rule.requires.length === 0) await rule.run();
 * ```
 */
export function controlCases(factory: JobStoreFactory, instances: number): JobStoreCase[] {
  const rule = jobStoreCasesFor(factory, instances);
  return [
    rule(
      "cancel of a waiting, scheduled or failed job cancels it at once, and it is never taken",
      { requires: ["clock"], settings: { defaults: { attempts: 3 } } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("f", { backoff: { type: "fixed", delay: 1000 } })]);
        await ctx.takeAndStart(0, 1);
        await ctx.finish(0, "f", failed("once"));
        await ctx.at(1).enqueue([ctx.job("w"), ctx.job("s", { delay: 5000 })]);
        const before = await Promise.all(["w", "s", "f"].map((id) => ctx.at(2).get(id)));
        equal(before.map((job) => job?.state), ["waiting", "scheduled", "failed"], "the states");
        const now = ctx.now();
        for (const [i, id] of ["w", "s", "f"].entries()) {
          const job = await ctx.at(i + 1).cancel(id);
          equal([job?.id, job?.state, job?.finishedAt], [id, "cancelled", now], `cancel ${id}`);
          const read = await ctx.at(i).get(id);
          equal([read?.state, read?.finishedAt], ["cancelled", now], `${id} once cancelled`);
        }
        equal(await ctx.counts(1), NO_JOBS, "counts");
        await ctx.advance(10_000);
        equal((await ctx.takeAll()).size, 0, "jobs handed out afterwards");
      },
    ),

    rule(
      "cancel of an active job reports it active and leaves the try to its controller",
      {},
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("a"), ctx.job("b")]);
        const taken = await ctx.take(0, 2);
        const a = taken.find((job) => job.messageId === "a");
        const b = taken.find((job) => job.messageId === "b");
        check(a && b, `take(2) handed out ${show(taken)}`);
        await ctx.start(0, [a]);
        equal((await ctx.at(1).cancel("a"))?.state, "active", "cancel of a, whose try started");
        equal((await ctx.at(2).cancel("b"))?.state, "active", "cancel of b, taken only");
        equal((await ctx.at(1).get("a"))?.state, "active", "a after the cancel");
        await ctx.start(0, [b]);
        equal((await ctx.at(2).get("b"))?.state, "active", "b once its try started");
        await ctx.finish(0, "a", CANCELLED);
        await ctx.finish(0, "b", completed("ran anyway"));
        const [doneA, doneB] = await Promise.all([ctx.at(1).get("a"), ctx.at(2).get("b")]);
        equal([doneA?.state, doneA?.attempts], ["cancelled", 1], "a, its try ended cancelled");
        equal([doneB?.state, doneB?.result], ["completed", "ran anyway"], "b");
        equal((await ctx.takeAll()).size, 0, "jobs handed out afterwards");
      },
    ),

    rule(
      "cancel of an unknown job resolves undefined; a finished or dead job is reported unchanged",
      { settings: { defaults: { attempts: 1 } } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("c"), ctx.job("d")]);
        const taken = await ctx.takeAll();
        for (const { at, job } of taken.values()) await ctx.start(at, [job]);
        await ctx.finish(taken.get("c")!.at, "c", completed("c"));
        await ctx.finish(taken.get("d")!.at, "d", failed("d"));
        equal(await ctx.at(1).cancel("nope"), undefined, "cancel of an unknown job");
        const c = await ctx.at(2).cancel("c");
        equal([c?.state, c?.result], ["completed", "c"], "cancel of a completed job");
        equal((await ctx.at(0).cancel("d"))?.state, "dead", "cancel of a dead job");
        equal((await ctx.at(1).get("d"))?.state, "dead", "d afterwards");
        equal(
          (await ctx.at(2).deadLetters(10)).jobs.map((job) => job.id),
          ["d"],
          "the dead letters",
        );
      },
    ),

    rule(
      "cancel of a job another instance holds reaches the holder as a cancel request on its next lease round",
      { requires: ["shared", "leases"] },
      async (ctx) => {
        const requests: string[] = [];
        ctx.at(1).listen({
          ready() {},
          changed() {},
          cancelRequested: (id) => void requests.push(id),
        });
        await ctx.at(0).enqueue([ctx.job("x"), ctx.job("y")]);
        const taken = await ctx.take(1, 2);
        equal(taken.map((job) => job.messageId).sort(), ["x", "y"], "the jobs instance 1 took");
        await ctx.start(1, taken.filter((job) => job.messageId === "x"));
        equal((await ctx.at(0).cancel("x"))?.state, "active", "cancel of x, trying at 1");
        equal((await ctx.at(0).cancel("y"))?.state, "active", "cancel of y, taken by 1");
        await ctx.round([1]);
        equal([...new Set(requests)].sort(), ["x", "y"], "the requests instance 1 heard");
        await ctx.finish(1, "x", CANCELLED);
        equal((await ctx.at(0).get("x"))?.state, "cancelled", "x once its try ended");
      },
    ),

    rule(
      "a pause written on one instance is read on every instance, and so is the resume",
      { requires: ["pause"] },
      async (ctx) => {
        const read = () =>
          Promise.all(Array.from({ length: ctx.instances }, (_, i) => ctx.at(i).readPaused!()));
        equal(await read(), ctx.stores.map(() => false), "a new flow");
        await ctx.at(0).writePaused!(true);
        equal(await read(), ctx.stores.map(() => true), "after a pause on instance 0");
        await ctx.at(ctx.instances - 1).writePaused!(false);
        equal(await read(), ctx.stores.map(() => false), "after a resume on the last instance");
      },
    ),

    rule(
      "a pause outlives a reopen of the store",
      { requires: ["pause", "reopen"] },
      async (ctx) => {
        await ctx.at(0).writePaused!(true);
        const { store } = await ctx.reopen();
        equal(await store.readPaused!(), true, "the reopened store's pause");
        await store.writePaused!(false);
        equal(await ctx.at(ctx.instances - 1).readPaused!(), false, "a resume from it");
      },
    ),

    rule(
      "completed and cancelled jobs are kept for the retention, then forgotten; dead ones stay",
      { requires: ["clock"], settings: { retention: 60_000, defaults: { attempts: 1 } } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("done"), ctx.job("dead")]);
        const taken = await ctx.takeAll();
        for (const { at, job } of taken.values()) await ctx.start(at, [job]);
        await ctx.finish(taken.get("done")!.at, "done", completed(1));
        await ctx.finish(taken.get("dead")!.at, "dead", failed("no"));
        await ctx.at(1).enqueue([ctx.job("gone", { delay: 1_000_000 })]);
        await ctx.at(2).cancel("gone");
        await ctx.advance(60_000);
        const kept = await Promise.all(["done", "gone", "dead"].map((id) => ctx.at(1).get(id)));
        equal(
          kept.map((job) => job?.state),
          ["completed", "cancelled", "dead"],
          "the jobs when the retention ends",
        );
        await ctx.advance(1);
        equal(await ctx.at(2).get("done"), undefined, "the completed job past the retention");
        equal(await ctx.at(0).get("gone"), undefined, "the cancelled job past the retention");
        equal((await ctx.at(1).get("dead"))?.state, "dead", "the dead job past the retention");
        const [again] = await ctx.at(2).enqueue([ctx.job("done")]);
        equal([again.created, again.job.state], [true, "waiting"], "done enqueued again");
      },
    ),

    rule(
      "beyond retainedJobs the oldest finished jobs are forgotten",
      { requires: ["retainedJobs"], settings: { retainedJobs: 2 } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("a"), ctx.job("b"), ctx.job("c"), ctx.job("w")]);
        const taken = await ctx.takeAll();
        for (const id of ["a", "b", "c"]) {
          const { at, job } = taken.get(id)!;
          await ctx.start(at, [job]);
          await ctx.finish(at, id, completed(id));
        }
        equal(await ctx.at(1).get("a"), undefined, "a, the oldest of three completed jobs");
        const kept = await Promise.all(["b", "c"].map((id) => ctx.at(2).get(id)));
        equal(kept.map((job) => job?.state), ["completed", "completed"], "b and c");
        const { at, job } = taken.get("w")!;
        await ctx.start(at, [job]);
        await ctx.finish(at, "w", CANCELLED);
        equal(await ctx.at(0).get("b"), undefined, "b, once w was cancelled too");
        const [again] = await ctx.at(1).enqueue([ctx.job("a")]);
        equal(again.created, true, "a forgotten MessageID counts as new");
      },
    ),

    rule(
      "with retainedJobs 0 a finished job is forgotten at once",
      { settings: { retainedJobs: 0 } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("x")]);
        await ctx.takeAndStart(1, 1);
        await ctx.finish(1, "x", completed(1));
        equal(await ctx.at(2).get("x"), undefined, "x once completed");
        const [again] = await ctx.at(0).enqueue([ctx.job("x")]);
        equal(again.created, true, "x enqueued again");
      },
    ),

    rule(
      "counts() agree with the jobs in each state",
      { settings: { defaults: { attempts: 3, backoff: { type: "fixed", delay: 60_000 } } } },
      async (ctx) => {
        equal(await ctx.counts(0), NO_JOBS, "an empty flow");
        await ctx.at(0).enqueue([ctx.job("a"), ctx.job("once", { attempts: 1 })]);
        await ctx.at(1).enqueue([ctx.job("s", { delay: 60_000 }), ctx.job("b")]);
        equal(await ctx.counts(2), { ...NO_JOBS, waiting: 3, scheduled: 1 }, "after enqueue");
        const taken = await ctx.takeAll();
        equal([...taken.keys()].sort(), ["a", "b", "once"], "the due jobs");
        for (const { at, job } of taken.values()) await ctx.start(at, [job]);
        equal(await ctx.counts(0), { ...NO_JOBS, scheduled: 1, active: 3 }, "tries running");
        await ctx.finish(taken.get("a")!.at, "a", failed("a"));
        await ctx.finish(taken.get("once")!.at, "once", failed("once"));
        await ctx.finish(taken.get("b")!.at, "b", completed());
        equal(
          await ctx.counts(1),
          { ...NO_JOBS, scheduled: 1, failed: 1, dead: 1 },
          "after a failure, a death and a completion",
        );
        await ctx.at(2).cancel("s");
        await ctx.at(0).retryDead("once");
        await ctx.at(1).cancel("a");
        equal(await ctx.counts(2), { ...NO_JOBS, waiting: 1 }, "after cancels and a retry");
        await ctx.at(0).deleteDead("none");
        equal(await ctx.counts(0), { ...NO_JOBS, waiting: 1 }, "in the end");
      },
    ),

    rule(
      "the owner's listener hears each change of a job and that due jobs are ready",
      {},
      async (ctx) => {
        const heard: [string, JobInfo["state"], JobRecord["state"] | undefined][] = [];
        let ready = 0;
        ctx.at(0).listen({
          ready: () => void (ready += 1),
          changed: (job, previous) => void heard.push([job.id, job.state, previous]),
        });
        await ctx.at(0).enqueue([ctx.job("x")]);
        check(ready > 0, "ready was not called once a due job was enqueued");
        equal(heard, [["x", "waiting", undefined]], "the changes heard after enqueue");
        const [job] = await ctx.take(0, 1);
        await ctx.start(0, [job]);
        await ctx.finish(0, "x", completed(9));
        equal(heard, [
          ["x", "waiting", undefined],
          ["x", "active", "waiting"],
          ["x", "completed", "active"],
        ], "the changes heard once x completed");
      },
    ),
  ];
}
