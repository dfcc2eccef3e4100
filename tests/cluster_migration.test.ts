/**
 * A shared flow written by an older release (the KV fixture `tests/fixtures/kv/cluster_store.sqlite`,
 * written by commit 1f3f1a6, one key a job in its owned index) loads under this one: every job is
 * where the manifest says, the instance that wrote it gets its open try back and its index
 * rewritten as lists, and a survivor that takes it over instead brings every job back. The
 * fixture is copied (never opened in place) and its KV expiry cleared on the copy, as its README
 * says; the store's clock is pinned at the time the file was written.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { DatabaseSync } from "node:sqlite";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ClusterKvLike, DenoKvClusterStore } from "../deno_kv.ts";
import type { Clock } from "../src/core/clock.ts";
import { kvClient, openKv } from "./fixtures/open_kv.ts";

const FIXTURES = join(import.meta.dirname!, "fixtures", "kv");
const manifest = JSON.parse(readFileSync(join(FIXTURES, "manifest.json"), "utf8"));
const written = manifest.files["cluster_store.sqlite"];
const single = manifest.files["job_store_v2.sqlite"];
const PREFIX = written.prefix as string[];

interface Expected {
  readonly messageId: string;
  readonly state: string;
  readonly attempts: number;
  readonly priority: number;
  readonly result?: unknown;
}

/** A wall clock the test sets, with no timers. */
function pinnedClock(at: number): Clock & { at: number } {
  return {
    at,
    now() {
      return this.at;
    },
    setTimeout: () => ({ cancel() {} }),
  };
}

