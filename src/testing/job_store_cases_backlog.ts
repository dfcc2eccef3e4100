/**
 * Conformance cases for the backlog, in the order a job meets it: `enqueue` creates a job once per
 * MessageID (repeated in one batch, in later calls, concurrently, on any instance of the flow) and
 * reports a known one as it is; `maxBacklog` refuses a batch whole; `take` hands out due jobs by
 * priority, then due time, then submission, each once, with its payload, attempt and timeout; a
 * delayed job waits for its due time; `takeNow`, where a store has it, answers as `take` would.
 * With several instances, each step runs on another instance than the last.
 *
 * @module
 */

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
  show,
} from "./job_store_cases_kit.ts";
import { payloadOf } from "./conformance_kit.ts";
import type { BacklogFullError } from "../backlog/job_store.ts";

/**
 * A payload of about 150 KB (several KV values) whose multi-byte characters straddle any split:
 * two-, three- and four-byte UTF-8 sequences (a surrogate pair in UTF-16) in turn.
 */
function largePayload(): string {
  return JSON.stringify({ text: "é€😀x".repeat(30_000) });
}

/**
 * The backlog cases, on `instances` stores of one flow.
 *
 * @example
 * ```ts
 * import { backlogCases } from "./job_store_cases_backlog.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 *
 * const cases = backlogCases({
 *   open: ({ settings }) => ({ stores: [new MemoryJobStore(settings)], close() {} }),
 * }, 1);
 * for (const rule of cases) if (rule.requires.length === 0) await rule.run();
 * ```
 */
