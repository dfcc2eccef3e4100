/**
 * The job store's index, one slot a job: the backlog's counts in every state (and after the moves
 * that leave stale entries in the due order), the retention ring (the oldest finished job beyond
 * the count is forgotten, not one that finished again since), outcomes given as a plain `Map`,
 * and a reload that rebuilds the index from a journal's snapshot. In memory, on a simulated clock.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { MemoryJobStore } from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { planJob } from "../src/lifecycle/job_options.ts";
import type { JobOutcome } from "../src/lifecycle/job_record.ts";

const failed: JobOutcome = { kind: "failed", error: { name: "Error", message: "boom" } };

async function storeWith(options: ConstructorParameters<typeof MemoryJobStore>[0] = {}) {
  const clock = new SimulatedClock();
  const store = new MemoryJobStore({ clock, ...options });
  const { epoch } = await store.load();
  let seq = 0;
  const add = (id: string, jobOptions: Parameters<typeof planJob>[0] = {}) =>
    store.enqueue([{ id, payload: JSON.stringify(id), plan: planJob(jobOptions, clock.now()) }]);
  /** Store jobs taken from the backlog (a try starts for each); their MessageIDs. */
  const storeTaken = async (taken: readonly { messageId: string; payload: string }[]) => {
    if (taken.length === 0) return [];
    await store.commit(epoch, {
      store: {
        firstSeq: seq + 1,
        jobs: taken.map(({ messageId, payload }) => ({ messageId, payload })),
      },
    });
    seq += taken.length;
    return taken.map((job) => job.messageId);
  };
  /** Take up to `max` due jobs and store them. */
  const start = async (max: number) => await storeTaken(await store.take(max));
  return { clock, store, epoch, add, start, storeTaken };
}

test("the backlog's counts follow every job through every state", async () => {
  const { clock, store, epoch, add, start, storeTaken } = await storeWith();
  const none = { waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 };
  assert.deepEqual(store.counts(), none);
  await add("w1");
  await add("w2");
  await add("w3");
  await add("later", { delay: 1000 });
  await add("once", { attempts: 1 });
  await add("retried", { attempts: 3, backoff: { type: "fixed", delay: 500 } });
  assert.deepEqual(store.counts(), { ...none, waiting: 5, scheduled: 1 });

  // Taken (reserved) counts as waiting until stored; stored, as active.
  const taken = await store.take(2);
  assert.deepEqual(taken.map((job) => job.messageId), ["w1", "w2"]);
  assert.deepEqual(store.counts(), { ...none, waiting: 5, scheduled: 1 });
  await storeTaken(taken);
  assert.deepEqual(store.counts(), { ...none, waiting: 3, scheduled: 1, active: 2 });

  // A cancelled job leaves a stale entry in the due order: it counts nowhere, and is never taken.
  assert.equal((await store.cancel("w3"))?.state, "cancelled");
  assert.deepEqual(store.counts(), { ...none, waiting: 2, scheduled: 1, active: 2 });

  assert.deepEqual(await start(10), ["once", "retried"]);
  assert.deepEqual(store.counts(), { ...none, scheduled: 1, active: 4 });
  await store.commit(epoch, {
    confirm: ["w1", "once", "retried"],
    outcomes: new Map([["once", failed], ["retried", failed]]), // a plain Map will do
  });
  assert.deepEqual(store.counts(), { ...none, scheduled: 1, failed: 1, active: 1, dead: 1 });
  assert.equal((await store.get("once"))?.state, "dead");
  assert.equal((await store.get("retried"))?.state, "failed");
  assert.equal((await store.get("w1"))?.state, "completed");

  // The delayed job and the failed one's retry fall due (a failed job counts as failed until it
  // is taken again); both are taken in due order.
  clock.advance(1000);
  assert.deepEqual(store.counts(), { ...none, waiting: 1, failed: 1, active: 1, dead: 1 });
  assert.deepEqual(await start(10), ["retried", "later"]);
  assert.deepEqual(store.counts(), { ...none, active: 3, dead: 1 });

  // A dead job retried is waiting again; deleted, it is gone.
  assert.equal((await store.retryDead("once"))?.state, "waiting");
  assert.deepEqual(store.counts(), { ...none, waiting: 1, active: 3 });
  await store.commit(epoch, { confirm: ["w2", "retried", "later"] });
  assert.deepEqual(await start(10), ["once"]);
  await store.commit(epoch, { confirm: ["once"], outcomes: new Map([["once", failed]]) });
  assert.deepEqual(store.counts(), { ...none, dead: 1 });
  assert.equal(await store.deleteDead("once"), true);
  assert.equal(await store.get("once"), undefined);
  assert.deepEqual(store.counts(), none);
  store.close();
});

test("the oldest finished job beyond retainedJobs is forgotten, not one that finished again since", async () => {
  const { store, epoch, add, start } = await storeWith({ retainedJobs: 2 });
  for (const id of ["a", "b", "c"]) await add(id);
  assert.deepEqual(await start(3), ["a", "b", "c"]);
  await store.commit(epoch, { confirm: ["a", "b"] });
  // The controller stores "a" again (a producer resubmitted it): a new try of a finished job.
  const [again] = (await store.commit(epoch, {
    store: { firstSeq: 4, jobs: [{ messageId: "a", payload: '"a"' }] },
  })).stored;
  assert.deepEqual([again.seq, again.alreadyStored], [4, false]);
  assert.equal((await store.get("a"))?.state, "active");
  await store.commit(epoch, { accept: ["a"], confirm: ["a", "c"] });
  // Finished in order a, b, a, c with room for two: "b" went; "a" is kept, finished again later.
  const states = async () =>
    await Promise.all(["a", "b", "c"].map(async (id) => (await store.get(id))?.state));
  assert.deepEqual(await states(), ["completed", undefined, "completed"]);
  store.close();
});

test("a job is looked up by its MessageID in every call, whatever string object names it", async () => {
  const { store, epoch, add, start } = await storeWith();
  const id = ["job", "7"].join("-"); // built at run time: not the literal below
  await add(id);
  assert.deepEqual(await start(1), ["job-7"]);
  await store.commit(epoch, { confirm: [JSON.parse('"job-7"')] });
  assert.equal((await store.get("job-7"))?.state, "completed");
  const [repeat] = await store.enqueue([{ id: "job-7", payload: "1", plan: planJob({}, 0) }]);
  assert.deepEqual([repeat.created, repeat.job.state], [false, "completed"]);
  store.close();
});

test("a finished job that runs again is not forgotten while it runs, when the ring comes round", async () => {
  const { clock, store, epoch, add, start } = await storeWith({ retainedJobs: 1 });
  await add("a");
  await add("b");
  assert.deepEqual(await start(2), ["a", "b"]);
  clock.advance(1);
  await store.commit(epoch, { confirm: ["a"] });
  // The controller stores "a" again (a producer resubmitted it): it runs, its record still
  // carrying when it finished before.
  clock.advance(1);
  await store.commit(epoch, {
    store: { firstSeq: 3, jobs: [{ messageId: "a", payload: '"a2"' }] },
    accept: ["a"],
  });
  clock.advance(1);
  await store.commit(epoch, { confirm: ["b"] }); // takes the ring's one place, "a"'s old one
  assert.equal((await store.get("a"))?.state, "active");
  await store.commit(epoch, { confirm: ["a"] });
  assert.equal((await store.get("a"))?.state, "completed");
  assert.equal(await store.get("b"), undefined, "b is forgotten once a finished after it");
  store.close();
});
