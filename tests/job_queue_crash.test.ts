/**
 * A job queue on a Deno KV file, its process killed with SIGKILL: the backlog survives (every job
 * runs after a restart), and so do the tries (attempt counts continue where they were), also when
 * the kills land while workers drain it.
 */

import { after, test } from "node:test";
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { readJsonLines } from "./fixtures/durable_support.ts";
import { openKv } from "./fixtures/open_kv.ts";
import { DenoKvJobStore } from "../src/backlog/deno_kv/job_store.ts";
import type { JobProcessConfig, JobProcessReport } from "./fixtures/job_queue_process.ts";
import { waitFor, within } from "./support/waiting.ts";

const runtime: "deno" | "bun" = "Deno" in globalThis ? "deno" : "bun";
const children = new Set<ChildProcess>();
after(() => {
  for (const child of children) child.kill("SIGKILL");
});

/** A job queue process, its reports, and its exit. */
function start(config: JobProcessConfig) {
  const fixture = new URL("./fixtures/job_queue_process.ts", import.meta.url).pathname;
  const [command, args] = runtime === "deno"
    ? [Deno.execPath(), ["run", "-A", "--unstable-kv", "--quiet", fixture]]
    : [process.execPath, [fixture]];
  const child = spawn(command, args, {
    env: { ...process.env, WORKPULL_JOBS: JSON.stringify(config) },
    stdio: ["ignore", "pipe", "pipe"],
  });
  children.add(child);
  const reports: JobProcessReport[] = [];
  let stderr = "";
  let pending = "";
  child.stdout!.setEncoding("utf8");
  child.stdout!.on("data", (chunk: string) => {
    pending += chunk;
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines) if (line.trim()) reports.push(JSON.parse(line));
  });
  child.stderr!.setEncoding("utf8");
  child.stderr!.on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) =>
    child.on("exit", (code) => {
      children.delete(child);
      resolve(code);
    })
  );
  return {
    reports,
    exited,
    until: (what: string, check: (report: JobProcessReport) => boolean, timeout = 60_000) =>
      waitFor(() => reports.some(check), () => `${what}\n${stderr}`, timeout),
    kill: async (signal: "SIGKILL" | "SIGTERM") => {
      child.kill(signal);
      await within(exited, "the process to exit", 15_000);
    },
  };
}

function scenario(): string {
  return mkdtempSync(join(tmpdir(), "workpull-jobs-"));
}

