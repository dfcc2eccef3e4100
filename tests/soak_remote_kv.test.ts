/**
 * The soak's `--kv-latency` and `--kv-faults` (`tools/soak/remote_kv.ts`): the flags and their
 * refusals, the seeded fault draws (a third of the rate each, the same for the same seed), the
 * wrapper that journals each fault, and the verdict that counts them. Runs under Deno and Bun;
 * the wrapper's test needs Deno KV and runs under Deno only.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { parseOptions } from "../tools/soak/options.ts";
import { SoakPaths } from "../tools/soak/records.ts";
import { faultDraw, incarnationSeed, remoteKv } from "../tools/soak/remote_kv.ts";
import { summaryLine } from "../tools/soak/summary.ts";
import { verify } from "../tools/soak/verify.ts";

test("--kv-latency and --kv-faults are read, and refused without two instances", () => {
  const options = parseOptions(["--instances", "2", "--kv-latency", "10/5", "--kv-faults", "0.01"]);
  assert.deepEqual(options.kvLatency, { commit: 10, read: 5 });
  assert.equal(options.kvFaults, 0.01);
  const plain = parseOptions(["--instances", "2"]);
  assert.equal(plain.kvLatency, undefined);
  assert.equal(plain.kvFaults, 0);
  assert.throws(
    () => parseOptions(["--kv-latency", "10/5"]),
    /--kv-latency needs --instances 2 or more/,
  );
  assert.throws(
    () => parseOptions(["--instances", "1", "--kv-faults", "0.1"]),
    /--kv-faults needs --instances 2 or more/,
  );
  assert.throws(
    () => parseOptions(["--instances", "2", "--kv-latency", "10"]),
    /--kv-latency must be COMMIT\/READ/,
  );
  assert.throws(
    () => parseOptions(["--instances", "2", "--kv-latency", "10/-1"]),
    /--kv-latency must be in 0..60000/,
  );
  assert.throws(() => parseOptions(["--instances", "2", "--kv-faults", "1.5"]), /0..1/);
});

test("the fault draws split the rate evenly and repeat for a seed", () => {
  const seed = incarnationSeed(11, "i1", 1);
  assert.notEqual(seed, incarnationSeed(11, "i1", 2));
  assert.notEqual(seed, incarnationSeed(11, "i2", 1));
  assert.equal(seed, incarnationSeed(11, "i1", 1));
  const a = faultDraw(0.03, seed), b = faultDraw(0.03, seed);
  const counts: Record<string, number> = {};
  for (let i = 0; i < 300_000; i++) {
    const fault = a();
    assert.equal(fault, b());
    counts[fault ?? "none"] = (counts[fault ?? "none"] ?? 0) + 1;
  }
  for (const kind of ["lost-answer", "locked", "slow"]) {
    assert.ok(Math.abs(counts[kind] - 3000) < 300, `${kind}: ${counts[kind]}`);
  }
  const none = faultDraw(0, seed);
  for (let i = 0; i < 1000; i++) assert.equal(none(), undefined);
});

test(
  "the instances' RemoteKv injects the drawn faults and reports each",
  { skip: "Deno" in globalThis ? false : "needs Deno KV" },
  async () => {
    const local = await Deno.openKv(":memory:");
    const heard: [string, number][] = [];
    const kv = remoteKv(
      local,
      { commitLatency: 0, readLatency: 0, faultRate: 0.3, seed: 7 },
      (fault, commit) => heard.push([fault, commit]),
    );
    try {
      const draw = faultDraw(0.3, 7);
      for (let commit = 1; commit <= 60; commit++) {
        const expected = draw();
        const outcome = await kv.atomic().set(["k", commit], commit).commit().then(
          () => "ok",
          (error: Error) => error.message,
        );
        const landed = (await local.get(["k", commit])).versionstamp !== null;
        if (expected === "locked") {
          assert.equal(outcome, "database is locked");
          assert.equal(landed, false);
        } else if (expected === "lost-answer") {
          assert.match(outcome, /connection was lost/);
          assert.equal(landed, true);
        } else {
          assert.equal(outcome, "ok");
          assert.equal(landed, true);
        }
      }
      assert.ok(heard.length > 5);
      const replay = faultDraw(0.3, 7);
      const expected: [string, number][] = [];
      for (let commit = 1; commit <= 60; commit++) {
        const fault = replay();
        if (fault) expected.push([fault, commit]);
      }
      assert.deepEqual(heard, expected);
    } finally {
      kv.close();
    }
  },
);

test("the verdict records the RemoteKv settings and counts the faults by kind", () => {
  const paths = new SoakPaths(mkdtempSync(join(tmpdir(), "workpull-soak-kv-")));
  try {
    for (const dir of [paths.controllers, paths.producers, paths.workers]) {
      mkdirSync(dir, { recursive: true });
    }
    const write = (file: string, record: object) =>
      appendFileSync(file, JSON.stringify(record) + "\n");
    write(paths.soak, { ev: "spawn", role: "controller", name: "i1", pid: 401, t: 0 });
    write(paths.soak, { ev: "spawn", role: "controller", name: "i2", pid: 402, t: 0 });
    write(paths.soak, { ev: "spawn", role: "worker", name: "w1", pid: 501, t: 0 });
    const faults = ["lost-answer", "locked", "slow", "locked"];
    faults.forEach((fault, i) => {
      const pid = 401 + (i % 2);
      write(join(paths.controllers, `${pid}.jsonl`), {
        ev: "kv-fault",
        pid,
        fault,
        commit: i + 1,
        t: 100 + i,
      });
    });
    write(join(paths.producers, "300.jsonl"), { ev: "send", from: 1, to: 1, attempt: 1, t: 10 });
    write(join(paths.producers, "300.jsonl"), { ev: "ack", from: 1, to: 1, t: 20 });
    const worker = join(paths.workers, "w1.501.jsonl");
    write(worker, { ev: "start", id: "j1", ep: "w1", pid: 501, b: "b1", s: 1, t: 30 });
    write(worker, { ev: "end", id: "j1", ep: "w1", pid: 501, t: 40 });
    const summary = verify(paths, {
      settings: {
        minutes: 1,
        rate: 1,
        seed: 1,
        workers: [],
        ackDelayMs: 10,
        reconnectGraceMs: 1000,
        drainDeadlineS: 60,
        instances: 2,
        leaseMs: 3000,
        remoteKv: { commitLatencyMs: 10, readLatencyMs: 5, faultRate: 0.01 },
      },
      drain: { complete: true, remaining: 0, ms: 0 },
    });
    assert.deepEqual(summary.kv, {
      faults: 4,
      byKind: { "lost-answer": 1, locked: 2, slow: 1 },
    });
    assert.equal(summary.lost, 0);
    assert.match(
      summaryLine(summary),
      /, kv 10\/5 ms, kv faults 4 at 0.01 \(lost-answer 1, locked 2, slow 1\), /,
    );
  } finally {
    rmSync(paths.out, { recursive: true, force: true });
  }
});