/** A copy of a fixture with KV expiry cleared, opened. */
async function openCopy(file = "cluster_store.sqlite") {
  const dir = mkdtempSync(join(tmpdir(), "workpull-fixture-"));
  const path = join(dir, "flow.sqlite");
  copyFileSync(join(FIXTURES, file), path);
  const db = new DatabaseSync(path);
  db.exec("UPDATE kv SET expiration_ms = -1");
  db.close();
  const kv = await openKv(path);
  return {
    kv,
    close() {
      kv.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

function store(kv: unknown, clock: Clock, id: string) {
  return new DenoKvClusterStore(kv as ClusterKvLike, {
    prefix: PREFIX,
    retention: written.storeOptions.retention,
    clock,
    instance: { id, leaseTtl: 10_000 },
  });
}

/** The keys of an instance's owned index. */
async function ownedKeys(kv: Awaited<ReturnType<typeof openKv>>, instance: string) {
  const keys: unknown[][] = [];
  for await (const entry of kv.list({ prefix: [...PREFIX, "owned", instance] })) {
    keys.push(entry.key.slice(PREFIX.length + 2) as unknown[]);
  }
  return keys;
}

describe(`a shared flow written by 1f3f1a6 (${kvClient})`, {
  skip: kvClient !== "deno" && "node:sqlite clears the copy's expiry under Deno",
}, () => {
  test("its writer reloads it: every job as written, its try back, its index as lists", async () => {
    const copy = await openCopy();
    const clock = pinnedClock(written.writtenAt);
    const a = store(copy.kv, clock, written.instanceId);
    try {
      assert.deepEqual(await ownedKeys(copy.kv, written.instanceId), [["fx-active"]]);
      const { state } = await a.load();
      assert.deepEqual(state.unconfirmed.map((job) => [job.messageId, job.attempt]), [
        ["fx-active", 1],
      ]);
      for (const job of written.jobs as Expected[]) {
        const info = await a.get(job.messageId);
        assert.deepEqual(
          [info?.state, info?.attempts, info?.priority],
          [job.state, job.attempts, job.priority],
          job.messageId,
        );
        // The manifest writes "no result" as null.
        assert.deepEqual(info?.result, job.result ?? undefined, job.messageId);
      }
      assert.equal(await a.readPaused(), true, "the pause flag");
      await a.renew();
      assert.deepEqual(a.counts(), written.counts);
      const lists = await ownedKeys(copy.kv, written.instanceId);
      assert.equal(lists.length, 1, `one list replaces the key a job: ${JSON.stringify(lists)}`);
      assert.equal(typeof lists[0][0], "number", "a list's key: [epoch, n]");
    } finally {
      a.close();
      copy.close();
    }
  });

  test("a survivor takes its writer over: every job comes back, in priority order", async () => {
    const copy = await openCopy();
    const clock = pinnedClock(written.writtenAt);
    const b = store(copy.kv, clock, "survivor");
    try {
      await b.load();
      clock.at = written.instancesAsRead[0].expiresAt + 1; // the writer's lease lapsed
      await b.renew();
      const active = await b.get("fx-active");
      assert.deepEqual([active?.state, active?.attempts], ["waiting", 0], "its try undone");
      assert.deepEqual(await ownedKeys(copy.kv, written.instanceId), [], "its index is gone");
      const taken = await b.take(20);
      const waiting = (written.jobs as Expected[])
        .filter((job) => job.state === "waiting" || job.messageId === "fx-active")
        .sort((x, y) => y.priority - x.priority);
      assert.deepEqual(
        taken.map((job) => job.messageId).sort(),
        waiting.map((job) => job.messageId).sort(),
      );
      assert.deepEqual(
        taken.map((job) =>
          (written.jobs as Expected[]).find((j) => j.messageId === job.messageId)!
            .priority
        ),
        waiting.map((job) => job.priority),
        "highest priority first",
      );
      const large = taken.find((job) => job.messageId === "fx-waiting-large")!;
      const expected = written.jobs.find((job: Expected) => job.messageId === "fx-waiting-large");
      const digest = new Uint8Array(
        await crypto.subtle.digest("SHA-256", new TextEncoder().encode(large.payload)),
      );
      const hex = [...digest].map((byte) => byte.toString(16).padStart(2, "0")).join("");
      assert.equal(hex, expected.payloadSha256, "the two-part payload, joined as bytes");
    } finally {
      b.close();
      copy.close();
    }
  });

  test("a single-instance store (format 2) moves into the shared layout at the first load", async () => {
    const copy = await openCopy("job_store_v2.sqlite");
    const clock = pinnedClock(single.writtenAt);
    const a = new DenoKvClusterStore(copy.kv as unknown as ClusterKvLike, {
      prefix: single.prefix,
      retention: single.storeOptions.retention,
      clock,
      instance: { id: "a", leaseTtl: 10_000 },
    });
    try {
      await a.load();
      for (const job of single.jobs as Expected[]) {
        const info = await a.get(job.messageId);
        // The try in progress at the old process comes back, as a lost instance's would.
        const expected = job.state === "active"
          ? ["waiting", job.attempts - 1, job.priority]
          : [job.state, job.attempts, job.priority];
        assert.deepEqual([info?.state, info?.attempts, info?.priority], expected, job.messageId);
        assert.deepEqual(info?.result, job.result ?? undefined, job.messageId);
      }
      assert.equal(await a.readPaused(), true, "the pause flag stays");
      await a.renew();
      assert.deepEqual(a.counts(), {
        ...single.counts,
        waiting: single.counts.waiting + single.counts.active,
        active: 0,
      });
      assert.deepEqual(
        (await a.deadLetters(10)).jobs.map((job) => job.id).sort(),
        [
          ...single.deadLetters,
        ].sort(),
      );
      const old: unknown[] = [];
      for (const name of ["epoch", "meta", "job", "payload", "try", "finished"]) {
        for await (const entry of copy.kv.list({ prefix: [...single.prefix, name] })) {
          old.push(entry.key);
        }
        const [marker] = await copy.kv.getMany([[...single.prefix, name]]);
        if (marker.versionstamp !== null) old.push(marker.key);
      }
      assert.deepEqual(old, [], "the old layout is gone");
      const taken = await a.take(20);
      const large = taken.find((job) => job.messageId === "fx-waiting-large")!;
      const expected = single.jobs.find((job: Expected) => job.messageId === "fx-waiting-large");
      const digest = new Uint8Array(
        await crypto.subtle.digest("SHA-256", new TextEncoder().encode(large.payload)),
      );
      const hex = [...digest].map((byte) => byte.toString(16).padStart(2, "0")).join("");
      assert.equal(hex, expected.payloadSha256, "the two-part payload, joined as bytes");
      assert.equal(taken[0].messageId, "fx-waiting-max", "highest priority first");
    } finally {
      a.close();
      copy.close();
    }
  });
});