test("killed with 10,000 jobs in the backlog and no worker, a restarted queue runs every job", {
  timeout: 180_000,
}, async () => {
  const dir = scenario();
  try {
    const first = start({ dir, run: 1, add: 10_000 });
    await first.until("10,000 jobs added", (r) => r.ev === "added");
    await first.kill("SIGKILL");
    const second = start({ dir, run: 2, workers: 4 });
    await second.until("ready", (r) => r.ev === "ready");
    const ready = second.reports.find((r) => r.ev === "ready");
    assert.equal(ready?.ev === "ready" && ready.backlog, 10_000, "the backlog came back whole");
    const ran = () =>
      new Set(readJsonLines<{ id: string }>(join(dir, "results.jsonl")).map((r) => r.id));
    await waitFor(() => ran().size === 10_000, () => `10,000 jobs run (${ran().size})`, 120_000);
    assert.ok(
      readJsonLines<{ run: number }>(join(dir, "results.jsonl")).every((r) => r.run === 2),
      "nothing ran before the kill",
    );
    await second.kill("SIGTERM");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("killed while four adds are in flight (sharing commits), every add that resolved is stored", {
  timeout: 180_000,
}, async () => {
  const dir = scenario();
  try {
    const first = start({ dir, run: 1, add: 200_000, addBatch: 100, addInFlight: 4 });
    const stored = () =>
      first.reports.filter((r): r is Extract<JobProcessReport, { ev: "stored" }> =>
        r.ev === "stored"
      );
    await first.until("50 batches stored", () => stored().length >= 50);
    await first.kill("SIGKILL");
    const resolved = stored();
    assert.ok(resolved.length < 2_000, "killed before every batch was added");
    const kv = await openKv(join(dir, "jobs.kv"));
    try {
      const store = new DenoKvJobStore(kv, { prefix: ["jobs"], maxBacklog: 1_000_000 });
      await store.load();
      const missing: string[] = [];
      for (const report of resolved) {
        for (let n = report.first; n < report.first + report.count; n++) {
          if ((await store.get(`job-${n}`))?.state !== "waiting") missing.push(`job-${n}`);
        }
      }
      assert.deepEqual(missing.slice(0, 10), [], `${missing.length} acknowledged jobs missing`);
      assert.ok(store.counts().waiting >= resolved.length * 100);
      store.close();
    } finally {
      kv.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a failing job's attempt count survives a SIGKILL: it ends dead after exactly its attempts", {
  timeout: 120_000,
}, async () => {
  const dir = scenario();
  const defaults = { attempts: 3, backoff: { type: "fixed", delay: 200 } } as const;
  try {
    const first = start({ dir, run: 1, add: 1, workers: 1, failing: ["job-1"], defaults });
    await first.until(
      "two failed tries",
      (r) => r.ev === "job" && r.state === "failed" && r.attempts === 2,
    );
    await first.kill("SIGKILL");
    const second = start({ dir, run: 2, workers: 1, failing: ["job-1"], defaults });
    await second.until("dead", (r) => r.ev === "job" && r.state === "dead", 30_000);
    const dead = second.reports.find((r) => r.ev === "job" && r.state === "dead");
    assert.equal(dead?.ev === "job" && dead.attempts, 3);
    const runs = readJsonLines<{ id: string; run: number; attempt: number }>(
      join(dir, "results.jsonl"),
    );
    assert.deepEqual(runs.map((r) => [r.run, r.attempt]), [[1, 1], [1, 2], [2, 3]]);
    await second.kill("SIGTERM");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("killed twice while workers drain 3,000 jobs, the queue completes every job and loses none", {
  timeout: 180_000,
}, async () => {
  const dir = scenario();
  const jobs = 3_000;
  try {
    const results = () =>
      readJsonLines<{ id: string; run: number; attempt: number }>(join(dir, "results.jsonl"));
    // Kill when a third of the jobs ran, then when two thirds did: mid-drain, tries in flight.
    const first = start({ dir, run: 1, add: jobs, workers: 3 });
    await waitFor(() => results().length >= 1_000, () => `1,000 results (${results().length})`);
    await first.kill("SIGKILL");
    const second = start({ dir, run: 2, workers: 3 });
    await waitFor(() => results().length >= 2_000, () => `2,000 results (${results().length})`);
    await second.kill("SIGKILL");
    const third = start({ dir, run: 3, workers: 3 });
    const ran = () => new Set(results().map((r) => r.id));
    await waitFor(() => ran().size === jobs, () => `every job run (${ran().size})`, 120_000);
    await third.kill("SIGTERM");

    // The store, read back by a new handle, holds every job completed and nothing else.
    const kv = await openKv(join(dir, "jobs.kv"));
    try {
      const store = new DenoKvJobStore(kv, { prefix: ["jobs"] });
      await store.load();
      // Closing does not wait for the last confirmations: a job whose confirmation it cut off is
      // still active (it runs again at the next start), never waiting or gone.
      const { active, ...others } = store.counts();
      assert.deepEqual(others, { waiting: 0, scheduled: 0, failed: 0, dead: 0 });
      const runs = new Map<string, number[]>();
      for (const r of results()) runs.set(r.id, [...(runs.get(r.id) ?? []), r.attempt]);
      for (let n = 1; n <= jobs; n++) {
        const id = `job-${n}`;
        const job = await store.get(id);
        assert.ok(job?.state === "completed" || job?.state === "active", `${id}: ${job?.state}`);
        // A try the kill interrupted runs again as the same try or a later one, never an earlier.
        const attempts = runs.get(id)!;
        assert.ok(attempts.every((a, i) => i === 0 || a >= attempts[i - 1]), `${id}: ${attempts}`);
        assert.ok(job.attempts >= attempts.at(-1)!, `${id}: ${job.attempts} tries stored`);
      }
      assert.ok(active <= 3 * 20, `${active} confirmations cut off (at most the workers' windows)`);
      const again = results().length - jobs;
      assert.ok(again <= 2 * 500, `${again} jobs ran again (at most what two kills interrupted)`);
      store.close();
    } finally {
      kv.close();
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
