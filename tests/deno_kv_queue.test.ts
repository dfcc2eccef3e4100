import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  DenoKvWorkQueue,
  type KvAtomicLike,
  type KvEntryLike,
  type KvKey,
  type KvLike,
} from "../src/queue/deno_kv/queue.ts";
import { encodedKeySize, KvQueueLayout } from "../src/queue/deno_kv/layout.ts";
import { encodeJobText } from "../src/queue/deno_kv/codec.ts";
import {
  isTerminalQueueError,
  QueueConflictError,
  QueueFencedError,
} from "../src/queue/work_queue.ts";
import {
  type QueueFactory,
  runConformanceCases,
  runWorkQueueConformance,
  workQueueConformanceCases,
} from "../src/testing/queue_conformance.ts";
import { kvClient, kvU64, openKv } from "./fixtures/open_kv.ts";
import {
  BufferedProducer,
  connectInProcess,
  type ReliableDeliveryFailedEvent,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { waitFor } from "./support/waiting.ts";

// Deno runs these tests on its own KV; Bun on npm `@deno/kv` (the same SQLite engine), which is
// how Node and Bun users open a store for the adapter.
const CLIENT = kvClient === "deno" ? "Deno.openKv" : "npm @deno/kv";

/** A fresh temporary directory; `remove()` deletes it. */
function tempDir(): { path: string; remove(): void } {
  const path = mkdtempSync(join(tmpdir(), "workpull-kv-"));
  return { path, remove: () => rmSync(path, { recursive: true, force: true }) };
}

const bytes = (text: string) => new TextEncoder().encode(text);
const payload = (id: string) => JSON.stringify({ job: id });

/** A commit failure to inject: thrown before or after the real commit. */
interface InjectedError {
  readonly error: Error;
  readonly applied: boolean;
}

/** A KvLike over a real Deno.Kv that can fail on cue and counts what it does. */
class ScriptedKv implements KvLike {
  readonly inner: Deno.Kv;
  failNextList = false;
  beforeList: (() => Promise<void>) | undefined;
  /** Injected failures, one per commit in order; `undefined` lets that commit succeed. */
  readonly commitErrors: (InjectedError | undefined)[] = [];
  commits = 0;
  lists = 0;

  constructor(inner: Deno.Kv) {
    this.inner = inner;
  }

  getMany(keys: readonly KvKey[]): Promise<readonly KvEntryLike[]> {
    return this.inner.getMany(keys);
  }

  async *list(selector: { prefix: KvKey }, options?: { batchSize?: number }) {
    this.lists += 1;
    if (this.failNextList) {
      this.failNextList = false;
      throw new Error("injected list failure");
    }
    await this.beforeList?.();
    yield* this.inner.list(selector, options);
  }

  atomic(): KvAtomicLike {
    const op = this.inner.atomic();
    const errors = this.commitErrors;
    const count = () => void (this.commits += 1);
    const atomic: KvAtomicLike = {
      check: (...checks) => (op.check(...checks), atomic),
      set: (key, value) => (op.set(key, value), atomic),
      delete: (key) => (op.delete(key), atomic),
      async commit() {
        count();
        const injected = errors.shift();
        if (injected && !injected.applied) throw injected.error;
        const result = await op.commit();
        if (injected) throw injected.error;
        return result;
      },
    };
    return atomic;
  }
}

/** Fixtures on `:memory:` KV: a second handle shares the same Deno.Kv. */
function memoryKvFactory(prefix: KvKey = ["workpull"]): QueueFactory {
  return {
    async open() {
      const kv = await openKv(":memory:");
      const scripted = new ScriptedKv(kv);
      return {
        queue: new DenoKvWorkQueue(scripted, { prefix }),
        reopen: () => new DenoKvWorkQueue(kv, { prefix }),
        corrupt: async () => void await kv.set([...prefix, "meta"], bytes("{not json")),
        failNextLoad: () => void (scripted.failNextList = true),
        close: () => kv.close(),
      };
    },
  };
}

/** Fixtures on a KV file in a temporary directory: a second handle is a second connection. */
const fileKvFactory: QueueFactory = {
  async open() {
    const dir = tempDir();
    const path = join(dir.path, "queue.kv");
    const handles = [await openKv(path)];
    const scripted = new ScriptedKv(handles[0]);
    return {
      queue: new DenoKvWorkQueue(scripted),
      reopen: async () => {
        handles.push(await openKv(path));
        return new DenoKvWorkQueue(handles.at(-1)!);
      },
      corrupt: async () =>
        void await handles[0].set(
          ["workpull", "flags", 999],
          bytes('{"accepted":true,"confirmed":false}'),
        ),
      failNextLoad: () => void (scripted.failNextList = true),
      close: () => {
        for (const kv of handles) kv.close();
        dir.remove();
      },
    };
  },
};

/** Opens a `:memory:` KV, runs `body`, always closes it. */
async function withKv(body: (kv: Deno.Kv) => Promise<void> | void): Promise<void> {
  const kv = await openKv(":memory:");
  try {
    await body(kv);
  } finally {
    kv.close();
  }
}

/** An acceptance or flags key: what a job's state costs beyond its own key. */
const isMark = (key: string) => /^workpull\/(accepted|flags)\//.test(key);

/** The text of a value (npm `@deno/kv` reads bytes back as a Buffer). */
async function textAt(kv: Deno.Kv, key: KvKey): Promise<string> {
  return new TextDecoder().decode((await kv.get(key)).value as Uint8Array);
}

async function keysUnder(kv: Deno.Kv, prefix: KvKey): Promise<string[]> {
  const keys: string[] = [];
  for await (const entry of kv.list({ prefix })) keys.push(entry.key.join("/"));
  return keys;
}

await runWorkQueueConformance(
  `DenoKvWorkQueue conformance on :memory: (${CLIENT})`,
  memoryKvFactory(),
  { test, describe },
);
await runWorkQueueConformance(
  `DenoKvWorkQueue conformance on a KV file (${CLIENT})`,
  fileKvFactory,
  {
    test,
    describe,
  },
);

describe(`DenoKvWorkQueue (${CLIENT})`, () => {
  test("splits a large payload across keys, joins it on load and deletes every key on compaction", async () => {
    await withKv(async (kv) => {
      const queue = new DenoKvWorkQueue(kv);
      const large = JSON.stringify("ü".repeat(150_000)); // 300,002 bytes
      const { epoch } = await queue.load();
      await queue.store(epoch, { messageId: "big", proposedSeq: 1, payload: large });
      await queue.accept(epoch, "big");
      assert.deepEqual(
        await keysUnder(kv, ["workpull", "part"]),
        [1, 2, 3, 4].map((n) => `workpull/part/1/${n}`),
      );
      const loaded = await queue.load();
      assert.deepEqual(loaded.state.unconfirmed, [{ messageId: "big", seq: 1, payload: large }]);
      await queue.confirmMessage(loaded.epoch, "big");
      assert.deepEqual(
        await keysUnder(kv, ["workpull"]),
        ["workpull/completed/1", "workpull/epoch", "workpull/meta"],
        "only the small record of a recent completion is left",
      );
    });
  });

  test("rejects a payload or MessageID above its maximum, naming the maximum, and stores nothing", async () => {
    await withKv(async (kv) => {
      const queue = new DenoKvWorkQueue(kv);
      assert.equal(queue.maxPayloadBytes, 655_360);
      const { epoch } = await queue.load();
      const tooLarge = `"${"x".repeat(655_360 - 1)}"`;
      await assert.rejects(
        queue.store(epoch, { messageId: "a", proposedSeq: 1, payload: tooLarge }),
        (error: Error) =>
          error instanceof RangeError && /655360 bytes \(maxPayloadBytes\)/.test(error.message),
      );
      await assert.rejects(
        queue.store(epoch, { messageId: "é".repeat(513), proposedSeq: 1, payload: "1" }),
        (error: Error) =>
          error instanceof RangeError &&
          /maximum is 1024 bytes \(maxMessageIdBytes\)/.test(error.message),
      );
      assert.deepEqual(
        await queue.store(epoch, { messageId: "a", proposedSeq: 1, payload: "1" }),
        {
          seq: 1,
          alreadyStored: false,
          payload: "1",
        },
      );
    });
  });

  test("fences the handle that loaded earlier, across two connections to one file", async () => {
    const dir = tempDir();
    const path = join(dir.path, "q.kv");
    const [kvA, kvB] = [await openKv(path), await openKv(path)];
    try {
      const a = new DenoKvWorkQueue(kvA);
      const b = new DenoKvWorkQueue(kvB);
      const { epoch: epochA } = await a.load();
      await a.commit(epochA, {
        store: { firstSeq: 1, jobs: [{ messageId: "x", payload: "1" }] },
        accept: ["x"],
      });
      const { epoch: epochB, state } = await b.load();
      assert.ok(epochB > epochA);
      assert.deepEqual(state.unconfirmed.map((m) => m.messageId), ["x"]);
      await assert.rejects(
        a.store(epochA, { messageId: "y", proposedSeq: 2, payload: "2" }),
        QueueFencedError,
      );
      await assert.rejects(a.commit(epochA, { confirm: ["x"] }), QueueFencedError);
      await b.confirmMessage(epochB, "x");
    } finally {
      kvA.close();
      kvB.close();
      dir.remove();
    }
  });

  test("surfaces `database is locked` unchanged as a retriable error and keeps its view", async () => {
    await withKv(async (kv) => {
      const scripted = new ScriptedKv(kv);
      const queue = new DenoKvWorkQueue(scripted);
      const { epoch } = await queue.load();
      const locked = new TypeError("database is locked");
      scripted.commitErrors.push({ error: locked, applied: false });
      const request = { messageId: "a", proposedSeq: 1, payload: "1" };
      const error = await queue.store(epoch, request).catch((e) => e);
      assert.equal(error, locked);
      assert.equal(isTerminalQueueError(error), false);
      const lists = scripted.lists;
      assert.deepEqual(await queue.store(epoch, request), {
        seq: 1,
        alreadyStored: false,
        payload: "1",
      });
      assert.equal(
        scripted.lists,
        lists,
        "a locked database means not applied: no re-read needed",
      );
    });
  });

  test("re-reads the queue after a failure whose outcome is unknown", async () => {
    await withKv(async (kv) => {
      const scripted = new ScriptedKv(kv);
      const queue = new DenoKvWorkQueue(scripted);
      const { epoch } = await queue.load();
      const lost = new Error("connection reset after the write");
      scripted.commitErrors.push({ error: lost, applied: true });
      const request = { messageId: "a", proposedSeq: 1, payload: "1" };
      await assert.rejects(queue.store(epoch, request), (error) => error === lost);
      assert.deepEqual(await queue.store(epoch, request), {
        seq: 1,
        alreadyStored: true,
        payload: "1",
      });
      assert.deepEqual(await queue.store(epoch, { ...request, messageId: "b", proposedSeq: 2 }), {
        seq: 2,
        alreadyStored: false,
        payload: "1",
      });
    });
  });

  test("a controller keeps going when commits apply and then report an error", async () => {
    // Defect: on hosted KV a commit can apply and its answer be lost. The retry repeated the
    // unit's confirmations for jobs already compacted: "unknown MessageID", a terminal conflict,
    // and the controller stopped for good (8 of 20 jobs done).
    const kv = await openKv(":memory:");
    const scripted = new ScriptedKv(kv);
    const producer = new BufferedProducer<number>();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      queue: new DenoKvWorkQueue(scripted, { prefix: ["lost-acks"] }),
      queueRetryBackoff: 1,
    });
    const failures: ReliableDeliveryFailedEvent[] = [];
    controller.addEventListener("delivery-failed", (event) => failures.push(event));
    await controller.start();
    const handled = new Set<string>();
    const workers = ["w1", "w2"].map((name) => {
      const worker = new WorkerEndpoint<number>({
        producer: "jobs",
        name,
        window: 3,
        handler: (delivery) => void handled.add(delivery.messageId),
      });
      connectInProcess(controller, worker);
      return worker;
    });
    try {
      // From now on every third commit lands and then reports an error.
      const lost = { error: new Error("connection reset after the write"), applied: true };
      for (let n = 0; n < 100; n++) scripted.commitErrors.push(lost, undefined, undefined);
      for (let n = 1; n <= 20; n++) void producer.submit(n, { messageId: `job-${n}` });
      await waitFor(() => handled.size === 20, () => `20 jobs run (${handled.size})`);
      await waitFor(
        () => controller.stats().totals.confirmed >= 20,
        "every confirmation to reach the controller",
      );
      assert.deepEqual(failures.map((f) => String(f.error)), []);
      assert.equal(controller.state, "running");
    } finally {
      for (const worker of workers) await worker.close();
      await controller.close();
      kv.close();
    }
  });

  test("accepts each run of consecutive jobs with one record, deleted with the run's last job", async () => {
    await withKv(async (kv) => {
      const queue = new DenoKvWorkQueue(kv);
      const { epoch } = await queue.load();
      const ids = ["a", "b", "c", "d", "e"];
      const jobs = ids.map((id) => ({ messageId: id, payload: payload(id) }));
      await queue.commit(epoch, { store: { firstSeq: 1, jobs } });
      await queue.commit(epoch, { accept: ["c", "a", "b", "e"] });
      const marks = () => keysUnder(kv, ["workpull"]).then((keys) => keys.filter(isMark));
      assert.deepEqual(await marks(), ["workpull/accepted/1", "workpull/accepted/5"]);
      assert.equal(await textAt(kv, ["workpull", "accepted", 1]), '{"last":3}');
      const reloaded = await new DenoKvWorkQueue(kv).load();
      assert.deepEqual(reloaded.state.unconfirmed.map((m) => m.messageId), ["a", "b", "c", "e"]);
      const queue2 = new DenoKvWorkQueue(kv);
      const { epoch: epoch2 } = await queue2.load();
      await queue2.confirmMessage(epoch2, "d"); // confirmed before accepted: a flags record
      assert.deepEqual(await marks(), [
        "workpull/accepted/1",
        "workpull/accepted/5",
        "workpull/flags/4",
      ]);
      await queue2.commit(epoch2, { accept: ["d"], confirm: ["a", "b"] });
      assert.deepEqual(await marks(), ["workpull/accepted/1", "workpull/accepted/5"]);
      await queue2.commit(epoch2, { confirm: ["c", "e"] });
      assert.deepEqual(await keysUnder(kv, ["workpull"]), [
        "workpull/completed/1", // d (compacted by its accept), a and b
        "workpull/completed/2", // c and e
        "workpull/epoch",
        "workpull/meta",
      ]);
      assert.equal(await textAt(kv, ["workpull", "meta"]), '{"version":2,"currentSeq":5}');
    });
  });

  test("reads a store of format version 1 and carries on in version 2", async () => {
    await withKv(async (kv) => {
      // What workpull wrote before accepted runs: a flags record for each accepted job.
      const job = (id: string) => encodeJobText(id, id.length, payload(id), payload(id).length);
      await kv.atomic()
        .set(["workpull", "epoch"], bytes('{"epoch":1}'))
        .set(["workpull", "meta"], bytes('{"version":1,"currentSeq":3}'))
        .set(["workpull", "job", 1], job("old-accepted").record)
        .set(["workpull", "flags", 1], bytes('{"accepted":true,"confirmed":false}'))
        .set(["workpull", "job", 2], job("old-confirmed").record)
        .set(["workpull", "flags", 2], bytes('{"accepted":false,"confirmed":true}'))
        .set(["workpull", "job", 3], job("old-stored").record)
        .commit();
      const queue = new DenoKvWorkQueue(kv);
      const { epoch, state } = await queue.load();
      assert.equal(epoch, 2);
      assert.deepEqual(state.unconfirmed.map((m) => [m.messageId, m.payload]), [
        ["old-accepted", payload("old-accepted")],
      ]);
      await queue.commit(epoch, {
        store: { firstSeq: 4, jobs: [{ messageId: "new", payload: payload("new") }] },
        accept: ["old-stored", "new", "old-confirmed"],
        confirm: ["old-accepted"],
      });
      assert.deepEqual(await keysUnder(kv, ["workpull", "flags"]), []);
      assert.deepEqual(await keysUnder(kv, ["workpull", "accepted"]), ["workpull/accepted/3"]);
      assert.equal(await textAt(kv, ["workpull", "meta"]), '{"version":2,"currentSeq":4}');
      const again = await new DenoKvWorkQueue(kv).load();
      assert.deepEqual(again.state.unconfirmed.map((m) => m.messageId), ["old-stored", "new"]);
      assert.deepEqual(again.state.recentlyCompleted?.map((m) => m.messageId), [
        "old-accepted",
        "old-confirmed",
      ]);
    });
  });

  test("fits a batch of compactions that each end an accepted run in one commit, with the deletes of old completed records", async () => {
    for (const prefix of [["workpull"], ["p".repeat(997)]]) {
      await withKv(async (kv) => {
        const queue = new DenoKvWorkQueue(kv, { prefix, completedWindow: 1_000 });
        const { maxOperations, maxBytes } = queue.batchLimits;
        const { epoch } = await queue.load();
        // The longest MessageIDs the byte limit lets a full batch carry, at most 1 KiB.
        const idBytes = Math.min(1_024, Math.floor(maxBytes / maxOperations) - 1);
        const id = (n: number) => `${n}`.padStart(idBytes, "0");
        for (let round = 0; round < 2; round++) {
          const jobs = Array.from({ length: maxOperations }, (_, i) => ({
            messageId: id(round * maxOperations + i),
            payload: "1",
          }));
          await queue.commit(epoch, { store: { firstSeq: round * maxOperations + 1, jobs } });
        }
        // Twenty small completed records, for the full batch to delete as many as it may.
        for (let n = 1; n <= 20; n++) {
          const firstSeq = 2 * maxOperations + n;
          const jobs = [{ messageId: `small-${n}`, payload: "1" }];
          await queue.commit(epoch, { store: { firstSeq, jobs }, accept: [`small-${n}`] });
          await queue.confirmMessage(epoch, `small-${n}`);
        }
        // Every other job: each its own run, so each compaction also deletes a run's record.
        const alternate = Array.from({ length: maxOperations }, (_, i) => id(2 * i));
        await queue.commit(epoch, { accept: alternate });
        assert.equal((await keysUnder(kv, [...prefix, "accepted"])).length, maxOperations);
        const narrow = new DenoKvWorkQueue(kv, { prefix, completedWindow: 1 });
        const { epoch: epoch2 } = await narrow.load();
        await narrow.commit(epoch2, { confirm: alternate });
        assert.deepEqual(await keysUnder(kv, [...prefix, "accepted"]), []);
        assert.equal((await keysUnder(kv, [...prefix, "job"])).length, maxOperations);
        const records = (await keysUnder(kv, [...prefix, "completed"])).length;
        assert.ok(records >= 20 - 16 + 1 && records <= 20 - 16 + 12, `${records} records`);
      });
    }
  });

  test("remembers a bounded number of recent completions across handles", async () => {
    await withKv(async (kv) => {
      const queue = new DenoKvWorkQueue(kv, { completedWindow: 3 });
      const { epoch } = await queue.load();
      const ids = ["a", "b", "c", "d", "e", "f", "g", "h"];
      const jobs = ids.map((id) => ({ messageId: id, payload: payload(id) }));
      await queue.commit(epoch, { store: { firstSeq: 1, jobs }, accept: ids });
      for (const id of ["a", "b", "c"]) await queue.confirmMessage(epoch, id);
      const remembered = async () => {
        const loaded = await new DenoKvWorkQueue(kv, { completedWindow: 3 }).load();
        return loaded.state.recentlyCompleted?.map((m) => m.messageId);
      };
      const records = () => keysUnder(kv, ["workpull", "completed"]);
      assert.deepEqual(await remembered(), ["a", "b", "c"]);
      // One record a commit; the oldest go while the rest still hold 3 jobs.
      const { epoch: epoch2 } = await queue.load();
      await queue.commit(epoch2, { confirm: ["d", "e"] });
      assert.deepEqual(await records(), ["workpull/completed/3", "workpull/completed/4"]);
      assert.deepEqual(await remembered(), ["c", "d", "e"]);
      const { epoch: epoch3 } = await queue.load();
      await queue.commit(epoch3, { confirm: ["f", "g", "h"] });
      assert.deepEqual(await records(), ["workpull/completed/5"]);
      const reloaded = await new DenoKvWorkQueue(kv, { completedWindow: 3 }).load();
      assert.deepEqual(reloaded.state.recentlyCompleted, [
        { messageId: "f", seq: 6 },
        { messageId: "g", seq: 7 },
        { messageId: "h", seq: 8 },
      ]);
      const none = await new DenoKvWorkQueue(kv, { completedWindow: 0 }).load();
      assert.deepEqual(none.state.recentlyCompleted, []);
    });
  });

  test("remembers a job stored, accepted and confirmed in one batch, writing no job key", async () => {
    await withKv(async (kv) => {
      const queue = new DenoKvWorkQueue(kv);
      const { epoch } = await queue.load();
      await queue.commit(epoch, {
        store: { firstSeq: 1, jobs: [{ messageId: "quick", payload: "1" }] },
        accept: ["quick"],
        confirm: ["quick"],
      });
      assert.deepEqual(await keysUnder(kv, ["workpull"]), [
        "workpull/completed/1",
        "workpull/epoch",
        "workpull/meta",
      ]);
      const reloaded = await new DenoKvWorkQueue(kv).load();
      assert.deepEqual(reloaded.state.recentlyCompleted, [{ messageId: "quick", seq: 1 }]);
    });
  });

  test("a smaller completedWindow cuts the completed records back, at most 16 a commit", async () => {
    await withKv(async (kv) => {
      const wide = new DenoKvWorkQueue(kv, { completedWindow: 100 });
      const { epoch } = await wide.load();
      const ids = Array.from({ length: 22 }, (_, i) => `j${i}`);
      const jobs = ids.map((id) => ({ messageId: id, payload: payload(id) }));
      await wide.commit(epoch, { store: { firstSeq: 1, jobs }, accept: ids });
      for (const id of ids.slice(0, 20)) await wide.confirmMessage(epoch, id);
      const records = () => keysUnder(kv, ["workpull", "completed"]);
      assert.equal((await records()).length, 20);
      const narrow = new DenoKvWorkQueue(kv, { completedWindow: 1 });
      const { epoch: epoch2 } = await narrow.load();
      await narrow.confirmMessage(epoch2, "j20");
      assert.equal((await records()).length, 20 + 1 - 16, "records 1 to 16 deleted");
      await narrow.confirmMessage(epoch2, "j21");
      assert.deepEqual(await records(), ["workpull/completed/22"]);
    });
  });

  test("splits the completed records of long MessageIDs within one value each", async () => {
    await withKv(async (kv) => {
      const queue = new DenoKvWorkQueue(kv);
      const { epoch } = await queue.load();
      const ids = Array.from({ length: 100 }, (_, i) => `${i}`.padStart(1_024, "x"));
      const jobs = ids.map((id) => ({ messageId: id, payload: "1" }));
      await queue.commit(epoch, { store: { firstSeq: 1, jobs }, accept: ids });
      await queue.commit(epoch, { confirm: ids });
      assert.deepEqual(await keysUnder(kv, ["workpull", "completed"]), [
        "workpull/completed/1",
        "workpull/completed/2",
      ]);
      const reloaded = await new DenoKvWorkQueue(kv).load();
      assert.deepEqual(reloaded.state.recentlyCompleted?.map((m) => m.messageId), ids);
    });
  });

  test("a job resubmitted after a controller restart keeps its sequence and does not run again", async () => {
    // Defect: the dedupe window lived in memory only; a producer resending after a controller
    // restart got completed jobs run again.
    await withKv(async (kv) => {
      const handled: string[] = [];
      const start = async () => {
        const producer = new BufferedProducer<number>();
        const controller = new WorkPullingController({
          name: "jobs",
          producer,
          queue: new DenoKvWorkQueue(kv, { prefix: ["restart"] }),
        });
        await controller.start();
        const worker = new WorkerEndpoint<number>({
          producer: "jobs",
          name: "w",
          handler: (delivery) => void handled.push(delivery.messageId),
        });
        connectInProcess(controller, worker);
        return { producer, controller, worker };
      };
      const first = await start();
      const receipt = await first.producer.submit(1, { messageId: "once" });
      await waitFor(() => handled.length === 1, "the job to run");
      await waitFor(() => first.controller.stats().totals.confirmed === 1, "its confirmation");
      await waitFor(
        async () => (await keysUnder(kv, ["restart", "completed"])).length === 1,
        "its completion to be durable",
      );
      await first.worker.close();
      await first.controller.close(); // as good as a crash: nothing is flushed at close
      const second = await start();
      try {
        const again = await second.producer.submit(1, { messageId: "once" });
        assert.equal(again.seq, receipt.seq, "the original sequence");
        await again.accepted;
        const fresh = await second.producer.submit(2, { messageId: "new" });
        await fresh.accepted;
        await waitFor(() => handled.includes("new"), "a new job to run");
        assert.deepEqual(handled, ["once", "new"], "the completed job did not run again");
      } finally {
        await second.worker.close();
        await second.controller.close();
      }
    });
  });

  test("keeps a second handle writing under the same epoch consistent", async () => {
    await withKv(async (kv) => {
      const owner = new DenoKvWorkQueue(kv);
      const other = new DenoKvWorkQueue(kv);
      const { epoch } = await owner.load();
      await owner.store(epoch, { messageId: "a", proposedSeq: 1, payload: "1" });
      await other.store(epoch, { messageId: "b", proposedSeq: 2, payload: "2" });
      await assert.rejects(
        owner.store(epoch, { messageId: "c", proposedSeq: 2, payload: "3" }),
        QueueConflictError,
      );
      assert.equal(
        (await owner.store(epoch, { messageId: "b", proposedSeq: 9, payload: "9" })).seq,
        2,
      );
      await owner.commit(epoch, { accept: ["a", "b"] });
      assert.deepEqual((await other.load()).state.unconfirmed.map((m) => m.seq), [1, 2]);
    });
  });

  test("takes over from a writer that keeps writing while it loads", async () => {
    await withKv(async (kv) => {
      const writer = new DenoKvWorkQueue(kv);
      const { epoch } = await writer.load();
      let seq = 0;
      const landed: string[] = [];
      let fencedDuringLoad = false;
      const scripted = new ScriptedKv(kv);
      scripted.beforeList = async () => {
        const id = `w${seq + 1}`;
        try {
          await writer.commit(epoch, {
            store: { firstSeq: seq + 1, jobs: [{ messageId: id, payload: "1" }] },
            accept: [id],
          });
          seq += 1;
          landed.push(id);
        } catch (error) {
          assert.ok(error instanceof QueueFencedError);
          fencedDuringLoad = true;
        }
      };
      const loader = new DenoKvWorkQueue(scripted);
      const { epoch: newer, state } = await loader.load();
      assert.ok(newer > epoch);
      assert.ok(landed.length >= 3, `the writer landed ${landed.length} writes during the load`);
      assert.ok(
        fencedDuringLoad,
        "after three attempts the loader fences the writer, then reads",
      );
      assert.deepEqual(state.unconfirmed.map((m) => m.messageId), landed);
      assert.equal(state.currentSeq, landed.length);
      await assert.rejects(writer.accept(epoch, "w1"), QueueFencedError);
    });
  });

  test("reports each kind of malformed record as a conflict without bumping the epoch", async () => {
    const corruptions: Record<string, [KvKey, unknown][]> = {
      "meta that is not JSON": [[["workpull", "meta"], bytes("{")]],
      "an epoch of zero": [[["workpull", "epoch"], bytes('{"epoch":0}')]],
      "a missing epoch record": [[["workpull", "epoch"], null]],
      "a job header that is not JSON": [[["workpull", "job", 2], bytes("nope\nid")]],
      "flags without a job": [[
        ["workpull", "flags", 7],
        bytes('{"accepted":true,"confirmed":false}'),
      ]],
      "flags with both bits": [[
        ["workpull", "flags", 1],
        bytes('{"accepted":true,"confirmed":true}'),
      ]],
      "a missing payload part": [[["workpull", "part", 1, 2], null]],
      "a job above currentSeq": [[["workpull", "meta"], bytes('{"version":2,"currentSeq":1}')]],
      "a meta record of a newer format": [[
        ["workpull", "meta"],
        bytes('{"version":3,"currentSeq":2}'),
      ]],
      "an accepted run without a job": [[["workpull", "accepted", 5], bytes('{"last":5}')]],
      "an accepted run that ends before it starts": [[
        ["workpull", "accepted", 2],
        bytes('{"last":1}'),
      ]],
      "overlapping accepted runs": [[["workpull", "accepted", 1], bytes('{"last":2}')], [
        ["workpull", "accepted", 2],
        bytes('{"last":2}'),
      ]],
      "flags inside an accepted run": [[
        ["workpull", "flags", 1],
        bytes('{"accepted":false,"confirmed":true}'),
      ]],
      "an accepted key of the wrong shape": [[["workpull", "accepted", "one"], bytes("{}")]],
      // A V8-serialized string on Deno; a KvU64 everywhere (no V8 serializer on Bun).
      ...(kvClient === "deno"
        ? { "a value that is not bytes": [[["workpull", "job", 2], "text"]] as [KvKey, unknown][] }
        : {}),
      "a KvU64 where bytes belong": [[["workpull", "job", 2], await kvU64(7n)]],
      "a key of the wrong shape": [[["workpull", "job", "two"], bytes("x")]],
    };
    for (const [name, writes] of Object.entries(corruptions)) {
      await withKv(async (kv) => {
        const queue = new DenoKvWorkQueue(kv);
        const { epoch } = await queue.load();
        const big = JSON.stringify("x".repeat(200_000));
        await queue.commit(epoch, {
          store: {
            firstSeq: 1,
            jobs: [{ messageId: "a", payload: big }, { messageId: "b", payload: "2" }],
          },
          accept: ["a"],
        });
        for (const [key, value] of writes) {
          if (value === null) await kv.delete(key);
          else await kv.set(key, value);
        }
        const epochBefore = (await kv.get(["workpull", "epoch"])).versionstamp;
        await assert.rejects(new DenoKvWorkQueue(kv).load(), QueueConflictError, name);
        assert.equal((await kv.get(["workpull", "epoch"])).versionstamp, epochBefore, name);
      });
    }
  });

  test("validates its options, naming the option", async () => {
    await withKv((kv) => {
      assert.throws(() => new DenoKvWorkQueue({} as KvLike), /kv must be a Deno.Kv/);
      assert.throws(
        () => new DenoKvWorkQueue(kv, { prefix: [] }),
        (e: Error) => e instanceof TypeError && /prefix/.test(e.message),
      );
      assert.throws(
        () => new DenoKvWorkQueue(kv, { prefix: "q" as unknown as KvKey }),
        TypeError,
      );
      assert.throws(
        () => new DenoKvWorkQueue(kv, { prefix: [{}] as unknown as KvKey }),
        /prefix option: a key part is a object/,
      );
      assert.throws(
        () => new DenoKvWorkQueue(kv, { prefix: ["x".repeat(1_100)] }),
        (e: Error) => e instanceof RangeError && /prefix/.test(e.message),
      );
    });
  });

  test("rejects a batch over batchLimits, naming the limit, and applies nothing", async () => {
    await withKv(async (kv) => {
      const queue = new DenoKvWorkQueue(kv);
      const { maxOperations, maxBytes } = queue.batchLimits;
      assert.deepEqual(queue.batchLimits, { maxOperations: 480, maxBytes: 656_384 });
      const { epoch } = await queue.load();
      const ids = Array.from({ length: maxOperations + 1 }, (_, i) => `j${i}`);
      const tooMany = {
        store: { firstSeq: 1, jobs: ids.map((id) => ({ messageId: id, payload: "1" })) },
      };
      await assert.rejects(queue.commit(epoch, tooMany), /batchLimits\.maxOperations/);
      const half = `"${"x".repeat(maxBytes / 2)}"`;
      const tooBig = {
        store: {
          firstSeq: 1,
          jobs: [{ messageId: "a", payload: half }, { messageId: "b", payload: half }],
        },
      };
      await assert.rejects(queue.commit(epoch, tooBig), /batchLimits\.maxBytes/);
      assert.deepEqual(await keysUnder(kv, ["workpull"]), ["workpull/epoch"]);
    });
  });

  test("fits full batches in one atomic commit under a 1,000-byte prefix", async () => {
    const prefix = ["p".repeat(997)];
    const { maxOperations } = new KvQueueLayout(prefix).batchLimits;
    assert.ok(maxOperations >= 30 && maxOperations < 480, `maxOperations ${maxOperations}`);
    const full = workQueueConformanceCases(memoryKvFactory(prefix))
      .filter((rule) =>
        rule.name === "batches at batchLimits are accepted" ||
        rule.name.startsWith("a payload of maxPayloadBytes")
      );
    const reports = await runConformanceCases(full);
    assert.deepEqual(reports.map((report) => [report.status, String(report.error ?? "")]), [[
      "passed",
      "",
    ], ["passed", ""]]);
  });

  test("turns a batch into one atomic commit, with no reads for new jobs", async () => {
    await withKv(async (kv) => {
      const scripted = new ScriptedKv(kv);
      const queue = new DenoKvWorkQueue(scripted);
      const { epoch } = await queue.load();
      const commits = scripted.commits;
      const jobs = Array.from(
        { length: 100 },
        (_, i) => ({ messageId: `j${i}`, payload: payload(`j${i}`) }),
      );
      await queue.commit(epoch, { store: { firstSeq: 1, jobs } });
      await queue.commit(epoch, { accept: jobs.map((j) => j.messageId) });
      await queue.commit(epoch, { confirm: jobs.map((j) => j.messageId) });
      assert.equal(scripted.commits - commits, 3);
      assert.deepEqual(await keysUnder(kv, ["workpull"]), [
        "workpull/completed/1",
        "workpull/epoch",
        "workpull/meta",
      ]);
    });
  });

  test("counts atomic sizes exactly as Deno KV does (and within npm @deno/kv's limit)", async () => {
    await withKv(async (kv) => {
      // Deno: each check key and mutation key once, plus key and value again for each set.
      const check: KvKey = ["check", 1];
      const fill = (budget: number) => {
        let atomic = kv.atomic().check({ key: check, versionstamp: null });
        let used = encodedKeySize(check);
        for (let i = 0; i < 12; i++) {
          atomic = atomic.set(["v", i], new Uint8Array(65_536));
          used += 2 * encodedKeySize(["v", i]) + 65_536;
        }
        const last = ["w"];
        return atomic.set(last, new Uint8Array(budget - used - 2 * encodedKeySize(last)));
      };
      assert.equal((await fill(819_200).commit()).ok, true);
      if (kvClient === "deno") {
        await assert.rejects(fill(819_201).commit(), /Total mutation size too large/);
      } else {
        // npm @deno/kv 0.14 counts a little less (it accepts up to 819,347 bytes as Deno counts
        // them): a commit the adapter lets through fits both clients.
        await assert.rejects(fill(819_400).commit(), /AtomicWriteTooLarge/);
      }
    });
  });
});

// Deno's leak sanitizers exist only in Deno.test (they never apply to node:test tests).
if (kvClient === "deno") {
  Deno.test({
    name: "DenoKvWorkQueue leaves no pending operation or open resource behind",
    sanitizeOps: true,
    sanitizeResources: true,
    async fn() {
      const dir = await Deno.makeTempDir({ prefix: "workpull-kv-" });
      const kv = await Deno.openKv(`${dir}/q.kv`);
      try {
        const queue = new DenoKvWorkQueue(kv);
        const { epoch } = await queue.load();
        const large = JSON.stringify("y".repeat(100_000));
        await queue.commit(epoch, {
          store: { firstSeq: 1, jobs: [{ messageId: "a", payload: large }] },
          accept: ["a"],
        });
        await queue.confirmMessage(epoch, "a");
        await queue.load();
      } finally {
        kv.close();
        await Deno.remove(dir, { recursive: true });
      }
    },
  });
}
