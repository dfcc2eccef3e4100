/**
 * The benchmark suite's own smoke tests, through `bench/run.ts` as a user runs it: its command
 * line (`--help` prints the usage and writes nothing; an unknown flag or scenario is an error
 * that names it and writes nothing), the batched raw WebSocket baseline beside workpull, the
 * latency scenario's record of the idle host's timer oversleep and of the kernel's threads, the
 * backlog scenario (ingest and drain on a KV file), the scripted controller (the batched server
 * speaking workpull's protocol to real worker processes), and the NATS JetStream peer with tiny numbers
 * — every job acked, every figure above zero — so that CI proves the peer works. These measure
 * nothing: speed figures come from full runs only.
 *
 * Deno only (the suite's entry point runs on Deno and starts its Bun part itself). Outside CI a
 * missing `nats-server` skips the NATS test; in CI (which installs it) it is a failure.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { natsServerBinary } from "../bench/lib/nats_server.ts";
import { within } from "./support/waiting.ts";

const root = new URL("..", import.meta.url).pathname;
const onBun = "Bun" in globalThis;
const bunSkip = onBun ? "bench/run.ts is driven from Deno (it runs its Bun part itself)" : false;
const JOBS = 3000;
if (onBun) console.log(`bench_smoke.test.ts: every test skipped on Bun: ${bunSkip}`);

/** Run `bench/run.ts` with `args` on Deno; resolves with its exit code and output. */
function runSuite(
  args: string[],
  timeout: number,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(process.execPath, ["run", "-A", "--unstable-kv", "bench/run.ts", ...args], {
    cwd: root,
    stdio: ["ignore", "pipe", "pipe"],
  });
  let stdout = "";
  let stderr = "";
  child.stdout.on("data", (chunk) => (stdout += chunk));
  child.stderr.on("data", (chunk) => (stderr += chunk));
  const exited = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on("exit", (code) => resolve({ code, stdout, stderr }))
  );
  return within(exited, `bench/run.ts ${args.join(" ")} to finish`, timeout).catch((error) => {
    child.kill("SIGKILL");
    throw error;
  });
}

/** Name and modification time of every file directly in `dir`. */
function snapshot(dir: string): string[] {
  return readdirSync(dir).sort().map((name) => `${name} ${statSync(join(dir, name)).mtimeMs}`);
}

