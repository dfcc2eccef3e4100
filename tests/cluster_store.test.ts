/**
 * The shared mode of the Deno KV job store, several instances on one KV in one process: the
 * work-queue contract of one instance (the conformance suite), claims that never hand a job to
 * two instances, fencing, takeover (two survivors racing: one wins), lost-instance accounting,
 * cancel across instances, the backlog bound across the flow, dead letters from any instance,
 * and a graceful leave. Time is a simulated wall clock with no timers: the tests run the lease
 * rounds themselves (`store.renew()`). Runs on Deno's KV and, under Bun and Node, on npm
 * `@deno/kv`.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BacklogFullError,
  connectInProcess,
  type JobInfo,
  JobQueue,
  WorkerEndpoint,
} from "../mod.ts";
import {
  type ClusterKvLike,
  DenoKvClusterStore,
  type DenoKvClusterStoreOptions,
  DenoKvJobStore,
  DenoKvWorkQueue,
  type TakeoverEvent,
} from "../deno_kv.ts";
import { planJob } from "../src/lifecycle/job_options.ts";
import { QueueConflictError, QueueFencedError } from "../src/queue/work_queue.ts";
import type { ControllerStats } from "../src/controller/controller.ts";
import { type QueueFactory, runWorkQueueConformance } from "../src/testing/queue_conformance.ts";
import { type Clock, SimulatedClock } from "../src/core/clock.ts";
import { decodeLease } from "../src/cluster/codec.ts";
import { createWorkpullApp, signToken } from "../server.ts";
import { kvClient, openKv } from "./fixtures/open_kv.ts";
import { RemoteKv } from "../testing.ts";
import { waitFor } from "./support/waiting.ts";
import { ManualClock } from "./support/manual_clock.ts";

const CLIENT = kvClient === "deno" ? "Deno.openKv" : "npm @deno/kv";

const conformance: QueueFactory = {
  async open() {
    const kv = await openKv(":memory:");
    const clock = new ManualClock();
    const options = { prefix: ["conformance"], clock, instance: { id: "i1" } };
    const stores = [new DenoKvClusterStore(kv, options)];
    return {
      queue: stores[0],
      reopen: () => {
        stores.push(new DenoKvClusterStore(kv, options));
        return stores.at(-1)!;
      },
      async corrupt() {
        await kv.set(["conformance", "owned", "i1", "x"], new Uint8Array(0));
        await kv.set(["conformance", "record", "x"], new TextEncoder().encode("{not json"));
      },
      close() {
        for (const store of stores) store.close();
        kv.close();
      },
    };
  },
};

await runWorkQueueConformance(
  `DenoKvClusterStore conformance (${CLIENT}, one instance as a work queue)`,
  conformance,
  { test, describe },
);

/** Instances of one shared flow on one in-memory KV. */
async function flow(
  ids: readonly string[],
  options: Omit<DenoKvClusterStoreOptions, "clock" | "prefix" | "instance"> = {},
) {
  const kv = await openKv(":memory:");
  const clock = new ManualClock();
  const stores = ids.map((id) =>
    new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
      ...options,
      prefix: ["flow"],
      clock,
      instance: { id, leaseTtl: 1000 },
    })
  );
  const epochs = await Promise.all(stores.map(async (store) => (await store.load()).epoch));
  await Promise.all(stores.map((store) => store.renew())); // the round each load started
  const plan = (o = {}) => planJob(o, clock.now());
  const jobs = (prefix: string, n: number, o = {}) =>
    Array.from({ length: n }, (_, i) => ({ id: `${prefix}${i}`, payload: `${i}`, plan: plan(o) }));
  return {
    kv,
    clock,
    stores,
    epochs,
    plan,
    jobs,
    /** Start tries of `ids` at store `i` (store and accept them). */
    async start(i: number, ids: readonly string[], firstSeq = 1) {
      return await stores[i].commit(epochs[i], {
        store: { firstSeq, jobs: ids.map((messageId) => ({ messageId, payload: "0" })) },
        accept: [...ids],
      });
    },
    close() {
      for (const store of stores) store.close();
      kv.close();
    },
  };
}

/** `local` behind a `RemoteKv` without latency whose `n`th commit from `loseAnswer(n)` on lands
 * but loses its answer. */
function answerLost(local: unknown) {
  let commits = 0, failAt = Infinity;
  const kv = new RemoteKv(local as never, {
    commitLatency: 0,
    readLatency: 0,
    faults: () => ++commits === failAt ? "lost-answer" : undefined,
  });
  return { kv, loseAnswer: (n: number) => void (failAt = commits + n) };
}

