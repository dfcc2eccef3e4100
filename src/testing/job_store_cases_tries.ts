/**
 * Conformance cases for tries and their outcomes, in the order a job lives them: a try starts
 * when the controller stores a taken job (the job is active, its attempts counted); its
 * confirmation carries the outcome, which the store turns into the job's next state in the same
 * write: completed with the handler's result, failed and due again after its backoff, dead after
 * the last attempt, or cancelled. Dead jobs are listed a page at a time, oldest death first, and
 * are retried or deleted. Repeated writes (the lane's retries after an unknown outcome) change
 * nothing more, and the same tries go through `commit` or through the single calls alike.
 *
 * @module
 */

import {
  CANCELLED,
  check,
  completed,
  equal,
  failed,
  idsOf,
  type JobStoreCase,
  jobStoreCasesFor,
  type JobStoreFactory,
} from "./job_store_cases_kit.ts";

const NO_JOBS = { waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 };

/** A timestamp taken by the store between `from` and `to` (any clock: exact on a simulated one). */
function checkTime(at: number | undefined, from: number, to: number, what: string): void {
  check(
    typeof at === "number" && at >= from && at <= to,
    `${what}: expected a time in [${from}, ${to}], got ${at}`,
  );
}

/**
 * The try cases, on `instances` stores of one flow.
 *
 * @example
 * ```ts
 * import { tryCases } from "./job_store_cases_tries.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 *
 * const cases = tryCases({
 *   open: ({ settings }) => ({ stores: [new MemoryJobStore(settings)], close() {} }),
 * }, 1);
 * for (const rule of cases) if (rule.requires.length === 0) await rule.run();
 * ```
 */
