/**
 * `RemoteKv`, the simulated remote Deno KV of `testing.ts`, on a real KV (`:memory:` or a file in
 * a temporary directory): concurrent commits all land and are counted once each; a commit is
 * applied after its call and before its answer; sequential commits land in order (concurrent
 * ones in any order, as on a remote KV); a lost answer rejects though the write landed; `locked`
 * rejects as SQLite does and writes nothing (and the stores' retry takes it); `slow` still lands;
 * list batches are read rounds; a watch stream's events come through in order (on Deno: npm
 * `@deno/kv`'s SQLite backend emits none); seeded faults repeat; a job store runs on it unchanged.
 *
 * Latency is real timers, but nothing here asserts on elapsed time or sleeps to synchronise:
 * the assertions are on counters and on the order of events. Runs on Deno's KV and, under Bun
 * and Node, on npm `@deno/kv` (values are bytes and `KvU64`s, which need no V8 serializer).
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectInProcess, JobQueue, WorkerEndpoint } from "../mod.ts";
import { DenoKvJobStore } from "../deno_kv.ts";
import {
  RemoteKv,
  type RemoteKvBackend,
  type RemoteKvBackendAtomic,
  type RemoteKvFault,
} from "../testing.ts";
import { isKvLockedError, type KvKey, type KvLike } from "../src/queue/deno_kv/port.ts";
import { retryLocked } from "../src/queue/deno_kv/retry_locked.ts";
import { settle } from "../src/core/clock.ts";
import { kvClient, openKv } from "./fixtures/open_kv.ts";
import { prng, waitFor } from "./support/waiting.ts";

const CLIENT = kvClient === "deno" ? "Deno.openKv" : "npm @deno/kv";

const bytes = (text: string) => new TextEncoder().encode(text);
/** The text of a bytes value (npm `@deno/kv` reads bytes back as a Buffer). */
const text = (value: unknown) => new TextDecoder().decode(value as Uint8Array);

/** Opens a `:memory:` KV, runs `body`, always closes it. */
async function withKv(body: (kv: Deno.Kv) => Promise<void> | void): Promise<void> {
  const kv = await openKv(":memory:");
  try {
    await body(kv);
  } finally {
    kv.close();
  }
}