export function backlogCases(factory: JobStoreFactory, instances: number): JobStoreCase[] {
  const rule = jobStoreCasesFor(factory, instances);
  return [
    rule(
      "a MessageID repeated inside one batch is created once, and its first payload wins",
      {},
      async (ctx) => {
        const results = await ctx.at(0).enqueue([
          ctx.job("x", {}, '"first"'),
          ctx.job("x", {}, '"second"'),
          ctx.job("y"),
        ]);
        equal(results.map((r) => [r.job.id, r.created]), [
          ["x", true],
          ["x", false],
          ["y", true],
        ], "what enqueue reported");
        equal(results.map((r) => r.job.state), ["waiting", "waiting", "waiting"], "the states");
        const taken = await ctx.takeAll();
        equal([...taken.keys()].sort(), ["x", "y"], "the jobs handed out");
        equal(taken.get("x")?.job.payload, '"first"', "x's payload");
      },
    ),

    rule(
      "enqueueing a known MessageID again changes nothing and reports the job as it is",
      {},
      async (ctx) => {
        const [first] = await ctx.at(0).enqueue([ctx.job("x", {}, '"one"')]);
        check(first.created, "the first enqueue creates x");
        const [waiting] = await ctx.at(1).enqueue([ctx.job("x", {}, '"two"')]);
        equal([waiting.created, waiting.job.state], [false, "waiting"], "x enqueued again");
        const [taken] = await ctx.takeAndStart(1, 10);
        equal([taken?.messageId, taken?.payload], ["x", '"one"'], "the job handed out");
        const [active] = await ctx.at(2).enqueue([ctx.job("x", {}, '"three"')]);
        equal([active.created, active.job.state], [false, "active"], "x enqueued while active");
        await ctx.finish(1, "x", completed(7));
        const [done] = await ctx.at(0).enqueue([ctx.job("x", {}, '"four"')]);
        equal(
          [done.created, done.job.state, done.job.result, done.job.attempts],
          [false, "completed", 7, 1],
          "x enqueued once completed",
        );
        equal((await ctx.takeAll()).size, 0, "jobs handed out afterwards");
        equal((await ctx.at(1).get("x"))?.state, "completed", "x afterwards");
      },
    ),

    rule(
      "concurrent enqueues of one MessageID on every instance create it exactly once",
      {},
      async (ctx) => {
        const calls = Array.from(
          { length: Math.max(3, ctx.instances) },
          (_, i) => ctx.at(i).enqueue([ctx.job("twin", {}, `"${i}"`)]),
        );
        const results = (await Promise.all(calls)).map(([result]) => result);
        equal(results.filter((r) => r.created).length, 1, "enqueues that created twin");
        check(results.every((r) => r.job.id === "twin"), "every call reports twin");
        const taken = await ctx.takeAll();
        equal([...taken.keys()], ["twin"], "the jobs handed out");
      },
    ),

    rule(
      "a batch that would pass maxBacklog is refused whole with BacklogFullError",
      { settings: { maxBacklog: 3 } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("a"), ctx.job("b")]);
        const error = await rejects(
          ctx.at(1).enqueue([ctx.job("c"), ctx.job("d")]),
          "full",
          "a batch of two new jobs beside two",
        ) as BacklogFullError;
        equal([error.limit, error.size], [3, 2], "the error's limit and backlog size");
        equal(error.adding, 2, "the jobs the refused batch would have added");
        equal(await ctx.at(2).get("c"), undefined, "c after the refused batch");
        equal(await ctx.at(0).get("d"), undefined, "d after the refused batch");
        const again = await ctx.at(1).enqueue([
          ctx.job("a"),
          ctx.job("c"),
          ctx.job("c"),
          ctx.job("b"),
        ]);
        equal(
          again.map((r) => r.created),
          [false, true, false, false],
          "known MessageIDs and a repeat count nothing: the batch fits",
        );
        await rejects(ctx.at(2).enqueue([ctx.job("d")]), "full", "a fourth job");
        const counts = await ctx.counts(0);
        equal(counts.waiting, 3, "waiting jobs");
      },
    ),

    rule(
      "taken jobs count against maxBacklog until their try starts; then they leave room",
      { settings: { maxBacklog: 2 } },
      async (ctx) => {
        await ctx.at(0).enqueue([ctx.job("a"), ctx.job("b")]);
        const taken = await ctx.take(1, 2);
        equal(idsOf(taken).sort(), ["a", "b"], "the jobs taken");
        await rejects(ctx.at(2).enqueue([ctx.job("c")]), "full", "a job beside two taken ones");
        await ctx.start(1, taken);
        const added = await ctx.at(0).enqueue([ctx.job("c"), ctx.job("d")]);
        equal(added.map((r) => r.created), [true, true], "c and d once a and b are active");
        await rejects(ctx.at(1).enqueue([ctx.job("e")]), "full", "a job beside c and d");
      },
    ),

    rule(
      "take hands out higher priorities first and, within a priority, the earliest due first",
      {},
      async (ctx) => {
        const now = ctx.now();
        const jobs = [
          ctx.job("low", { priority: -3, runAt: now - 5000 }),
          ctx.job("mid-late", { runAt: now - 1000 }),
          ctx.job("later", { priority: 9, delay: 60_000 }),
          ctx.job("urgent", { priority: 7, runAt: now - 10 }),
          ctx.job("mid-early", { runAt: now - 3000 }),
          ctx.job("mid-now"),
          ctx.job("urgent-earlier", { priority: 7, runAt: now - 20 }),
        ];
        for (const [i, job] of jobs.entries()) await ctx.at(i).enqueue([job]);
        const taken = await ctx.take(1, 10);
        equal(idsOf(taken), [
          "urgent-earlier",
          "urgent",
          "mid-early",
          "mid-late",
          "mid-now",
          "low",
        ], "the order of take");
      },
    ),

    rule(
      "jobs due at the same time within a priority are handed out in submission order",
      { requires: ["fifo"] },
      async (ctx) => {
        // Names that do not sort in submission order, one enqueue each, round the instances.
        const ids = ["m", "c", "x", "a", "q", "b", "k"];
        const runAt = ctx.now();
        for (const [i, id] of ids.entries()) await ctx.at(i).enqueue([ctx.job(id, { runAt })]);
        equal(idsOf(await ctx.take(1, 20)), ids, "the order of take");
      },
    ),

    rule(
      "submission order within a priority holds across a reopen of the store",
      { requires: ["fifo", "reopen"] },
      async (ctx) => {
        const runAt = ctx.now();
        await ctx.at(0).enqueue([ctx.job("m", { runAt }), ctx.job("c", { runAt })]);
        if (ctx.fixture.clock) await ctx.advance(1); // a restart takes time (due times stay)
        const { store } = await ctx.reopen();
        await store.enqueue([ctx.job("x", { runAt })]);
        await store.enqueue([ctx.job("a", { runAt })]);
        equal(idsOf(await store.take(10)), ["m", "c", "x", "a"], "the order of take");
      },
    ),

    rule(
      "take(max) hands out at most max jobs, and no job to two callers",
      {},
      async (ctx) => {
        await ctx.at(0).enqueue(["a", "b", "c", "d", "e", "f", "g"].map((id) => ctx.job(id)));
        const first = await ctx.take(0, 2);
        check(first.length <= 2, `take(2) handed out ${first.length} jobs`);
        equal((await ctx.take(1, 0)).length, 0, "jobs handed out by take(0)");
        const concurrent = await Promise.all(
          Array.from({ length: Math.max(3, ctx.instances) }, (_, i) => ctx.take(i, 2)),
        );
        for (const batch of concurrent) {
          check(batch.length <= 2, `a concurrent take(2) handed out ${batch.length} jobs`);
        }
        const rest = await ctx.takeAll();
        const all = [...idsOf(first), ...concurrent.flatMap(idsOf), ...rest.keys()];
        equal([...all].sort(), ["a", "b", "c", "d", "e", "f", "g"], "every job handed out once");
      },
    ),

    rule(
      "a taken job carries its payload, its attempt number and its try's timeout",
      { settings: { defaults: { timeout: 7000 } } },
      async (ctx) => {
        await ctx.at(0).enqueue([
          ctx.job("own", { timeout: 2500 }, '{"n":1}'),
          ctx.job("flow", {}, '["a",2]'),
        ]);
        const taken = [...(await ctx.takeAll()).values()].map(({ job }) => job);
        taken.sort((a, b) => a.messageId.localeCompare(b.messageId));
        equal(
          taken.map((job) => [job.messageId, job.payload, job.attempt, job.timeout]),
          [["flow", '["a",2]', 1, 7000], ["own", '{"n":1}', 1, 2500]],
          "the jobs handed out",
        );
      },
    ),

    rule(
      "a large payload with multi-byte characters comes back whole, also from a reload",
      {},
      async (ctx) => {
        const payload = largePayload();
        await ctx.at(0).enqueue([ctx.job("big", {}, payload)]);
        const [job] = await ctx.take(1, 1);
        check(job?.payload === payload, `the payload taken differs (${job?.payload.length} chars)`);
        await ctx.start(1, [job]); // checks the payload stored
        const { state } = await ctx.load(1);
        const [loaded] = state.unconfirmed;
        check(loaded?.payload === payload, "the payload of the try reloaded differs");
        await ctx.finish(1, "big", completed("done"));
        equal((await ctx.at(2).get("big"))?.state, "completed", "the job in the end");
      },
    ),

    rule(
      "a large payload with multi-byte characters survives a reopen",
      { requires: ["reopen"] },
      async (ctx) => {
        const payload = largePayload();
        await ctx.at(0).enqueue([ctx.job("big", {}, payload), ctx.job("tried", {}, payload)]);
        const [tried] = await ctx.takeAndStart(0, 1);
        const { store, loaded } = await ctx.reopen();
        check(
          loaded.state.unconfirmed[0]?.payload === payload,
          `the try reloaded: ${show(loaded.state.unconfirmed.map((job) => job.messageId))}`,
        );
        const [waiting] = await store.take(1);
        check(
          waiting?.messageId !== tried?.messageId && waiting?.payload === payload,
          `the waiting job taken from the reopened store: ${waiting?.messageId}`,
        );
      },
    ),

    rule(
      "MessageIDs of every allowed form (Unicode, punctuation, 256 characters) work throughout",
      { settings: { defaults: { attempts: 1 } } },
      async (ctx) => {
        const ids = ["ü/ß 😀", "x:y:z", "a".repeat(256), "0", " lead and trail ", '["k"]'];
        await ctx.at(0).enqueue(ids.map((id) => ctx.job(id)));
        for (const [i, id] of ids.entries()) {
          equal((await ctx.at(i).get(id))?.id, id, `get of ${show(id)}`);
        }
        const taken = await ctx.takeAll();
        equal([...taken.keys()].sort(), [...ids].sort(), "the jobs handed out");
        for (const { at, job } of taken.values()) {
          await ctx.start(at, [job]);
          equal(job.payload, payloadOf(job.messageId), `the payload of ${show(job.messageId)}`);
        }
        const [dying, cancelled, ...rest] = ids;
        await ctx.finish(taken.get(dying)!.at, dying, failed("dead"));
        await ctx.finish(taken.get(cancelled)!.at, cancelled, { kind: "cancelled" });
        for (const id of rest) await ctx.finish(taken.get(id)!.at, id, completed(id));
        const dead = await ctx.at(1).deadLetters(1);
        equal(dead.jobs.map((job) => job.id), [dying], "the dead letters");
        equal((await ctx.at(2).get(cancelled))?.state, "cancelled", `${show(cancelled)}`);
        for (const id of rest) {
          const job = await ctx.at(0).get(id);
          equal([job?.state, job?.result], ["completed", id], `${show(id)} in the end`);
        }
        equal(await ctx.at(1).retryDead(dying).then((job) => job?.state), "waiting", "retry");
      },
    ),

    rule(
      "a batch too large for one write is enqueued whole",
      {},
      async (ctx) => {
        const ids = Array.from({ length: 600 }, (_, i) => `bulk-${i}`);
        const results = await ctx.at(0).enqueue(
          ids.map((id) => ctx.job(id, {}, `"${"p".repeat(200)}"`)),
        );
        check(results.every((r) => r.created), "every job of the batch created");
        equal((await ctx.counts(1)).waiting, 600, "waiting jobs");
        const again = await ctx.at(2).enqueue(ids.map((id) => ctx.job(id)));
        check(again.every((r) => !r.created), "none of them created again");
        equal((await ctx.takeAll()).size, 600, "the jobs handed out");
      },
    ),

    rule(
      "a delayed job is scheduled and not taken before it is due; once due it is",
      { requires: ["clock"] },
      async (ctx) => {
        const due = ctx.now() + 5000;
        await ctx.at(0).enqueue([ctx.job("later", { delay: 5000 })]);
        const scheduled = await ctx.at(1).get("later");
        equal([scheduled?.state, scheduled?.runAt], ["scheduled", due], "the job as enqueued");
        equal((await ctx.takeAll()).size, 0, "jobs handed out before its due time");
        await ctx.advance(4999);
        equal((await ctx.takeAll()).size, 0, "jobs handed out 1 ms before its due time");
        equal((await ctx.at(2).get("later"))?.state, "scheduled", "the job 1 ms before");
        await ctx.advance(1);
        equal((await ctx.at(0).get("later"))?.state, "waiting", "the job at its due time");
        const taken = await ctx.takeAll();
        equal([...taken.keys()], ["later"], "jobs handed out at its due time");
        equal(taken.get("later")?.job.attempt, 1, "its attempt");
      },
    ),

    rule(
      "takeNow, when it answers, hands out due jobs as take would: in order, each once",
      { requires: ["takeNow"] },
      async (ctx) => {
        const ids = ["p", "q", "r", "s", "t"];
        await ctx.at(0).enqueue(ids.map((id, i) => ctx.job(id, { priority: 10 - i })));
        const store = ctx.at(0);
        const handed: string[] = [];
        for (let turn = 0; turn < 10; turn++) {
          const now = store.takeNow!(2);
          check(now === undefined || now.length <= 2, `takeNow(2) answered ${show(now)}`);
          const jobs = now ?? await store.take(2);
          if (jobs.length === 0) break;
          for (const job of jobs) {
            equal(job.payload, payloadOf(job.messageId), `the payload of ${job.messageId}`);
          }
          handed.push(...idsOf(jobs));
        }
        equal(handed, ids, "the jobs handed out, by takeNow or take in turn");
      },
    ),
  ];
}
