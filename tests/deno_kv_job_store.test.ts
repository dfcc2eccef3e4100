/**
 * The Deno KV job store: the work-queue contract (the conformance suite), and what only a durable
 * store can show: everything survives a reopen, a newer load fences an older one, a write whose
 * outcome is unknown is healed, a change too large for one commit is split, and the keys are
 * numbered in write order (format version 2) while a version-1 store is read as it is. Runs on
 * Deno's KV and, under Bun and Node, on npm `@deno/kv`.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenoKvJobStore } from "../src/backlog/deno_kv/job_store.ts";
import { planJob } from "../src/lifecycle/job_options.ts";
import { newRecord } from "../src/lifecycle/job_record.ts";
import { QueueConflictError, QueueFencedError } from "../src/queue/work_queue.ts";
import type { KvAtomicLike, KvLike } from "../src/queue/deno_kv/port.ts";
import { type QueueFactory, runWorkQueueConformance } from "../src/testing/queue_conformance.ts";
import { SimulatedClock } from "../src/core/clock.ts";
import { kvClient, openKv } from "./fixtures/open_kv.ts";

const CLIENT = kvClient === "deno" ? "Deno.openKv" : "npm @deno/kv";

const memoryKv: QueueFactory = {
  async open() {
    const kv = await openKv(":memory:");
    return {
      queue: new DenoKvJobStore(kv, { prefix: ["conformance"] }),
      reopen: () => new DenoKvJobStore(kv, { prefix: ["conformance"] }),
      close: () => kv.close(),
    };
  },
};

await runWorkQueueConformance(`DenoKvJobStore conformance (${CLIENT}, as a work queue)`, memoryKv, {
  test,
  describe,
});

async function withFile(body: (path: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "workpull-jobstore-"));
  try {
    await body(join(dir, "jobs.kv"));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** A KV handle whose next commits can fail after applying. */
function lossy(kv: KvLike): KvLike & { loseNext: number; commits: number } {
  const wrapper = {
    loseNext: 0,
    commits: 0,
    getMany: kv.getMany.bind(kv),
    list: kv.list.bind(kv),
    atomic(): KvAtomicLike {
      const op = kv.atomic();
      const atomic: KvAtomicLike = {
        check: (...checks) => (op.check(...checks), atomic),
        set: (key, value, options) => (op.set(key, value, options), atomic),
        delete: (key) => (op.delete(key), atomic),
        async commit() {
          wrapper.commits += 1;
          const result = await op.commit();
          if (wrapper.loseNext > 0) {
            wrapper.loseNext -= 1;
            throw new Error("connection reset after the write");
          }
          return result;
        },
      };
      return atomic;
    },
  };
  return wrapper;
}

/** Every key under `prefix` as text, in key order (numbers are slots, strings MessageIDs). */
async function keysUnder(kv: Deno.Kv, prefix: Deno.KvKey): Promise<string[]> {
  const keys: string[] = [];
  for await (const entry of kv.list({ prefix })) {
    keys.push(entry.key.slice(prefix.length).map((part) => JSON.stringify(part)).join("/"));
  }
  return keys;
}

const encoder = new TextEncoder();
const json = (value: unknown) => encoder.encode(JSON.stringify(value));