/** Opens a KV file in a fresh temporary directory, runs `body`, closes and removes it. */
async function withKvFile(body: (kv: Deno.Kv) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "workpull-remote-kv-"));
  try {
    const kv = await openKv(join(dir, "remote.kv"));
    try {
      await body(kv);
    } finally {
      kv.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

/** Set `count` keys `[prefix, i]` directly on the backend, 100 a commit. */
async function fill(kv: Deno.Kv, prefix: string, count: number): Promise<void> {
  for (let from = 0; from < count; from += 100) {
    const atomic = kv.atomic();
    for (let i = from; i < Math.min(count, from + 100); i++) atomic.set([prefix, i], bytes(`${i}`));
    assert.ok((await atomic.commit()).ok);
  }
}

/** A backend that logs when its commits are called and applied (a spy around a real KV). */
function loggingBackend(kv: Deno.Kv, log: string[]): RemoteKvBackend {
  return {
    getMany: (keys) => kv.getMany(keys),
    list: (selector, options) => kv.list(selector as Deno.KvListSelector, options),
    atomic(): RemoteKvBackendAtomic {
      const op = kv.atomic();
      return {
        check: (...checks) => op.check(...checks),
        set: (key, value, options) => op.set(key, value, options),
        delete: (key) => op.delete(key),
        sum: (key, n) => op.sum(key, n),
        async commit() {
          log.push("backend commit");
          const result = await op.commit();
          log.push("applied");
          return result;
        },
      };
    },
  };
}

describe(`RemoteKv (${CLIENT})`, () => {
  test("ten concurrent commits all land, each counted once with what it carried", async () => {
    await withKv(async (local) => {
      const kv = new RemoteKv(local, { commitLatency: 10, readLatency: 5 });
      const results = await Promise.all(
        Array.from(
          { length: 10 },
          (_, i) =>
            kv.atomic()
              .check({ key: ["job", i], versionstamp: null })
              .set(["job", i], bytes(`job ${i}`))
              .sum(["count"], 1n)
              .commit(),
        ),
      );
      assert.ok(results.every((result) => result.ok));
      assert.deepEqual(
        [kv.commits, kv.checks, kv.mutations, kv.reads],
        [10, 10, 20, 0],
      );
      const entries = await kv.getMany(Array.from({ length: 10 }, (_, i) => ["job", i]));
      assert.deepEqual(
        entries.map((entry) => text(entry.value)),
        entries.map((_, i) => `job ${i}`),
      );
      assert.equal(((await local.get(["count"])).value as Deno.KvU64).value, 10n);
      assert.equal(kv.reads, 1, "one getMany is one read");
      kv.reset();
      assert.deepEqual([kv.commits, kv.checks, kv.mutations, kv.reads], [0, 0, 0, 0]);
    });
  });

  test("a commit reaches the backend only after its call, and answers only after it applied", async () => {
    await withKv(async (local) => {
      const log: string[] = [];
      const kv = new RemoteKv(loggingBackend(local, log), { commitLatency: 10 });
      const answer = kv.atomic().set(["a"], bytes("1")).commit()
        .then((result) => void log.push(result.ok ? "answered" : "refused"));
      await settle(50);
      assert.deepEqual(log, [], "no microtask reaches the backend: the first half is a timer");
      await answer;
      assert.deepEqual(log, ["backend commit", "applied", "answered"]);
      assert.equal(text((await local.get(["a"])).value), "1");
    });
  });

  test("commits issued one after the other land in that order; concurrent ones all land", async () => {
    await withKv(async (local) => {
      const kv = new RemoteKv(local, { commitLatency: 4, jitter: 3, random: prng(1) });
      for (const value of ["first", "second", "third"]) {
        assert.ok((await kv.atomic().set(["sequential"], bytes(value)).commit()).ok);
      }
      assert.equal(text((await local.get(["sequential"])).value), "third");
      // Concurrent commits may land in any order (npm @deno/kv applies even those it is given
      // in order out of order): one of them is last.
      const values = ["a", "b", "c", "d"];
      await Promise.all(
        values.map((value) => kv.atomic().set(["concurrent"], bytes(value)).commit()),
      );
      assert.ok(values.includes(text((await local.get(["concurrent"])).value)));
      assert.equal(kv.commits, 7);
    });
  });

  test("a lost answer rejects like a broken connection, and the write is visible afterwards", async () => {
    await withKv(async (local) => {
      const kv = new RemoteKv(local, {
        commitLatency: 2,
        faults: ({ commit }) => (commit === 1 ? "lost-answer" : undefined),
      });
      await assert.rejects(
        kv.atomic().set(["lost"], bytes("landed")).sum(["n"], 1n).commit(),
        (error: unknown) => error instanceof Error && !isKvLockedError(error),
      );
      assert.equal(text((await kv.get(["lost"])).value), "landed");
      assert.equal(((await local.get(["n"])).value as Deno.KvU64).value, 1n);
      // The caller that tries again with a check finds its own write.
      const retry = await kv.atomic().check({ key: ["lost"], versionstamp: null })
        .set(["lost"], bytes("again")).commit();
      assert.equal(retry.ok, false, "the retry's check sees the first write");
      assert.deepEqual([kv.commits, kv.mutations, kv.checks, kv.reads], [2, 3, 1, 1]);
    });
  });

  test('"locked" rejects with the error isKvLockedError accepts and writes nothing; retryLocked takes it', async () => {
    await withKv(async (local) => {
      const log: string[] = [];
      const kv = new RemoteKv(loggingBackend(local, log), {
        commitLatency: 2,
        faults: ({ commit }) => (commit <= 2 ? "locked" : undefined),
      });
      const error = await kv.atomic().set(["locked"], bytes("x")).commit().then(
        () => undefined,
        (error: unknown) => error,
      );
      assert.ok(error instanceof TypeError);
      assert.ok(isKvLockedError(error));
      assert.equal((await local.get(["locked"])).versionstamp, null, "nothing was applied");
      assert.deepEqual(log, [], "the backend was never asked");
      // The stores' retry: the second commit is locked too, the third lands.
      const result = await retryLocked(() => kv.atomic().set(["locked"], bytes("y")).commit());
      assert.ok(result.ok);
      assert.equal(kv.commits, 3);
      assert.deepEqual(log, ["backend commit", "applied"]);
      assert.equal(text((await local.get(["locked"])).value), "y");
    });
  });

  test('a "slow" commit still lands and answers', async () => {
    await withKv(async (local) => {
      const faults: (RemoteKvFault | undefined)[] = [];
      const kv = new RemoteKv(local, {
        commitLatency: 1,
        slowFactor: 5,
        faults: (commit) => {
          const fault = commit.commit === 2 ? "slow" : undefined;
          faults.push(fault);
          return fault;
        },
      });
      const results = await Promise.all(
        [1, 2, 3].map((i) => kv.atomic().set(["slow", i], bytes(`${i}`)).commit()),
      );
      assert.ok(results.every((result) => result.ok));
      assert.deepEqual(faults, [undefined, "slow", undefined]);
      assert.equal((await local.getMany([["slow", 1], ["slow", 2], ["slow", 3]])).length, 3);
    });
  });

  test("a list is read in batches: one read per batch, one more that finds the end after a full one", async () => {
    await withKvFile(async (local) => {
      await fill(local, "a", 25);
      await fill(local, "b", 20);
      await fill(local, "c", 150);
      const kv = new RemoteKv(local, { readLatency: 1 });
      const listed = async (prefix: string, options?: { batchSize?: number; limit?: number }) => {
        kv.reset();
        const keys: unknown[] = [];
        for await (const entry of kv.list({ prefix: [prefix] }, options)) keys.push(entry.key[1]);
        return { keys, reads: kv.reads };
      };
      const a = await listed("a", { batchSize: 10 });
      assert.deepEqual(a.keys, Array.from({ length: 25 }, (_, i) => i));
      assert.equal(a.reads, 3, "25 entries in batches of 10");
      assert.equal((await listed("b", { batchSize: 10 })).reads, 3, "2 full batches and the end");
      assert.equal((await listed("b", { batchSize: 10, limit: 10 })).reads, 1, "the limit ends it");
      const c = await listed("c");
      assert.deepEqual([c.keys.length, c.reads], [150, 2], "Deno's default batch is 100");
      assert.equal((await listed("c", { limit: 150 })).reads, 1, "the default batch is the limit");
      assert.equal((await listed("none")).reads, 1, "an empty list is one read");
      // Stopping early fetches no further batch, and closes the backend's list.
      kv.reset();
      let seen = 0;
      for await (const _ of kv.list({ prefix: ["a"] }, { batchSize: 10 })) {
        if (++seen === 10) break;
      }
      assert.equal(kv.reads, 1);
    });
  });

  test("list takes ranges and reverse order as the backend does", async () => {
    await withKv(async (local) => {
      await fill(local, "k", 10);
      const kv = new RemoteKv(local, { readLatency: 0 });
      const keys = async (selector: Parameters<RemoteKv["list"]>[0], reverse = false) => {
        const found: unknown[] = [];
        for await (const entry of kv.list(selector, { reverse })) found.push(entry.key[1]);
        return found;
      };
      assert.deepEqual(await keys({ start: ["k", 3], end: ["k", 6] }), [3, 4, 5]);
      assert.deepEqual(await keys({ prefix: ["k"], start: ["k", 8] }), [8, 9]);
      assert.deepEqual(await keys({ prefix: ["k"] }, true), [9, 8, 7, 6, 5, 4, 3, 2, 1, 0]);
      assert.equal(kv.reads, 3);
    });
  });

  test("get uses getMany when the backend has no get", async () => {
    await withKv(async (local) => {
      await local.set(["x"], bytes("y"));
      const kv = new RemoteKv(loggingBackend(local, []), { readLatency: 1 });
      assert.equal(text((await kv.get(["x"])).value), "y");
      assert.equal((await kv.get(["nothing"])).versionstamp, null);
      assert.equal(kv.reads, 2);
    });
  });

  test("a watch stream's events come through in order, and canceling it ends the stream", {
    skip: kvClient !== "deno" && "npm @deno/kv's SQLite backend emits no watch events",
  }, async () => {
    await withKv(async (local) => {
      const kv = new RemoteKv(local, { readLatency: 2, jitter: 2, random: prng(7) });
      const key: KvKey = ["watched"];
      const reader = kv.watch([key]).getReader();
      const seen: (string | null)[] = [];
      const next = async () => {
        const { value } = await reader.read();
        const entry = value![0];
        seen.push(entry.versionstamp === null ? null : text(entry.value));
      };
      await next(); // the current state first
      for (const value of ["1", "2", "3"]) {
        await local.set(key, bytes(value));
        // Deno's watch may coalesce changes: read until this value shows.
        while (seen.at(-1) !== value) await next();
      }
      await reader.cancel();
      assert.equal((await reader.read()).done, true, "canceled: the stream has ended");
      assert.equal(seen[0], null);
      const values = seen.slice(1);
      assert.deepEqual(values, values.toSorted(), "never out of order");
      assert.equal(values.at(-1), "3");
    });
  });

  test("fault rates drawn from a seeded random repeat, and their share is near the rate", async () => {
    const outcomes = async (seed: number) => {
      let found = "";
      await withKv(async (local) => {
        const kv = new RemoteKv(local, {
          commitLatency: 0,
          faults: { lostAnswer: 0.2, locked: 0.2 },
          random: prng(seed),
        });
        for (let i = 0; i < 200; i++) {
          found += await kv.atomic().set(["k", i], bytes("v")).commit().then(
            () => ".",
            (error: unknown) => (isKvLockedError(error) ? "L" : "X"),
          );
        }
        const landed = (await Array.fromAsync(local.list({ prefix: ["k"] }))).length;
        assert.equal(landed, 200 - [...found].filter((c) => c === "L").length);
      });
      return found;
    };
    const first = await outcomes(42);
    assert.equal(await outcomes(42), first, "the same seed, the same faults");
    assert.notEqual(await outcomes(43), first);
    for (const mark of ["L", "X"]) {
      const share = [...first].filter((c) => c === mark).length / first.length;
      assert.ok(share > 0.1 && share < 0.3, `${mark}: ${share}`);
    }
  });

  test("bad options are refused by name", async () => {
    await withKv((local) => {
      assert.throws(() => new RemoteKv(local, { commitLatency: -1 }), /commitLatency/);
      assert.throws(() => new RemoteKv(local, { readLatency: Number.NaN }), /readLatency/);
      assert.throws(() => new RemoteKv(local, { faults: { locked: 1.5 } }), /faults\.locked/);
      assert.throws(
        () => new RemoteKv(local, { faults: { locked: 0.6, lostAnswer: 0.6 } }),
        /at most 1/,
      );
      assert.throws(() => new RemoteKv(local, { slowFactor: 0 }), /slowFactor/);
      assert.throws(() => new RemoteKv({} as unknown as RemoteKvBackend), TypeError);
    });
  });

  test("a job queue on DenoKvJobStore runs its jobs through it, with the round trips counted", async () => {
    await withKvFile(async (local) => {
      const kv = new RemoteKv(local, { commitLatency: 2, readLatency: 1 });
      const port: KvLike = kv; // the stores' port takes it as it is
      const queue = new JobQueue({
        name: "remote",
        store: new DenoKvJobStore(port, { prefix: ["remote"] }),
      });
      const ran: string[] = [];
      const worker = new WorkerEndpoint({
        producer: "remote",
        name: "w1",
        window: 10,
        handler: ({ messageId }) => void ran.push(messageId),
      });
      try {
        await queue.start();
        const loaded = kv.reads;
        assert.ok(loaded > 0, "start reads the store back");
        await queue.addMany(
          Array.from({ length: 30 }, (_, i) => ({ payload: i, messageId: `j${i}` })),
        );
        connectInProcess(queue.controller, worker);
        await waitFor(() => ran.length === 30, "30 jobs run");
        const jobs = await Promise.all(ran.map((id) => queue.finished(id)));
        assert.ok(jobs.every((job) => job.state === "completed"));
        assert.ok(kv.commits > 1 && kv.mutations >= 30, `${kv.commits} commits`);
      } finally {
        await worker.close();
        await queue.close();
      }
    });
  });
});