describe(`DenoKvClusterStore (${CLIENT})`, () => {
  test("renew() during a lease round runs one more round, which counts what changed since", async () => {
    const kv = await openKv(":memory:");
    const counter = JSON.stringify(["flow", "count", "waiting"]);
    // Armed, the next read of the counters returns what it read only once the gate opens: the
    // lease round in flight has its counts, taken before the job added below.
    let armed = false;
    let reached!: () => void;
    const reading = new Promise<void>((resolve) => reached = resolve);
    let open!: () => void;
    const gate = new Promise<void>((resolve) => open = resolve);
    const gated = {
      atomic: kv.atomic.bind(kv),
      list: kv.list.bind(kv),
      async getMany(keys: Deno.KvKey[]) {
        const entries = await kv.getMany(keys);
        if (armed && keys.some((key) => JSON.stringify(key) === counter)) {
          armed = false;
          reached();
          await gate;
        }
        return entries;
      },
    };
    const clock = new ManualClock();
    const store = new DenoKvClusterStore(gated as unknown as ClusterKvLike, {
      prefix: ["flow"],
      clock,
      instance: { id: "a", leaseTtl: 1000 },
    });
    try {
      await store.load();
      await store.renew();
      const job = (id: string) => ({ id, payload: "0", plan: planJob({}, clock.now()) });
      await store.enqueue([job("x")]);
      armed = true;
      const first = store.renew();
      await reading;
      await store.enqueue([job("y")]);
      const second = store.renew();
      assert.notEqual(second, first, "a round that read before the change is not enough");
      open();
      await first;
      assert.equal(store.counts().waiting, 1, "the first round counted before y");
      await second;
      assert.equal(store.counts().waiting, 2);
      const third = store.renew(); // none in flight: starts one
      const [fourth, fifth] = [store.renew(), store.renew()];
      assert.equal(fourth, fifth, "callers during one round share the next");
      await Promise.all([third, fourth]);
    } finally {
      open();
      store.close();
      kv.close();
    }
  });

  test("concurrent claims by three instances hand each job to exactly one of them", async () => {
    const f = await flow(["a", "b", "c"]);
    try {
      await f.stores[0].enqueue(f.jobs("j", 300));
      await Promise.all(f.stores.map((store) => store.renew()));
      const taken = await Promise.all(
        f.stores.flatMap((store) => [store.take(40), store.take(40), store.take(40)]),
      );
      const ids = taken.flat().map((job) => job.messageId);
      assert.equal(new Set(ids).size, ids.length, "no job handed out twice");
      const rest = await Promise.all(f.stores.map((store) => store.take(300)));
      const all = [...ids, ...rest.flat().map((job) => job.messageId)];
      assert.equal(all.length, 300, "every job claimed once in the end");
      assert.equal(new Set(all).size, 300);
      assert.deepEqual(await f.stores[1].take(10), [], "nothing is left");
    } finally {
      f.close();
    }
  });

  test("a job claimed from the backlog is stored accepted; one from elsewhere is not", async () => {
    const f = await flow(["a"]);
    try {
      await f.stores[0].enqueue(f.jobs("j", 1));
      assert.deepEqual((await f.stores[0].take(10)).map((job) => job.messageId), ["j0"]);
      const { stored } = await f.stores[0].commit(f.epochs[0], {
        store: {
          firstSeq: 1,
          jobs: [{ messageId: "j0", payload: "0" }, { messageId: "x", payload: "1" }],
        },
      });
      assert.deepEqual(stored.map((result) => result.accepted), [true, undefined]);
    } finally {
      f.close();
    }
  });

  test("claimed tries start in one tries record; the owned index and it shrink later", async () => {
    const f = await flow(["a"]);
    const keysUnder = async (...path: string[]) => {
      const found: unknown[][] = [];
      for await (const entry of f.kv.list({ prefix: ["flow", ...path] })) {
        found.push(entry.key.slice(1 + path.length) as unknown[]);
      }
      return found;
    };
    try {
      await f.stores[0].enqueue(f.jobs("j", 3));
      const ids = (await f.stores[0].take(3)).map((job) => job.messageId);
      assert.equal((await keysUnder("owned", "a")).length, 1, "one owned list for the claim");
      await f.start(0, ids);
      assert.equal((await keysUnder("tries", "a")).length, 1, "one tries record for the unit");
      const record = await f.kv.get(["flow", "record", "j0"]);
      const stored = JSON.parse(new TextDecoder().decode(record.value as Uint8Array));
      assert.deepEqual([stored.w, stored.t], ["a", undefined], "the record stays as claimed");
      const running = await f.stores[0].get("j0");
      assert.deepEqual([running?.state, running?.attempts], ["active", 1], "get sees the try");
      await f.stores[0].commit(f.epochs[0], { confirm: ids });
      assert.equal((await f.stores[0].get("j0"))?.state, "completed");
      assert.equal((await keysUnder("tries", "a")).length, 1, "not yet: a later commit removes it");
      await f.stores[0].enqueue(f.jobs("k", 1));
      const [next] = await f.stores[0].take(1);
      await f.start(0, [next.messageId], 4);
      assert.deepEqual(
        (await keysUnder("owned", "a")).length,
        1,
        "the first claim's list is gone, the new one's is there",
      );
      assert.equal((await keysUnder("tries", "a")).length, 1, "only the new unit's record");
    } finally {
      f.close();
    }
  });

  test("an instance whose workers all left claims nothing and gives back what it claimed ahead", async () => {
    const f = await flow(["a", "b"]);
    try {
      let workers = [{ connected: true }];
      f.stores[0].listen({
        ready() {},
        changed() {},
        stats: () => ({ workers }) as unknown as ControllerStats,
      });
      await f.stores[0].enqueue(f.jobs("j", 10));
      const handed = await f.stores[0].take(2); // all it asked for: 2 more are claimed ahead
      assert.equal(handed.length, 2);
      workers = [];
      assert.deepEqual(await f.stores[0].take(5), [], "no worker here: nothing claimed");
      const others = await f.stores[1].take(10);
      assert.equal(others.length, 8, "b gets all but the 2 a handed out, once ahead-claimed too");
    } finally {
      f.close();
    }
  });

  test("a take whose claim round fails still hands out what it took from the lookahead", async () => {
    const local = await openKv(":memory:");
    const { kv, loseAnswer } = answerLost(local);
    const clock = new ManualClock();
    const store = new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
      prefix: ["flow"],
      clock,
      instance: { id: "a", leaseTtl: 1000 },
    });
    try {
      await store.load();
      const ids = Array.from({ length: 12 }, (_, i) => `j${i}`);
      await store.enqueue(ids.map((id) => ({ id, payload: "0", plan: planJob({}, clock.now()) })));
      // take(4) claims 4 (one commit), then 4 ahead (a second); take(8) hands out those 4 and
      // claims 4 more: that third commit lands, but its answer is lost.
      loseAnswer(3);
      const taken = new Set((await store.take(4)).map((job) => job.messageId));
      for (const job of await store.take(8)) taken.add(job.messageId);
      assert.equal(taken.size, 8, "the 4 claimed ahead are handed out despite the failure");
      for (let i = 0; i < 3; i++) {
        for (const job of await store.take(12)) taken.add(job.messageId);
      }
      assert.deepEqual(ids.filter((id) => !taken.has(id)), [], "every job handed out");
    } finally {
      store.close();
      kv.close();
    }
  });

  test("a takeover whose last commit's answer is lost is reported once it is done", async () => {
    const local = await openKv(":memory:");
    const { kv: faulty, loseAnswer } = answerLost(local);
    const clock = new ManualClock();
    const open = (kv: unknown, id: string) =>
      new DenoKvClusterStore(kv as ClusterKvLike, {
        prefix: ["flow"],
        clock,
        instance: { id, leaseTtl: 1000 },
      });
    const [dead, survivor] = [open(local, "dead"), open(faulty, "survivor")];
    try {
      await dead.load();
      await survivor.load();
      await dead.enqueue(
        ["j1", "j2"].map((id) => ({ id, payload: "0", plan: planJob({}, clock.now()) })),
      );
      assert.equal((await dead.take(2)).length, 2);
      const takeovers: TakeoverEvent[] = [];
      survivor.addEventListener("takeover", (event) => takeovers.push(event));
      clock.advance(600);
      await survivor.renew(); // the dead instance renews no more
      clock.advance(600); // its lease lapsed; the survivor's did not
      // The round's commits: the survivor's renewal, the bump of the dead one's fence, and the
      // jobs' return with the lease's retirement, whose answer is lost.
      loseAnswer(3);
      await survivor.renew();
      assert.deepEqual(takeovers.map((e) => [e.takeover.instance, e.takeover.jobs]), [["dead", 2]]);
      assert.equal((await survivor.take(5)).length, 2, "both jobs came back");
    } finally {
      dead.close();
      survivor.close();
      local.close();
    }
  });

  test("claims follow priority, then due time, then submission; a delayed job waits", async () => {
    const f = await flow(["a", "b"]);
    try {
      await f.stores[0].enqueue([
        { id: "low", payload: "1", plan: f.plan({ priority: -3 }) },
        { id: "first", payload: "1", plan: f.plan() },
        { id: "later", payload: "1", plan: f.plan({ delay: 5000 }) },
        { id: "urgent", payload: "1", plan: f.plan({ priority: 7 }) },
        { id: "second", payload: "1", plan: f.plan() },
      ]);
      const taken = await f.stores[1].take(10);
      assert.deepEqual(taken.map((job) => job.messageId), ["urgent", "first", "second", "low"]);
      f.clock.advance(5000);
      await f.stores[1].renew(); // its lease lapsed meanwhile: it claims nothing until renewed
      assert.deepEqual((await f.stores[1].take(10)).map((job) => job.messageId), ["later"]);
    } finally {
      f.close();
    }
  });

  test("a job's try, its outcome and its retry go through the shared backlog", async () => {
    const f = await flow(["a", "b"], {
      defaults: { attempts: 2, backoff: { type: "fixed", delay: 1000 } },
    });
    try {
      await f.stores[0].enqueue([{ id: "j", payload: '{"x":1}', plan: f.plan() }]);
      const [job] = await f.stores[1].take(1);
      assert.deepEqual([job.messageId, job.payload, job.attempt], ["j", '{"x":1}', 1]);
      await f.start(1, ["j"]);
      assert.equal((await f.stores[0].get("j"))?.state, "active");
      await f.stores[1].confirmMessage(f.epochs[1], "j", {
        outcome: { kind: "failed", error: { name: "Error", message: "boom" } },
      });
      const failed = await f.stores[0].get("j");
      assert.deepEqual([failed?.state, failed?.attempts], ["failed", 1]);
      assert.deepEqual(await f.stores[0].take(1), [], "not before its backoff");
      f.clock.advance(1000);
      const [again] = await f.stores[0].take(1);
      assert.equal(again.attempt, 2);
      await f.start(0, ["j"]);
      await f.stores[0].confirmMessage(f.epochs[0], "j", {
        outcome: { kind: "completed", result: "42" },
      });
      const done = await f.stores[1].get("j");
      assert.deepEqual([done?.state, done?.result, done?.attempts], ["completed", 42, 2]);
      await f.stores[1].renew();
      assert.deepEqual(f.stores[1].counts(), {
        waiting: 0,
        scheduled: 0,
        failed: 0,
        active: 0,
        dead: 0,
      });
      const resubmitted = await f.stores[1].enqueue([{ id: "j", payload: "2", plan: f.plan() }]);
      assert.equal(resubmitted[0].created, false, "a finished job is known while retained");
    } finally {
      f.close();
    }
  });

  test("two survivors race to take over a dead instance: exactly one wins, each job comes back once", async () => {
    const f = await flow(["a", "b", "c"]);
    try {
      await f.stores[0].enqueue(f.jobs("j", 30));
      const held = (await f.stores[2].take(30)).map((job) => job.messageId);
      assert.equal(held.length, 30);
      await f.start(2, held.slice(0, 20)); // 20 tries, 10 claims
      const takeovers: TakeoverEvent[] = [];
      for (const store of f.stores) store.addEventListener("takeover", (e) => takeovers.push(e));
      f.clock.advance(500);
      await Promise.all([f.stores[0].renew(), f.stores[1].renew()]); // c does not renew
      f.clock.advance(600); // c's lease (1,000 ms) lapsed; a's and b's did not
      await Promise.all([f.stores[0].renew(), f.stores[1].renew()]);
      assert.equal(
        takeovers.length,
        1,
        `one takeover: ${JSON.stringify(takeovers.map((e) => e.takeover))}`,
      );
      assert.deepEqual(
        [takeovers[0].takeover.instance, takeovers[0].takeover.jobs],
        ["c", 30],
      );
      await f.stores[0].renew();
      assert.equal(f.stores[0].counts().waiting, 30, "every job is waiting again, once");
      assert.equal(f.stores[0].counts().active, 0);
      // a may claim b's share ahead of its next take: between them, they hand out all 30.
      const again = [...await f.stores[0].take(20), ...await f.stores[1].take(20)];
      again.push(...await f.stores[0].take(20), ...await f.stores[1].take(20));
      assert.deepEqual(again.map((job) => job.messageId).sort(), [...held].sort());
      assert.ok(again.every((job) => job.attempt === 1), "a lost instance used up no try");
      assert.deepEqual(
        (await f.stores[0].instances()).map((instance) => instance.id),
        ["a", "b"],
        "its lease is gone from the registry",
      );
    } finally {
      f.close();
    }
  });

  test("an instance taken over is fenced: its writes fail and change nothing, its claims stop", async () => {
    const f = await flow(["a", "b"]);
    try {
      await f.stores[0].enqueue(f.jobs("j", 4));
      const [first, second] = await f.stores[1].take(2);
      await f.start(1, [first.messageId]);
      const fenced: unknown[] = [];
      f.stores[1].listen({
        ready() {},
        changed() {},
        fenced: (error) => fenced.push(error),
      });
      f.clock.advance(500);
      await f.stores[0].renew(); // a renews in time; b does not
      f.clock.advance(600);
      await f.stores[0].renew();
      const late = f.stores[1].commit(f.epochs[1], {
        store: { firstSeq: 2, jobs: [{ messageId: second.messageId, payload: "0" }] },
        confirm: [first.messageId],
      });
      await assert.rejects(late, QueueFencedError);
      assert.equal((await f.stores[0].get(first.messageId))?.state, "waiting", "nothing landed");
      assert.deepEqual(await f.stores[1].take(4), [], "a fenced instance claims nothing");
      await f.stores[1].renew();
      assert.equal(fenced.length, 1, "the owner hears of it once");
      await f.stores[1].renew();
      assert.equal(fenced.length, 1);
      // Loading again (a respawn) makes it an instance again, under a new epoch.
      const { epoch } = await f.stores[1].load();
      assert.ok(epoch > f.epochs[1]);
      assert.equal((await f.stores[1].take(4)).length, 4);
    } finally {
      f.close();
    }
  });

  test("an instance whose own lease lapsed takes nobody over for a TTL after it renews", async () => {
    const f = await flow(["a", "b"]);
    try {
      await f.stores[0].enqueue(f.jobs("j", 2));
      await f.stores[1].take(2);
      f.clock.advance(1500); // both paused (or both held up by a locked KV file)
      const takeovers: TakeoverEvent[] = [];
      f.stores[0].addEventListener("takeover", (event) => takeovers.push(event));
      await f.stores[0].renew();
      assert.deepEqual(takeovers, [], "b may have been held up too");
      await f.stores[1].renew(); // b renews within the TTL: it keeps its jobs
      f.clock.advance(900);
      await f.stores[0].renew();
      await f.stores[1].renew();
      assert.deepEqual(takeovers, []);
      f.clock.advance(700); // b stops renewing; a's restraint is over
      await f.stores[0].renew();
      f.clock.advance(400); // b's lease lapsed 100 ms ago
      await f.stores[0].renew();
      const made = takeovers as TakeoverEvent[]; // narrowed to never by the asserts above
      assert.deepEqual(made.map((event) => [event.takeover.instance, event.takeover.jobs]), [
        ["b", 2],
      ]);
    } finally {
      f.close();
    }
  });

  test("a lease round held up by a slow takeover does not hold up the instance's own renewals", async () => {
    const kv = await openKv(":memory:");
    const clock = new SimulatedClock();
    clock.advance(1_700_000_000_000);
    // The victim renews only when the test says: it never does.
    const still: Clock = { now: () => clock.now(), setTimeout: () => ({ cancel() {} }) };
    let release!: () => void;
    const gate = new Promise<void>((resolve) => (release = resolve));
    let reached!: () => void;
    const atGate = new Promise<void>((resolve) => (reached = resolve));
    const owned = JSON.stringify(["flow", "owned", "c"]);
    // The survivor's KV: listing the victim's jobs (the takeover, after its fence is bumped)
    // waits at the gate, as on a KV busy with other writers.
    const slow = {
      getMany: kv.getMany.bind(kv),
      atomic: kv.atomic.bind(kv),
      list(selector: { prefix?: unknown }, options?: unknown) {
        const inner = () => kv.list(selector as Deno.KvListSelector, options as Deno.KvListOptions);
        if (JSON.stringify(selector.prefix) !== owned) return inner();
        return (async function* () {
          reached();
          await gate;
          yield* inner();
        })();
      },
    };
    const instance = { leaseTtl: 1000, renewInterval: 300 };
    const a = new DenoKvClusterStore(slow as unknown as ClusterKvLike, {
      prefix: ["flow"],
      clock,
      instance: { ...instance, id: "a" },
    });
    const c = new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
      prefix: ["flow"],
      clock: still,
      instance: { ...instance, id: "c" },
    });
    const lease = async (id: string) => {
      const entry = await kv.get(["flow", "lease", id]);
      return entry.value === null ? undefined : decodeLease(entry.value);
    };
    const takeovers: TakeoverEvent[] = [];
    a.addEventListener("takeover", (e) => takeovers.push(e));
    try {
      await c.load();
      await c.enqueue([{ id: "j", payload: "0", plan: planJob({}, clock.now()) }]);
      assert.equal((await c.take(1)).length, 1);
      await a.load();
      await a.renew(); // the round the load started
      // Tick by tick past the victim's lease, then on for twice a's own TTL while a's takeover
      // round waits: every tick still renews a's lease.
      for (let tick = 1; tick <= 10; tick++) {
        clock.advance(300);
        await waitFor(
          async () => (await lease("a"))?.heartbeat === clock.now(),
          `a's renewal at tick ${tick}`,
        );
        assert.ok((await lease("a"))!.expiresAt > clock.now(), "a's lease never lapses");
        await Promise.race([a.renew(), atGate]); // this tick's round is over, or at the gate
      }
      assert.equal((await lease("c"))?.takenOverBy, "a", "a started taking c over");
      assert.equal(takeovers.length, 0, "and is still at it");
      release();
      await waitFor(() => takeovers.length === 1, "the takeover to finish");
      assert.deepEqual([takeovers[0].takeover.instance, takeovers[0].takeover.jobs], ["c", 1]);
    } finally {
      release();
      a.close();
      c.close();
      kv.close();
    }
  });

  test("a job whose instances keep dying ends as a failed try after lostLimit losses", async () => {
    const f = await flow(["survivor", "x1", "x2", "x3"], { defaults: { lostLimit: 2 } });
    try {
      await f.stores[0].enqueue([{ id: "poison", payload: "1", plan: f.plan() }]);
      await f.stores[0].renew();
      for (const [i, victim] of [[1, "x1"], [2, "x2"], [3, "x3"]] as const) {
        const [job] = await f.stores[i].take(1);
        assert.equal(job?.messageId, "poison", `${victim} claims it`);
        await f.start(i, ["poison"]);
        // The victim stops renewing; the others renew every 400 ms; its lease lapses at 1,000.
        for (let step = 0; step < 3; step++) {
          f.clock.advance(400);
          for (const [k, store] of f.stores.entries()) if (k !== i) await store.renew();
        }
        const after = await f.stores[0].get("poison");
        if (i < 3) assert.deepEqual([after?.state, after?.attempts], ["waiting", 0]);
        else {
          assert.deepEqual([after?.state, after?.attempts], ["failed", 1]);
          assert.equal(after?.error?.name, "InstanceLostError");
        }
      }
    } finally {
      f.close();
    }
  });

  test("a restarted instance (same id) gets its tries back; its other claims go back to the backlog", async () => {
    const f = await flow(["a", "b"]);
    try {
      await f.stores[0].enqueue(f.jobs("j", 6));
      const held = (await f.stores[1].take(6)).map((job) => job.messageId);
      await f.start(1, held.slice(0, 3));
      // Stored without an Accept: a job claimed from the backlog needs none.
      await f.stores[1].commit(f.epochs[1], {
        store: { firstSeq: 4, jobs: [{ messageId: held[3], payload: "0" }] },
      });
      const restarted = new DenoKvClusterStore(f.kv as unknown as ClusterKvLike, {
        prefix: ["flow"],
        clock: f.clock,
        instance: { id: "b", leaseTtl: 1000 },
      });
      try {
        const { epoch, state } = await restarted.load();
        assert.ok(epoch > f.epochs[1]);
        assert.deepEqual(state.unconfirmed.map((job) => [job.messageId, job.seq, job.attempt]), [
          [held[0], 1, 1],
          [held[1], 2, 1],
          [held[2], 3, 1],
          [held[3], 4, 1],
        ]);
        assert.equal(state.currentSeq, 4);
        const back = await f.stores[0].take(10);
        assert.deepEqual(back.map((job) => job.messageId).sort(), held.slice(4).sort());
        assert.ok(back.every((job) => job.attempt === 1), "claims went back as they were");
      } finally {
        restarted.close();
      }
    } finally {
      f.close();
    }
  });

  test("leave hands everything back at once and removes the lease", async () => {
    const f = await flow(["a", "b"]);
    try {
      await f.stores[0].enqueue(f.jobs("j", 5));
      const held = await f.stores[1].take(5);
      await f.start(1, held.slice(0, 2).map((job) => job.messageId));
      await f.stores[1].leave();
      assert.deepEqual((await f.stores[0].instances()).map((instance) => instance.id), ["a"]);
      assert.equal((await f.stores[0].take(10)).length, 5);
    } finally {
      f.close();
    }
  });

  test("maxBacklog holds across instances; a known MessageID is created once", async () => {
    const f = await flow(["a", "b"], { maxBacklog: 10 });
    try {
      await f.stores[0].enqueue(f.jobs("j", 6));
      await assert.rejects(f.stores[1].enqueue(f.jobs("k", 5)), BacklogFullError);
      const again = await f.stores[1].enqueue([...f.jobs("j", 6), ...f.jobs("k", 4)]);
      assert.deepEqual(again.map((result) => result.created), [
        ...Array(6).fill(false),
        ...Array(4).fill(true),
      ]);
      const racing = await Promise.all(
        f.stores.map((store) => store.enqueue([{ id: "twin", payload: "1", plan: f.plan() }])),
      ).catch((error) => error);
      assert.ok(racing instanceof BacklogFullError, "the backlog is full now");
      const claimed = await f.stores[0].take(10);
      await assert.rejects(
        f.stores[0].enqueue([{ id: "twin", payload: "1", plan: f.plan() }]),
        BacklogFullError,
        "claimed jobs still count, until their try starts",
      );
      await f.start(0, claimed.map((job) => job.messageId));
      const twins = await Promise.all(
        f.stores.map((store) => store.enqueue([{ id: "twin", payload: "1", plan: f.plan() }])),
      );
      assert.equal(twins.filter(([result]) => result.created).length, 1, "created exactly once");
    } finally {
      f.close();
    }
  });

  test("dead letters are listed, retried and deleted from any instance", async () => {
    const f = await flow(["a", "b"], { defaults: { attempts: 1 } });
    try {
      await f.stores[0].enqueue(f.jobs("d", 3));
      const ids = (await f.stores[1].take(3)).map((job) => job.messageId);
      await f.start(1, ids);
      for (const id of ids) {
        f.clock.advance(1);
        await f.stores[1].confirmMessage(f.epochs[1], id, {
          outcome: { kind: "failed", error: { name: "Error", message: id } },
        });
      }
      const first = await f.stores[0].deadLetters(2);
      assert.deepEqual(first.jobs.map((job) => job.id), ["d0", "d1"]);
      const next = await f.stores[0].deadLetters(2, first.cursor);
      assert.deepEqual(next.jobs.map((job) => job.id), ["d2"]);
      assert.equal(next.cursor, undefined);
      assert.equal((await f.stores[0].retryDead("d1"))?.state, "waiting");
      assert.equal(await f.stores[0].deleteDead("d2"), true);
      assert.equal(await f.stores[0].get("d2"), undefined);
      assert.equal(await f.stores[0].retryAllDead(), 1);
      await f.stores[1].renew();
      assert.deepEqual(f.stores[1].counts(), {
        waiting: 2,
        scheduled: 0,
        failed: 0,
        active: 0,
        dead: 0,
      });
    } finally {
      f.close();
    }
  });

  test("a single-instance store's prefix is migrated; a bare work queue's is refused", async () => {
    const kv = await openKv(":memory:");
    try {
      const single = new DenoKvJobStore(kv, { prefix: ["mixed"] });
      await single.load();
      await single.enqueue([{ id: "j", payload: '{"a":1}', plan: planJob({}, Date.now()) }]);
      const shared = new DenoKvClusterStore(kv as unknown as ClusterKvLike, { prefix: ["mixed"] });
      await shared.load();
      assert.equal((await shared.get("j"))?.state, "waiting");
      await assert.rejects(
        single.enqueue([{ id: "k", payload: "1", plan: planJob({}, Date.now()) }]),
        QueueFencedError,
        "the old store is fenced by the migration",
      );
      assert.deepEqual((await shared.take(5)).map((job) => [job.messageId, job.payload]), [
        ["j", '{"a":1}'],
      ]);
      single.close();
      shared.close();
      const again = new DenoKvJobStore(kv, { prefix: ["mixed"] });
      await assert.rejects(again.load(), /holds a shared flow/, "no going back unnoticed");
      again.close();
      const queue = new DenoKvWorkQueue(kv, { prefix: ["bare"] });
      const { epoch } = await queue.load();
      await queue.store(epoch, { messageId: "m", payload: "1", proposedSeq: 1 });
      const other = new DenoKvClusterStore(kv as unknown as ClusterKvLike, { prefix: ["bare"] });
      await assert.rejects(other.load(), QueueConflictError);
      other.close();
      await queue.store(epoch, { messageId: "n", payload: "2", proposedSeq: 2 }); // not fenced
    } finally {
      kv.close();
    }
  });

  test("bad options are refused naming the option", () => {
    const kv = {} as ClusterKvLike;
    assert.throws(() => new DenoKvClusterStore(kv), /kv must be a Deno.Kv/);
    const fake = { getMany() {}, list() {}, atomic() {} } as unknown as ClusterKvLike;
    assert.throws(
      () => new DenoKvClusterStore(fake, { instance: { leaseTtl: 10 } }),
      /"instance.leaseTtl"/,
    );
    assert.throws(
      () => new DenoKvClusterStore(fake, { instance: { leaseTtl: 1000, renewInterval: 600 } }),
      /"instance.renewInterval"/,
    );
    assert.throws(() => new DenoKvClusterStore(fake, { instance: { id: "" } }), /"instance.id"/);
  });
});