describe(`DenoKvJobStore (${CLIENT})`, () => {
  test("the backlog, job states, tries and dead letters survive a reopen", async () => {
    await withFile(async (path) => {
      const clock = new SimulatedClock();
      clock.advance(1_000_000);
      const defaults = { attempts: 2, backoff: { type: "fixed", delay: 0 } } as const;
      let kv = await openKv(path);
      let store = new DenoKvJobStore(kv, { clock, defaults });
      let { epoch } = await store.load();
      const plan = (options = {}) => planJob(options, clock.now());
      await store.enqueue([
        { id: "later", payload: '"l"', plan: plan({ delay: 5_000 }) },
        { id: "low", payload: '"a"', plan: plan({ priority: -1 }) },
        {
          id: "high",
          payload: '{"big":"' + "x".repeat(150_000) + '"}',
          plan: plan({ priority: 3 }),
        },
        { id: "poison", payload: '"p"', plan: plan({ priority: 2 }) },
        { id: "done", payload: '"d"', plan: plan({ priority: 1 }) },
      ]);
      // Run "poison" once (it fails) and "done" to completion.
      const taken = await store.take(3);
      assert.deepEqual(taken.map((job) => job.messageId), ["high", "poison", "done"]);
      const stored = await store.commit(epoch, {
        store: {
          firstSeq: 1,
          jobs: taken.slice(1).map(({ messageId, payload }) => ({ messageId, payload })),
        },
        accept: ["poison", "done"],
      });
      assert.deepEqual(stored.stored.map((r) => r.seq), [1, 2]);
      await store.commit(epoch, {
        confirm: ["poison", "done"],
        outcomes: new Map([
          ["poison", { kind: "failed", error: { name: "Error", message: "boom" } }],
          ["done", { kind: "completed", result: '{"ok":true}' }],
        ]),
      });
      store.close();
      kv.close();

      kv = await openKv(path);
      store = new DenoKvJobStore(kv, { clock, defaults });
      ({ epoch } = await store.load());
      // Finished jobs are read after the load: until then they are looked up.
      const resubmitted = await store.enqueue([{ id: "done", payload: '"d"', plan: plan() }]);
      assert.deepEqual([resubmitted[0].created, resubmitted[0].job.state], [false, "completed"]);
      assert.deepEqual((await store.get("done"))?.result, { ok: true });
      assert.deepEqual(
        [(await store.get("poison"))?.state, (await store.get("poison"))?.attempts],
        [
          "failed",
          1,
        ],
      );
      assert.equal((await store.get("later"))?.state, "scheduled");
      assert.deepEqual(store.counts(), { waiting: 2, scheduled: 1, failed: 1, active: 0, dead: 0 });
      // "high" was taken but never stored: it waits again, in its place, with its large payload.
      const again = await store.take(10);
      assert.deepEqual(again.map((job) => job.messageId), ["high", "poison", "low"]);
      assert.equal(JSON.parse(again[0].payload).big.length, 150_000);
      assert.equal(again[1].attempt, 2, "the second try of poison");
      await store.commit(epoch, {
        store: { firstSeq: 3, jobs: [{ messageId: "poison", payload: '"p"' }] },
        accept: ["poison"],
      });
      await store.confirmMessage(epoch, "poison", {
        outcome: { kind: "failed", error: { name: "Error", message: "boom again" } },
      });
      store.close();
      kv.close();

      kv = await openKv(path);
      store = new DenoKvJobStore(kv, { clock, defaults });
      await store.load();
      const dead = await store.deadLetters(10);
      assert.deepEqual(dead.jobs.map((job) => [job.id, job.attempts, job.error?.message]), [
        ["poison", 2, "boom again"],
      ]);
      store.close();
      kv.close();
    });
  });

  test("a newer load fences the store that loaded earlier", async () => {
    const kv = await openKv(":memory:");
    try {
      const first = new DenoKvJobStore(kv, { prefix: ["fence"] });
      const { epoch } = await first.load();
      const second = new DenoKvJobStore(kv, { prefix: ["fence"] });
      await second.load();
      const job = { id: "a", payload: "1", plan: planJob({}, first.clock.now()) };
      await assert.rejects(first.enqueue([job]), QueueFencedError);
      await assert.rejects(
        first.store(epoch, { messageId: "b", proposedSeq: 1, payload: "2" }),
        QueueFencedError,
      );
      assert.equal((await second.enqueue([job]))[0].created, true, "nothing of the fenced writes");
    } finally {
      kv.close();
    }
  });

  test("a write whose answer was lost is healed by a re-read; nothing is lost or doubled", async () => {
    const kv = await openKv(":memory:");
    try {
      const handle = lossy(kv as unknown as KvLike);
      const store = new DenoKvJobStore(handle, { prefix: ["lossy"] });
      const { epoch } = await store.load();
      const plan = planJob({}, Date.now());
      handle.loseNext = 1;
      await assert.rejects(store.enqueue([{ id: "a", payload: "1", plan }]), /connection reset/);
      const retried = await store.enqueue([{ id: "a", payload: "1", plan }]);
      assert.equal(retried[0].created, false, "the first write had landed");
      const [job] = await store.take(1);
      handle.loseNext = 1;
      const request = { messageId: job.messageId, proposedSeq: 1, payload: job.payload };
      await assert.rejects(store.store(epoch, request), /connection reset/);
      const repeat = await store.store(epoch, request);
      assert.deepEqual([repeat.seq, repeat.alreadyStored], [1, true]);
      assert.equal((await store.get("a"))?.attempts, 1, "one try, not two");
    } finally {
      kv.close();
    }
  });

  test("calls made together share one commit; a failed one fails them all, and nothing is lost", async () => {
    const kv = await openKv(":memory:");
    try {
      const handle = lossy(kv as unknown as KvLike);
      const store = new DenoKvJobStore(handle, { prefix: ["group"], maxBacklog: 4 });
      await store.load();
      const plan = planJob({}, Date.now());
      const add = (...ids: string[]) =>
        store.enqueue(ids.map((id) => ({ id, payload: "1", plan })));
      let before = handle.commits;
      // The middle call does not fit the backlog: it fails alone, the others are written.
      const [a, tooMany, b] = await Promise.allSettled([
        add("a"),
        add("w", "x", "y", "z"),
        add("b"),
      ]);
      assert.equal(handle.commits - before, 1, "one commit for the group");
      assert.deepEqual([a.status, tooMany.status, b.status], [
        "fulfilled",
        "rejected",
        "fulfilled",
      ]);
      handle.loseNext = 1;
      before = handle.commits;
      const lost = await Promise.allSettled([add("c"), add("d")]);
      assert.equal(handle.commits - before, 1);
      assert.deepEqual(lost.map((result) => result.status), ["rejected", "rejected"]);
      // The store re-read the journal: the lost answer's jobs had landed, and are known once.
      const again = await Promise.all([add("c"), add("d"), add("a")]);
      assert.deepEqual(again.map(([result]) => result.created), [false, false, false]);
      const reopened = new DenoKvJobStore(kv, { prefix: ["group"] });
      await reopened.load();
      assert.equal(reopened.counts().waiting, 4);
    } finally {
      kv.close();
    }
  });

  test("a batch too large for one commit is written in several", async () => {
    const kv = await openKv(":memory:");
    try {
      const store = new DenoKvJobStore(kv, { prefix: ["big"] });
      await store.load();
      const plan = planJob({}, Date.now());
      const jobs = Array.from({ length: 1500 }, (_, i) => ({
        id: `j${i}`,
        payload: JSON.stringify("y".repeat(1000)),
        plan,
      }));
      await store.enqueue(jobs);
      const reopened = new DenoKvJobStore(kv, { prefix: ["big"] });
      await reopened.load();
      assert.equal(reopened.counts().waiting, 1500);
    } finally {
      kv.close();
    }
  });

  test("a job's keys are numbered in write order, not by its MessageID", async () => {
    const kv = await openKv(":memory:");
    try {
      const clock = new SimulatedClock();
      const store = new DenoKvJobStore(kv, { prefix: ["slots"], clock });
      const { epoch } = await store.load();
      const plan = planJob({}, clock.now());
      const big = JSON.stringify("b".repeat(20_000)); // larger than a value keeps inline
      await store.enqueue([
        ...["zeta", "alpha", "mid"].map((id) => ({ id, payload: `"${id}"`, plan })),
        { id: "big", payload: big, plan },
      ]);
      assert.deepEqual(await keysUnder(kv, ["slots", "job"]), ["1", "2", "3", "4"]);
      assert.deepEqual(await keysUnder(kv, ["slots", "payload"]), ["4/0"], "small ones inline");
      const [meta] = await kv.getMany([["slots", "meta"]]);
      assert.deepEqual(JSON.parse(new TextDecoder().decode(meta.value as Uint8Array)).v, 2);
      // "zeta" runs to completion: its record moves to a record of the jobs that commit finished.
      const [zeta] = await store.take(1);
      assert.equal(zeta.messageId, "zeta");
      await store.commit(epoch, {
        store: { firstSeq: 1, jobs: [{ messageId: "zeta", payload: zeta.payload }] },
        accept: ["zeta"],
      });
      await store.confirmMessage(epoch, "zeta", { outcome: { kind: "completed" } });
      assert.deepEqual(await keysUnder(kv, ["slots", "finished"]), ["1"]);
      assert.deepEqual(await keysUnder(kv, ["slots", "job"]), ["2", "3", "4"]);
      store.close();

      // A reload counts on after every slot in use: the next job gets 5.
      const reopened = new DenoKvJobStore(kv, { prefix: ["slots"], clock });
      const { epoch: next } = await reopened.load();
      await reopened.enqueue([{ id: "new", payload: '"n"', plan }]);
      assert.deepEqual(await keysUnder(kv, ["slots", "job"]), ["2", "3", "4", "5"]);
      assert.equal((await reopened.get("zeta"))?.state, "completed");
      const again = await reopened.enqueue([{ id: "zeta", payload: '"z"', plan }]);
      assert.equal(again[0].created, false, "the finished job is found by its MessageID");
      // Payloads, inline or in parts, read back as they were; a finished job's parts go.
      const taken = await reopened.take(4);
      assert.deepEqual(
        taken.map((job) => [job.messageId, job.payload]),
        [["alpha", '"alpha"'], ["mid", '"mid"'], ["big", big], ["new", '"n"']],
      );
      await reopened.commit(next, {
        store: {
          firstSeq: 2,
          jobs: taken.map(({ messageId, payload }) => ({ messageId, payload })),
        },
      });
      await reopened.commit(next, { confirm: taken.map((job) => job.messageId) });
      assert.deepEqual(await keysUnder(kv, ["slots", "job"]), []);
      assert.deepEqual(await keysUnder(kv, ["slots", "payload"]), []);
      assert.deepEqual(await keysUnder(kv, ["slots", "finished"]), ["1", "2"]);
      reopened.close();
    } finally {
      kv.close();
    }
  });

  test("a store written by format version 1 (keyed by MessageID) is read and written as it is", async () => {
    const kv = await openKv(":memory:");
    try {
      const clock = new SimulatedClock();
      const plan = planJob({}, clock.now());
      // What version 1 wrote: a waiting job, a finished one, and the meta record.
      const waiting = newRecord("old-waiting", plan, clock.now());
      const done = {
        ...newRecord("old-done", plan, clock.now()),
        state: "completed",
        attempts: 1,
        finishedAt: clock.now(),
      };
      await kv.atomic()
        .set(["v1", "meta"], json({ v: 1, seq: 7 }))
        .set(["v1", "job", "old-waiting"], json({ r: waiting, o: 1 }))
        .set(["v1", "payload", "old-waiting", 0], json({ n: 1 }))
        .set(["v1", "done", "old-done"], json({ r: done }))
        .commit();
      const store = new DenoKvJobStore(kv, { prefix: ["v1"], clock });
      const { epoch } = await store.load();
      const resubmitted = await store.enqueue([{ id: "old-done", payload: "1", plan }]);
      assert.deepEqual([resubmitted[0].created, resubmitted[0].job.state], [false, "completed"]);
      await store.enqueue([{ id: "new", payload: '"n"', plan }]);
      assert.deepEqual(await keysUnder(kv, ["v1", "job"]), ['"old-waiting"', "1"]);
      const [meta] = await kv.getMany([["v1", "meta"]]);
      assert.deepEqual(JSON.parse(new TextDecoder().decode(meta.value as Uint8Array)), {
        v: 2,
        seq: 7,
      });
      // The old job runs and completes under its old keys.
      const [job] = await store.take(1);
      assert.deepEqual([job.messageId, JSON.parse(job.payload)], ["old-waiting", { n: 1 }]);
      await store.commit(epoch, {
        store: { firstSeq: 8, jobs: [{ messageId: job.messageId, payload: job.payload }] },
        accept: [job.messageId],
      });
      await store.confirmMessage(epoch, job.messageId, { outcome: { kind: "completed" } });
      assert.deepEqual(await keysUnder(kv, ["v1", "job"]), ["1"]);
      assert.deepEqual(await keysUnder(kv, ["v1", "payload"]), [], "the old part went");
      assert.deepEqual(await keysUnder(kv, ["v1", "done"]), ['"old-done"']);
      assert.deepEqual(await keysUnder(kv, ["v1", "finished"]), ["1"]);
      store.close();
    } finally {
      kv.close();
    }
  });

  test("a store a newer version wrote is refused by name", async () => {
    const kv = await openKv(":memory:");
    try {
      await kv.set(["v9", "meta"], json({ v: 9, seq: 0 }));
      const store = new DenoKvJobStore(kv, { prefix: ["v9"] });
      await assert.rejects(store.load(), (error: unknown) => {
        assert.ok(error instanceof QueueConflictError);
        assert.match(error.message, /a newer workpull wrote it \(format version 9/);
        return true;
      });
    } finally {
      kv.close();
    }
  });

  test("after a write whose answer was lost, finished jobs are still known", async () => {
    const kv = await openKv(":memory:");
    try {
      const handle = lossy(kv as unknown as KvLike);
      const store = new DenoKvJobStore(handle, { prefix: ["healed"] });
      const { epoch } = await store.load();
      const plan = planJob({}, Date.now());
      await store.enqueue([{ id: "done", payload: "1", plan }]);
      const [job] = await store.take(1);
      await store.commit(epoch, {
        store: { firstSeq: 1, jobs: [{ messageId: "done", payload: job.payload }] },
        accept: ["done"],
      });
      await store.confirmMessage(epoch, "done", { outcome: { kind: "completed" } });
      handle.loseNext = 1;
      await assert.rejects(store.enqueue([{ id: "b", payload: "2", plan }]), /connection reset/);
      const again = await store.enqueue([{ id: "done", payload: "1", plan }]);
      assert.deepEqual([again[0].created, again[0].job.state], [false, "completed"]);
      assert.deepEqual(await keysUnder(kv, ["healed", "job"]), ["2"], "b landed once, in slot 2");
    } finally {
      kv.close();
    }
  });

  test("tries started from the backlog are one record, not a rewrite of each job", async () => {
    const kv = await openKv(":memory:");
    try {
      const clock = new SimulatedClock();
      clock.advance(1_000_000);
      const defaults = { attempts: 3, backoff: { type: "fixed", delay: 0 } } as const;
      let store = new DenoKvJobStore(kv, { prefix: ["tries"], clock, defaults });
      let { epoch } = await store.load();
      const plan = planJob({}, clock.now());
      await store.enqueue(["a", "b", "c"].map((id) => ({ id, payload: `"${id}"`, plan })));
      const jobValues = async () => {
        const values: string[] = [];
        for await (const entry of kv.list({ prefix: ["tries", "job"] })) {
          values.push(new TextDecoder().decode(entry.value as Uint8Array));
        }
        return values;
      };
      const before = await jobValues();
      const taken = await store.take(3);
      clock.advance(5);
      await store.commit(epoch, {
        store: {
          firstSeq: 1,
          jobs: taken.map(({ messageId, payload }) => ({ messageId, payload })),
        },
      });
      assert.deepEqual(await jobValues(), before, "the jobs' values are not rewritten");
      assert.deepEqual(await keysUnder(kv, ["tries", "try"]), ["1"]);
      // "a" fails (its record is rewritten: it leaves the try); "b" completes.
      await store.commit(epoch, {
        confirm: ["a", "b"],
        outcomes: new Map([["a", { kind: "failed", error: { name: "Error", message: "x" } }]]),
      });
      assert.deepEqual(await keysUnder(kv, ["tries", "try"]), ["1"], "c is still in it");
      // "a" starts its second try in a record of its own.
      const [again] = await store.take(1);
      assert.deepEqual([again.messageId, again.attempt], ["a", 2]);
      await store.commit(epoch, {
        store: { firstSeq: 4, jobs: [{ messageId: "a", payload: again.payload }] },
      });
      assert.deepEqual(await keysUnder(kv, ["tries", "try"]), ["1", "4"]);
      store.close();

      // A reload (as after a crash) finds both tries in progress, with their sequences.
      store = new DenoKvJobStore(kv, { prefix: ["tries"], clock, defaults });
      const loaded = await store.load();
      epoch = loaded.epoch;
      assert.deepEqual(
        loaded.state.unconfirmed.map((job) => [job.messageId, job.seq, job.attempt]),
        [["c", 3, 1], ["a", 4, 2]],
      );
      const info = await store.get("a");
      assert.deepEqual([info?.state, info?.attempts], ["active", 2]);
      assert.equal((await store.get("c"))?.startedAt, 1_000_005);
      assert.equal((await store.get("b"))?.state, "completed");
      // Their confirmations end the tries; the last job to leave a record deletes it.
      await store.commit(epoch, { confirm: ["c"] });
      assert.deepEqual(await keysUnder(kv, ["tries", "try"]), ["4"]);
      await store.commit(epoch, { confirm: ["a"] });
      assert.deepEqual(await keysUnder(kv, ["tries", "try"]), []);
      assert.deepEqual(await keysUnder(kv, ["tries", "job"]), []);
      assert.deepEqual(store.counts(), { waiting: 0, scheduled: 0, failed: 0, active: 0, dead: 0 });
      store.close();
    } finally {
      kv.close();
    }
  });

  test("the jobs a commit finishes are one record; the last of them to be forgotten deletes it", async () => {
    const kv = await openKv(":memory:");
    try {
      const clock = new SimulatedClock();
      const open = () => new DenoKvJobStore(kv, { prefix: ["ring"], clock, retainedJobs: 3 });
      let store = open();
      const { epoch } = await store.load();
      const ids = ["a", "b", "c", "d", "e", "f"];
      const plan = planJob({}, clock.now());
      await store.enqueue(ids.map((id) => ({ id, payload: `"${id}"`, plan })));
      const taken = await store.take(6);
      await store.commit(epoch, {
        store: {
          firstSeq: 1,
          jobs: taken.map(({ messageId, payload }) => ({ messageId, payload })),
        },
      });
      const finish = async (confirm: string[]) => {
        clock.advance(1);
        await store.commit(epoch, { confirm });
        return await keysUnder(kv, ["ring", "finished"]);
      };
      assert.deepEqual(await finish(["a", "b", "c"]), ["1"]);
      // Three are retained: "a" and "b" are forgotten without a write; "c" keeps record 1.
      assert.deepEqual(await finish(["d", "e"]), ["1", "2"]);
      assert.deepEqual(await finish(["f"]), ["2", "3"], "record 1 went with c");
      assert.deepEqual(await keysUnder(kv, ["ring", "job"]), []);
      const states = async () =>
        await Promise.all(ids.map(async (id) => (await store.get(id))?.state));
      const expected = [undefined, undefined, undefined, "completed", "completed", "completed"];
      assert.deepEqual(await states(), expected);
      store.close();

      // A reload reads them back, and a forgotten one submitted again is a new job.
      store = open();
      await store.load();
      assert.deepEqual(await states(), expected);
      const [again] = await store.enqueue([{ id: "c", payload: '"c"', plan }]);
      assert.deepEqual([again.created, again.job.state], [true, "waiting"]);
      store.close();
    } finally {
      kv.close();
    }
  });
});
