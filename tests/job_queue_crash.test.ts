/**
 * A job queue on a Deno KV file, its process killed with SIGKILL: the backlog survives (every job
 * runs after a restart), and so do the tries (attempt counts continue where they were).
 */

import { after, test } from "node:test";
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { readJsonLines } from "./fixtures/durable_support.ts";
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