describe(`Job queues sharing a flow (${CLIENT})`, () => {
  /** Job queues on one KV, on the real clock with short leases. */
  async function queues(ids: readonly string[]) {
    const kv = await openKv(":memory:");
    const made = ids.map((id) =>
      new JobQueue({
        name: "jobs",
        store: new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
          prefix: ["queues"],
          instance: { id, leaseTtl: 1000, renewInterval: 50, pollInterval: 10 },
        }),
      })
    );
    for (const queue of made) await queue.start();
    return {
      queues: made,
      async close() {
        for (const queue of made) await queue.close();
        kv.close();
      },
    };
  }

  test("the HTTP routes work on any instance; GET /stats shows the whole flow", async () => {
    const { queues: [a, b], close } = await queues(["a", "b"]);
    try {
      const secret = "a-secret-of-at-least-32-bytes-length!";
      const noUpgrade = () => async (_c: unknown, next: () => Promise<void>) => await next();
      const token = await signToken(secret, { producer: "jobs", expiresIn: 60_000 });
      const [appA, appB] = [a, b].map((queue) =>
        createWorkpullApp({ queue, upgradeWebSocket: noUpgrade, auth: { secret } })
      );
      const call = (app: typeof appA, method: string, path: string, body?: unknown) =>
        app.request(path, {
          method,
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          ...(body === undefined ? {} : { body: JSON.stringify(body) }),
        });
      const posted = await call(appA, "POST", "/jobs", {
        jobs: [{ payload: 1, messageId: "x" }, { payload: 2, messageId: "y", delay: 60_000 }],
      });
      assert.equal(posted.status, 201);
      assert.equal((await (await call(appB, "GET", "/jobs/x")).json()).state, "waiting");
      const cancelled = await call(appB, "DELETE", "/jobs/y");
      assert.deepEqual([cancelled.status, (await cancelled.json()).state], [200, "cancelled"]);
      await (b.store as DenoKvClusterStore).renew();
      const stats = await (await call(appB, "GET", "/stats")).json();
      assert.deepEqual(
        stats.instances.map((i: { id: string; self: boolean }) => [i.id, i.self]),
        [["a", false], ["b", true]],
      );
      assert.deepEqual(stats.backlog, { waiting: 1, scheduled: 0, failed: 0, active: 0, dead: 0 });
    } finally {
      await close();
    }
  });

  test("an instance with no workers claims nothing; jobs added there run on the others", async () => {
    const { queues: [idle, busy], close } = await queues(["idle", "busy"]);
    try {
      const ran: string[] = [];
      connectInProcess(
        busy.controller,
        new WorkerEndpoint({
          producer: "jobs",
          name: "w",
          handler: ({ messageId }) => void ran.push(messageId),
        }),
      );
      let claimedByIdle = 0;
      const take = idle.store.take.bind(idle.store);
      idle.store.take = async (max) => {
        const jobs = await take(max);
        claimedByIdle += jobs.length;
        return jobs;
      };
      await idle.addMany(Array.from({ length: 50 }, (_, n) => ({ payload: { n } })));
      await waitFor(() => ran.length === 50, () => `50 runs on busy, got ${ran.length}`);
      assert.equal(claimedByIdle, 0, "the idle instance claimed nothing");
      const registry = await idle.instances();
      assert.deepEqual(registry?.map((i) => i.id), ["busy", "idle"], "both in the registry");
      assert.deepEqual(
        registry?.filter((i) => i.id === "idle").map((i) => [i.claimed, i.workers]),
        [[0, 0]],
      );
    } finally {
      await close();
    }
  });

  test("cancel from another instance aborts a running job at its owner", async () => {
    const { queues: [front, back], close } = await queues(["front", "back"]);
    try {
      let started = false;
      const aborted = Promise.withResolvers<void>();
      connectInProcess(
        back.controller,
        new WorkerEndpoint({
          producer: "jobs",
          name: "w",
          handler: ({ signal }) => {
            started = true;
            signal.addEventListener("abort", () => aborted.resolve());
            return new Promise((_, reject) =>
              signal.addEventListener("abort", () => reject(signal.reason))
            );
          },
        }),
      );
      await front.add({ long: true }, { messageId: "long" });
      await waitFor(() => started, "the job to start at back");
      const cancelled = await front.cancel("long");
      assert.equal(cancelled?.state, "active", "held by another instance: a request is left");
      await aborted.promise;
      let job: JobInfo | undefined;
      await waitFor(
        async () => (job = await front.get("long"))?.state === "cancelled",
        () => `long cancelled, got ${job?.state}`,
      );
    } finally {
      await close();
    }
  });
});