/** Run `body` with a fresh temporary directory, removed afterwards. */
async function withTempDir(body: (dir: string) => Promise<void>): Promise<void> {
  const dir = mkdtempSync(join(tmpdir(), "workpull-bench-smoke-"));
  try {
    await body(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("bench/run.ts --help prints every flag and scenario and writes nothing", {
  skip: bunSkip,
  timeout: 60_000,
}, async () => {
  await withTempDir(async (out) => {
    const before = snapshot(join(root, "bench"));
    for (const help of ["--help", "-h"]) {
      // Flags that would write, given beside --help, must not.
      const result = await runSuite(
        [help, "--write", `--out=${out}`, `--json=${join(out, "r.json")}`],
        30_000,
      );
      assert.equal(result.code, 0, result.stderr);
      for (const word of ["--scenarios", "--runtimes", "--jobs", "--rounds", "--quick"]) {
        assert.match(result.stdout, new RegExp(word), `usage lists ${word}`);
      }
      for (
        const scenario of [
          "throughput",
          "peer",
          "nats",
          "durable",
          "cluster",
          "latency",
          "failover",
        ]
      ) {
        assert.match(result.stdout, new RegExp(`\\b${scenario}\\b`), `usage lists ${scenario}`);
      }
      assert.doesNotMatch(result.stdout, /workpull benchmarks on/, "no scenario started");
    }
    assert.deepEqual(readdirSync(out), [], "nothing written to --out");
    assert.deepEqual(snapshot(join(root, "bench")), before, "nothing written to bench/");
  });
});

test("bench/run.ts refuses an unknown flag or scenario by name and writes nothing", {
  skip: bunSkip,
  timeout: 60_000,
}, async () => {
  await withTempDir(async (out) => {
    const write = ["--write", `--out=${out}`, `--json=${join(out, "r.json")}`];
    const flag = await runSuite(["--no-such-flag", ...write], 30_000);
    assert.notEqual(flag.code, 0);
    assert.match(flag.stderr, /unknown flag --no-such-flag/);
    const scenario = await runSuite(["--scenarios=throughput,warp", ...write], 30_000);
    assert.notEqual(scenario.code, 0);
    assert.match(scenario.stderr, /unknown scenario "warp"/);
    assert.deepEqual(readdirSync(out), [], "nothing written");
  });
});

test("the batched raw WebSocket baseline runs beside workpull and the per-job baseline", {
  skip: bunSkip,
  timeout: 240_000,
}, async () => {
  await withTempDir(async (out) => {
    const file = join(out, "results.json");
    const args = ["--scenarios=throughput", "--runtimes=deno", `--jobs=${JOBS}`, "--rounds=1"];
    const result = await runSuite([...args, `--json=${file}`], 200_000);
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    const results = JSON.parse(readFileSync(file, "utf8"));
    const pairs = results.runtimes.deno.throughput.pairs;
    assert.deepEqual(pairs.map((p: { topology: string }) => p.topology), ["1×4", "4×1"]);
    for (const pair of pairs) {
      for (const system of [pair.raw, pair.batched, pair.workpull, pair.jobQueue]) {
        assert.equal(system.samples.length, 1);
        assert.ok(system.median > 0, `jobs/s above zero in ${pair.topology}`);
      }
      assert.equal(pair.batchedRatios.length, 1, "every round's ratio is recorded");
      assert.ok(pair.batchedRatio > 0);
      // The job queue against the controller alone, in the same round.
      assert.equal(pair.jobQueueRatios.length, 1);
      const ratio = pair.jobQueue.samples[0] / pair.workpull.samples[0];
      assert.ok(Math.abs(pair.jobQueueRatios[0] - ratio) < 0.002, `${pair.jobQueueRatios[0]}`);
    }
    const load = results.loads.find((l: { scenario: string }) => l.scenario === "throughput");
    assert.ok(load, "the throughput scenario's load is recorded");
    if (process.platform === "linux" && load.othersCores !== null) {
      // The hypervisor's steal is recorded apart, as part of the other processes' CPU.
      assert.equal(typeof load.stealCores, "number");
      assert.ok(load.stealCores >= 0 && load.stealCores <= load.othersCores + 0.1);
    }
    assert.equal(typeof results.busy.busy, "boolean");
    assert.ok(
      results.targets.some((t: { target: string }) => /batched raw WebSocket limit/.test(t.target)),
    );
  });
});

test("the scripted controller runs real workpull worker processes through every job", {
  skip: bunSkip,
  timeout: 120_000,
}, async () => {
  // bench/tools/round_trips.ts --scripted: the batched server speaking workpull's protocol.
  const { ScriptedControllerSetup } = await import("../bench/lib/batched_raw.ts");
  const setup = await ScriptedControllerSetup.start({ processes: 2, perProcess: 2 }, 100);
  try {
    assert.equal(setup.server.sockets, 4, "every endpoint registered over its own socket");
    for (let round = 1; round <= 2; round++) {
      assert.ok(await setup.run(JOBS) > 0);
      assert.equal(
        setup.server.confirmed,
        round * JOBS,
        "the confirmed sequences add up to every job handed out",
      );
    }
  } finally {
    await setup.close();
  }
});

test("the latency scenario records the idle host's timer oversleep beside its tail", {
  skip: bunSkip,
  timeout: 120_000,
}, async () => {
  await withTempDir(async (out) => {
    const file = join(out, "results.json");
    const args = [
      "--scenarios=latency",
      "--runtimes=deno",
      `--jobs=${JOBS}`,
      "--rounds=1",
      "--quick",
    ];
    const result = await runSuite([...args, `--json=${file}`], 100_000);
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    const latency = JSON.parse(readFileSync(file, "utf8")).runtimes.deno.latency;
    assert.equal(latency.rounds.length, 1, "--rounds applies to the latency scenario");
    const host = latency.hostTimer;
    assert.ok(host.count > 100, `a 1 ms timer woke ${host.count} times in ${host.seconds} s`);
    assert.ok(host.p50 >= 0 && host.p50 <= host.p99 && host.p99 <= host.max);
    assert.equal(typeof host.over5ms, "number");
    assert.match(result.stdout, /idle host: a 1 ms timer woke late by p99 /);
    if (process.platform === "linux") {
      // What the kernel's own threads ran during the rounds (an empty list on a quiet kernel).
      assert.ok(Array.isArray(latency.kernelThreads), "kernelThreads recorded");
      assert.match(result.stdout, /kernel threads during the rounds: /);
      // How long the controller's and the workers' threads ran and waited for a core.
      const waits = latency.runQueue;
      assert.ok(waits.wallMs > 0 && waits.controller.runMs > 0 && waits.workers.runMs > 0);
      assert.ok(waits.controller.waitMs >= 0 && waits.workers.waitMs >= 0);
      assert.match(result.stdout, /the controller's thread waited for a core [\d,]+ ms/);
    }
    const targets = JSON.parse(readFileSync(file, "utf8")).targets;
    const p99 = targets.find((t: { target: string }) => /\(deno\): p99 <= 5 ms/.test(t.target));
    assert.match(p99.measured, /idle host's 1 ms timer late by up to /);
  });
});

test("the backlog scenario ingests over POST /jobs and drains to a worker, beside raw KV", {
  skip: bunSkip,
  timeout: 240_000,
}, async () => {
  await withTempDir(async (out) => {
    const file = join(out, "results.json");
    const args = ["--scenarios=backlog", "--runtimes=deno", `--jobs=${JOBS}`, "--rounds=1"];
    const result = await runSuite([...args, `--json=${file}`], 200_000);
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    const backlog = JSON.parse(readFileSync(file, "utf8")).runtimes.deno.backlog;
    assert.equal(backlog.jobs, JOBS);
    for (const series of ["ingest", "rawIngest", "drain", "rawDrain"]) {
      assert.equal(backlog[series].samples.length, 1, series);
      assert.ok(backlog[series].median > 0, `${series}: jobs/s above zero`);
    }
    assert.equal(backlog.ratios.drain.length, 1, "every round's ratio is recorded");
  });
});

const natsServer = natsServerBinary();

test("the NATS JetStream peer acks every job, memory and file storage", {
  skip: bunSkip ||
    (natsServer || process.env.CI
      ? false
      : "nats-server is not installed (apt-get install nats-server)"),
  timeout: 240_000,
}, async () => {
  assert.ok(natsServer, "nats-server is not installed (CI must install Debian's nats-server)");
  await withTempDir(async (out) => {
    const file = join(out, "results.json");
    const args = ["--scenarios=nats", "--runtimes=deno", `--jobs=${JOBS}`, "--rounds=1"];
    const result = await runSuite([...args, `--json=${file}`], 200_000);
    assert.equal(result.code, 0, `${result.stdout}\n${result.stderr}`);
    const { nats } = JSON.parse(readFileSync(file, "utf8"));
    assert.ok(!("skipped" in nats), `NATS peer skipped: ${nats.skipped}`);
    assert.equal(nats.jobs, JOBS);
    for (const storage of ["memory", "file"]) {
      assert.ok(nats[storage].samples.length >= 1);
      for (const rate of nats[storage].samples) assert.ok(rate > 0, `${storage} jobs/s above zero`);
      for (const acked of nats.acked[storage]) {
        assert.equal(acked, JOBS, `${storage}: every job acked`);
      }
    }
    // Run from Deno, workpull on a KV file ran beside the file round, and the ratio pairs them.
    assert.equal(nats.besideFile.samples.length, nats.file.samples.length);
    assert.ok(nats.besideFile.samples[0] > 0, "workpull on a KV file: jobs/s above zero");
    const paired = nats.besideFile.samples[0] / nats.file.samples[0];
    assert.ok(Math.abs(nats.besideFile.ratios[0] - paired) < 0.01, "the ratio is of the pair");
  });
});