export function tryCases(factory: JobStoreFactory, instances: number): JobStoreCase[] {
  const rule = jobStoreCasesFor(factory, instances);
  return [
    rule(
      "a try started from a taken job makes it active; a completed outcome makes it completed with its result",
      {},
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("x", {}, '{"n":1}')]);
        const [ready] = await ctx.take(1, 10);
        equal([ready?.messageId, ready?.attempt], ["x", 1], "the job handed out");
        const before = ctx.now();
        const [stored] = await ctx.start(1, [ready]);
        const after = ctx.now();
        equal([stored.alreadyStored, stored.payload], [false, '{"n":1}'], "the store result");
        const active = await ctx.at(2).get("x");
        equal([active?.state, active?.attempts], ["active", 1], "the job once its try started");
        checkTime(active?.startedAt, before, after, "its startedAt");
        equal(await ctx.counts(0), { ...NO_JOBS, active: 1 }, "counts while it runs");
        const ending = ctx.now();
        await ctx.finish(1, "x", completed({ ok: true, items: [1, 2] }, "worker-7"));
        const ended = ctx.now();
        const done = await ctx.at(0).get("x");
        equal(
          [done?.state, done?.result, done?.attempts, done?.worker],
          ["completed", { ok: true, items: [1, 2] }, 1, "worker-7"],
          "the job once its try completed",
        );
        checkTime(done?.finishedAt, ending, ended, "its finishedAt");
        equal(await ctx.counts(2), NO_JOBS, "counts afterwards");
        equal((await ctx.takeAll()).size, 0, "jobs handed out afterwards");
      },
    ),

    rule(
      "a failed try with tries left makes the job failed, due after its backoff, and it runs again as the next attempt",
      { requires: ["clock"] },
      async (ctx) => {
        const backoff = { type: "exponential", delay: 1000, jitter: 0 } as const;
        await ctx.at(0).enqueue([ctx.job("x", { attempts: 3, backoff })]);
        await ctx.takeAndStart(0, 1);
        const firstEnd = ctx.now();
        await ctx.finish(0, "x", failed("boom"));
        const first = await ctx.at(1).get("x");
        equal(
          [first?.state, first?.attempts, first?.runAt, first?.error],
          ["failed", 1, firstEnd + 1000, { name: "Error", message: "boom" }],
          "the job after its first try failed",
        );
        equal(await ctx.counts(2), { ...NO_JOBS, failed: 1 }, "counts during the backoff");
        equal((await ctx.takeAll()).size, 0, "jobs handed out at once");
        await ctx.advance(999);
        equal((await ctx.takeAll()).size, 0, "jobs handed out 1 ms before the backoff ends");
        await ctx.advance(1);
        const [second] = await ctx.take(1, 10);
        equal([second?.messageId, second?.attempt], ["x", 2], "the job after its backoff");
        await ctx.start(1, [second]);
        const secondEnd = ctx.now();
        await ctx.finish(1, "x", failed("again"));
        const again = await ctx.at(2).get("x");
        equal(
          [again?.state, again?.attempts, again?.runAt],
          ["failed", 2, secondEnd + 2000],
          "the job after its second try failed (the backoff doubled)",
        );
        await ctx.advance(2000);
        const [third] = await ctx.take(2, 10);
        equal([third?.messageId, third?.attempt], ["x", 3], "the third try");
        await ctx.start(2, [third]);
        await ctx.finish(2, "x", completed("fine"));
        const done = await ctx.at(0).get("x");
        equal(
          [done?.state, done?.attempts, done?.result],
          ["completed", 3, "fine"],
          "the job once its third try completed",
        );
      },
    ),

    rule(
      "a try that fails on the last attempt makes the job dead, and it is handed out no more",
      {
        requires: ["clock"],
        settings: { defaults: { attempts: 2, backoff: { type: "fixed", delay: 500 } } },
      },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("x")]);
        await ctx.takeAndStart(1, 1);
        await ctx.finish(1, "x", failed("first"));
        await ctx.advance(500);
        const [last] = await ctx.takeAndStart(2, 1);
        equal(last?.attempt, 2, "the last try's attempt");
        await ctx.finish(2, "x", failed("last"));
        const dead = await ctx.at(0).get("x");
        equal(
          [dead?.state, dead?.attempts, dead?.finishedAt, dead?.error?.message],
          ["dead", 2, ctx.now(), "last"],
          "the job after its last try failed",
        );
        equal(await ctx.counts(1), { ...NO_JOBS, dead: 1 }, "counts");
        const page = await ctx.at(1).deadLetters(10);
        equal(page.jobs.map((job) => [job.id, job.state]), [["x", "dead"]], "the dead letters");
        await ctx.advance(60_000);
        equal((await ctx.takeAll()).size, 0, "jobs handed out afterwards");
      },
    ),

    rule(
      "dead letters are listed oldest death first, a page at a time",
      { requires: ["clock"], settings: { defaults: { attempts: 1 } } },
      async (ctx) => {
        const deaths = ["d-c", "d-a", "d-b"]; // names that do not sort in the order they die
        await ctx.at(0).enqueue([...deaths, "alive"].map((id) => ctx.job(id)));
        const taken = await ctx.takeAll();
        for (const { at, job } of taken.values()) await ctx.start(at, [job]);
        for (const id of deaths) {
          await ctx.advance(1);
          await ctx.finish(taken.get(id)!.at, id, failed(id));
        }
        const first = await ctx.at(1).deadLetters(2);
        equal(first.jobs.map((job) => job.id), ["d-c", "d-a"], "the first page");
        check(first.cursor !== undefined, "the first page has a cursor");
        const next = await ctx.at(2).deadLetters(2, first.cursor);
        equal(next.jobs.map((job) => job.id), ["d-b"], "the second page");
        equal(next.cursor, undefined, "the last page's cursor");
        const whole = await ctx.at(0).deadLetters(3);
        equal(whole.jobs.map((job) => [job.id, job.state, job.error?.message]), [
          ["d-c", "dead", "d-c"],
          ["d-a", "dead", "d-a"],
          ["d-b", "dead", "d-b"],
        ], "one page of all three");
        equal(whole.cursor, undefined, "its cursor");
      },
    ),

    rule(
      "a dead-letter cursor leads to the next page also after its own job left the dead letters",
      { requires: ["clock"], settings: { defaults: { attempts: 1 } } },
      async (ctx) => {
        const deaths = ["d1", "d2", "d3", "d4", "d5"];
        await ctx.at(0).enqueue(deaths.map((id) => ctx.job(id)));
        const taken = await ctx.takeAll();
        for (const { at, job } of taken.values()) await ctx.start(at, [job]);
        for (const id of deaths) {
          await ctx.advance(1);
          await ctx.finish(taken.get(id)!.at, id, failed(id));
        }
        const first = await ctx.at(1).deadLetters(2);
        equal(first.jobs.map((job) => job.id), ["d1", "d2"], "the first page");
        equal(await ctx.at(2).deleteDead("d2"), true, "deleteDead of the page's last job");
        const second = await ctx.at(0).deadLetters(2, first.cursor);
        equal(second.jobs.map((job) => job.id), ["d3", "d4"], "the page after the cursor");
        equal((await ctx.at(1).retryDead("d4"))?.state, "waiting", "retryDead d4");
        const third = await ctx.at(2).deadLetters(2, second.cursor);
        equal(third.jobs.map((job) => job.id), ["d5"], "the page after the second cursor");
        equal(third.cursor, undefined, "the last page's cursor");
      },
    ),

    rule(
      "retryDead gives a dead job a fresh set of tries, retryAllDead every dead job, and deleteDead forgets one",
      { settings: { defaults: { attempts: 1 } } },
      async (ctx) => {
        const ids = ["a", "b", "c", "d"];
        await ctx.at(0).enqueue(ids.map((id) => ctx.job(id)));
        const taken = await ctx.takeAll();
        for (const { at, job } of taken.values()) {
          await ctx.start(at, [job]);
          await ctx.finish(at, job.messageId, failed("no"));
        }
        await ctx.at(0).enqueue([ctx.job("w")]);
        const retried = await ctx.at(1).retryDead("a");
        equal([retried?.id, retried?.state, retried?.attempts], ["a", "waiting", 0], "retryDead a");
        equal(await ctx.at(2).retryDead("w"), undefined, "retryDead of a waiting job");
        equal(await ctx.at(0).retryDead("nope"), undefined, "retryDead of an unknown job");
        equal(await ctx.at(1).deleteDead("b"), true, "deleteDead b");
        equal(await ctx.at(2).get("b"), undefined, "b once deleted");
        equal(await ctx.at(0).deleteDead("b"), false, "deleteDead b again");
        equal(await ctx.at(1).deleteDead("w"), false, "deleteDead of a waiting job");
        equal(await ctx.at(2).retryAllDead(), 2, "retryAllDead (c and d)");
        equal((await ctx.at(0).deadLetters(10)).jobs, [], "the dead letters afterwards");
        equal(await ctx.counts(1), { ...NO_JOBS, waiting: 4 }, "counts afterwards");
        const again = await ctx.takeAll();
        equal([...again.keys()].sort(), ["a", "c", "d", "w"], "jobs handed out afterwards");
        check(
          [...again.values()].every(({ job }) => job.attempt === 1),
          "a retried job's next try is its first",
        );
      },
    ),

    rule(
      "a failed try's count of lost workers carries over to the job's next try",
      { requires: ["clock"] },
      async (ctx) => {
        const backoff = { type: "fixed", delay: 1000 } as const;
        await ctx.at(0).enqueue([ctx.job("x", { attempts: 5, backoff })]);
        const [first] = await ctx.takeAndStart(1, 1);
        equal(first?.lost ?? 0, 0, "the first try's lost workers");
        // The controller reports how many workers the job lost so far with a failed try.
        await ctx.finish(1, "x", {
          kind: "failed",
          error: { name: "WorkerLostError", message: "its worker was lost" },
          lost: 2,
        });
        await ctx.advance(1000);
        const [second] = await ctx.take(2, 1);
        equal(
          [second?.messageId, second?.attempt, second?.lost],
          ["x", 2, 2],
          "the next try (attempt, lost workers)",
        );
      },
    ),

    rule(
      "a cancelled outcome ends an active try cancelled, and the job is not tried again",
      { settings: { defaults: { attempts: 3 } } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("x")]);
        await ctx.takeAndStart(1, 1);
        const before = ctx.now();
        await ctx.finish(1, "x", CANCELLED);
        const after = ctx.now();
        const job = await ctx.at(2).get("x");
        equal([job?.state, job?.attempts], ["cancelled", 1], "x");
        checkTime(job?.finishedAt, before, after, "its finishedAt");
        equal(await ctx.counts(0), NO_JOBS, "counts");
        equal((await ctx.takeAll()).size, 0, "jobs handed out afterwards");
      },
    ),

    rule(
      "tries started with store and accept and confirmed with confirmMessage move jobs as commit does",
      { settings: { defaults: { attempts: 2, backoff: { type: "fixed", delay: 1000 } } } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("a"), ctx.job("b"), ctx.job("c")]);
        const taken = await ctx.take(1, 3);
        equal(idsOf(taken).sort(), ["a", "b", "c"], "the jobs taken");
        await ctx.start(1, taken, "single");
        equal((await ctx.at(2).get("a"))?.state, "active", "a once stored");
        await ctx.finish(1, "a", undefined, "single");
        await ctx.finish(1, "b", failed("b failed"), "single");
        await ctx.finish(1, "c", completed([3]), "single");
        const [a, b, c] = await Promise.all(["a", "b", "c"].map((id) => ctx.at(0).get(id)));
        equal([a?.state, a?.attempts], ["completed", 1], "a, confirmed without an outcome");
        equal([b?.state, b?.attempts, b?.error?.message], ["failed", 1, "b failed"], "b");
        equal([c?.state, c?.result], ["completed", [3]], "c");
      },
    ),

    rule(
      "a repeated store, accept or confirmation (a retry after an unknown outcome) changes nothing more",
      {},
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("x", {}, '"x"')]);
        const [job] = await ctx.take(0, 1);
        const [first] = await ctx.start(0, [job]);
        const store = ctx.at(0);
        const epoch = ctx.epoch(0);
        const request = { messageId: "x", payload: '"x"' };
        const again = store.commit
          ? (await store.commit(epoch, { store: { firstSeq: first.seq, jobs: [request] } }))
            .stored[0]
          : await store.store(epoch, { ...request, proposedSeq: first.seq });
        equal(
          [again?.seq, again?.alreadyStored, again?.payload],
          [first.seq, true, '"x"'],
          "the repeated store",
        );
        await store.accept(epoch, "x");
        await ctx.finish(0, "x", completed(1));
        await ctx.finish(0, "x", completed(2));
        await ctx.finish(0, "x", failed("late"), "single");
        await ctx.finish(0, "never-stored", completed(3));
        await ctx.finish(0, "never-stored", undefined, "single");
        const done = await ctx.at(1).get("x");
        equal(
          [done?.state, done?.attempts, done?.result, done?.error],
          ["completed", 1, 1, undefined],
          "x: the first confirmation counts",
        );
        equal(await ctx.at(2).get("never-stored"), undefined, "a job confirmed but never stored");
        equal(await ctx.counts(0), NO_JOBS, "counts afterwards");
      },
    ),

    rule(
      "one commit that starts tries and confirms others applies all of it",
      { requires: ["commit"] },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("a")]);
        const [a] = await ctx.takeAndStart(0, 1);
        await ctx.at(0).enqueue([ctx.job("b")]);
        const [b] = await ctx.take(0, 1);
        equal([a?.messageId, b?.messageId], ["a", "b"], "the jobs taken");
        const store = ctx.at(0);
        const { stored } = await store.commit!(ctx.epoch(0), {
          store: { firstSeq: ctx.cursor(0) + 1, jobs: [{ messageId: "b", payload: b.payload }] },
          confirm: ["a"],
          outcomes: new Map([["a", completed("a done")]]),
        });
        equal(stored.length, 1, "store results");
        equal([stored[0].seq, stored[0].alreadyStored], [ctx.cursor(0) + 1, false], "b's store");
        if (stored[0].accepted !== true) await store.commit!(ctx.epoch(0), { accept: ["b"] });
        const [doneA, activeB] = await Promise.all([ctx.at(1).get("a"), ctx.at(2).get("b")]);
        equal([doneA?.state, doneA?.result], ["completed", "a done"], "a");
        equal(activeB?.state, "active", "b");
      },
    ),
  ];
}
