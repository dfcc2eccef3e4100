/**
 * How an idle instance of a shared flow wakes (`src/cluster/waker.ts`): on a move of the wake
 * counter seen by a read that backs off while nothing changes, or by a watch; at the earliest due
 * time; and, on a real KV, when another instance adds a job. The waker's own logic runs under a
 * simulated clock with a KV stand-in whose counter the test moves; the flow-level case runs on a
 * real KV.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { SimulatedClock } from "../src/core/clock.ts";
import type { KvEntryLike, KvKey } from "../src/queue/deno_kv/port.ts";
import { MIN_POLL, Waker } from "../src/cluster/waker.ts";
import { type ClusterKvLike, DenoKvClusterStore } from "../deno_kv.ts";
import { planJob } from "../src/lifecycle/job_options.ts";
import { openKv } from "./fixtures/open_kv.ts";
import { ManualClock } from "./support/manual_clock.ts";

const KEY = ["flow", "wake"];

/** A KV stand-in holding the counter; `watch` streams what `move` does, when asked for. */
function counterKv(withWatch = false) {
  let value = 0n;
  let reads = 0;
  const watchers: ReadableStreamDefaultController<readonly KvEntryLike[]>[] = [];
  const entry = (): KvEntryLike => ({ key: KEY, value: { value }, versionstamp: "1" });
  const kv = {
    getMany(_keys: readonly KvKey[]) {
      reads += 1;
      return Promise.resolve([entry()]);
    },
    ...(withWatch
      ? {
        watch(_keys: readonly KvKey[]) {
          return new ReadableStream<readonly KvEntryLike[]>({
            start(controller) {
              watchers.push(controller);
              controller.enqueue([entry()]);
            },
          });
        },
      }
      : {}),
  };
  return {
    kv,
    get reads() {
      return reads;
    },
    move() {
      value += 1n;
      for (const watcher of watchers) watcher.enqueue([entry()]);
    },
  };
}

/** Move the clock `ms` in steps of `step`, letting the reads each step started resolve. */
async function pass(clock: SimulatedClock, ms: number, step: number): Promise<void> {
  for (let t = 0; t < ms; t += step) {
    clock.advance(step);
    await settle();
  }
}

/** Let the resolved KV reads and their continuations run. */
async function settle(): Promise<void> {
  for (let i = 0; i < 10; i++) await Promise.resolve();
}

function waker(kv: ReturnType<typeof counterKv>["kv"], clock: SimulatedClock, watch = false) {
  const woken: number[] = [];
  const w = new Waker({
    kv,
    key: KEY,
    clock,
    maxPoll: 250,
    watch,
    wake: () => woken.push(clock.now()),
  });
  return { w, woken };
}

describe("the waker of an idle instance", () => {
  test("the first arming reads a baseline and wakes once; then only a move wakes it", async () => {
    const clock = new SimulatedClock();
    const store = counterKv();
    const { w, woken } = waker(store.kv, clock);
    try {
      w.arm(Infinity);
      await settle();
      assert.deepEqual(woken, [0], "no baseline yet: wake to list the backlog");
      w.arm(Infinity);
      await pass(clock, 2000, MIN_POLL);
      assert.deepEqual(woken, [0], "nothing moved: no wake");
      store.move();
      for (let t = 0; t < 300 && woken.length === 1; t += MIN_POLL) {
        clock.advance(MIN_POLL);
        await settle();
      }
      assert.equal(woken.length, 2, "a move is seen by the next read");
      assert.ok(woken[1] - 2000 <= 250, `within maxPoll of the move: ${woken[1] - 2000} ms`);
    } finally {
      w.close();
    }
  });

  test("reads back off while nothing moves: an idle minute costs about 60,000 / maxPoll", async () => {
    const clock = new SimulatedClock();
    const store = counterKv();
    const { w } = waker(store.kv, clock);
    try {
      w.arm(Infinity);
      await settle();
      w.arm(Infinity); // after the first wake, armed again by the empty take
      const before = store.reads;
      await pass(clock, 60_000, MIN_POLL);
      const reads = store.reads - before;
      assert.ok(reads >= 240 && reads <= 250, `reads in an idle minute: ${reads}`);
    } finally {
      w.close();
    }
  });

  test("after work was found the reads start fast again", async () => {
    const clock = new SimulatedClock();
    const store = counterKv();
    const { w, woken } = waker(store.kv, clock);
    try {
      w.arm(Infinity);
      await settle();
      w.arm(Infinity);
      await pass(clock, 5_000, MIN_POLL);
      w.found(); // a take found jobs; later the grant is open again with nothing due
      w.arm(Infinity);
      store.move();
      const at = clock.now();
      for (let t = 0; t < 300 && woken.length === 1; t++) {
        clock.advance(1);
        await settle();
      }
      assert.equal(clock.now() - at, MIN_POLL, "the first read comes MIN_POLL after arming");
    } finally {
      w.close();
    }
  });

  test("a watch of the counter wakes it without waiting for a read", async () => {
    const clock = new SimulatedClock();
    const store = counterKv(true);
    const { w, woken } = waker(store.kv, clock, true);
    try {
      w.arm(Infinity);
      await settle();
      assert.equal(woken.length, 1, "the watch's first value is the baseline: one wake");
      w.arm(Infinity);
      store.move();
      await settle();
      assert.deepEqual(woken, [0, 0], "woken at once, with no time passing");
    } finally {
      w.close();
    }
  });

  test("the earliest due time wakes it", async () => {
    const clock = new SimulatedClock();
    const store = counterKv();
    const { w, woken } = waker(store.kv, clock);
    try {
      w.arm(Infinity);
      await settle();
      w.arm(1_000);
      w.arm(700); // an earlier one replaces it
      w.arm(900);
      await pass(clock, 1_000, 50);
      assert.deepEqual(woken, [0, 700]);
    } finally {
      w.close();
    }
  });
});

describe("the wake counter of a shared flow", () => {
  test("every commit that readies a job moves it; a claim does not", async () => {
    const kv = await openKv(":memory:");
    const clock = new ManualClock();
    const store = new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
      prefix: ["flow"],
      clock,
      instance: { id: "a" },
    });
    try {
      await store.load();
      const counter = async () => {
        const [entry] = await kv.getMany([["flow", "wake"]]);
        return (entry.value as { value: bigint } | null)?.value ?? 0n;
      };
      const start = await counter();
      await store.enqueue([{ id: "j1", payload: "1", plan: planJob({}, clock.now()) }]);
      const afterEnqueue = await counter();
      assert.equal(afterEnqueue, start + 1n, "an enqueue moves it");
      assert.equal((await store.take(1)).length, 1);
      assert.equal(await counter(), afterEnqueue, "a claim does not");
    } finally {
      store.close();
      kv.close();
    }
  });
});
