/**
 * The chaos soak, for one minute at 300 jobs/s (`tools/soak/main.ts`): a controller process on a
 * Deno KV file, two Deno and two Bun worker processes behind TCP proxies, a producer process over
 * `POST /jobs`, and seeded faults every 1–5 s. It must lose nothing, drain, crash nothing, inject
 * every kind of fault, and leave no duplicate that a fault does not explain. Then the same for
 * 45 s at 200 jobs/s with three instances sharing the flow on the KV file (`--instances 3`),
 * whose faults include instance kills and stops; and for 40 s at 200 jobs/s with two instances
 * whose KV (a `RemoteKv`) adds 2 ms to each commit and 1 ms to each read and meets a fault in 2%
 * of the commits (`--kv-latency 2/1 --kv-faults 0.02`: lost answers, locked, slow).
 *
 * Runs under `deno test` only: the soak is a Deno program that starts its own Bun workers. The
 * soak runs in its own process group, so that whatever happens every process it started is
 * killed at the end (a SIGKILL reaches stopped processes too).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { FAULT_KINDS, type FaultKind, SHARED_FAULT_KINDS } from "../tools/soak/records.ts";
import type { Summary } from "../tools/soak/summary.ts";
import { within } from "./support/waiting.ts";

const root = new URL("..", import.meta.url).pathname;
const skip = "Deno" in globalThis
  ? false
  : "runs under deno test only: the soak is a Deno program and starts its own Bun workers";

test(
  "a one-minute chaos soak loses nothing and has no avoidable duplicate",
  { skip },
  () => soak({ minutes: 1, rate: 300, flags: [], kinds: FAULT_KINDS }),
);

test(
  "a chaos soak of three instances sharing a flow loses nothing and has no avoidable duplicate",
  {
    skip,
  },
  () =>
    soak({
      minutes: 0.75,
      rate: 200,
      flags: ["--instances", "3"],
      kinds: SHARED_FAULT_KINDS,
    }),
);

test(
  "a chaos soak of two instances whose KV adds latency and faults loses nothing",
  { skip },
  () =>
    soak({
      minutes: 0.67,
      rate: 200,
      flags: ["--instances", "2", "--kv-latency", "2/1", "--kv-faults", "0.02"],
      kinds: SHARED_FAULT_KINDS,
      check: (summary, context) => {
        assert.deepEqual(summary.settings.remoteKv, {
          commitLatencyMs: 2,
          readLatencyMs: 1,
          faultRate: 0.02,
        });
        for (const kind of ["lost-answer", "locked", "slow"] as const) {
          assert.ok((summary.kv?.byKind[kind] ?? 0) > 0, `no KV ${kind} fault\n${context}`);
        }
      },
    }),
);

async function soak(
  { minutes, rate, flags, kinds, check }: {
    minutes: number;
    rate: number;
    flags: string[];
    kinds: readonly FaultKind[];
    /** More to check in the summary. */
    check?: (summary: Summary, context: string) => void;
  },
): Promise<void> {
  const out = mkdtempSync(join(tmpdir(), "workpull-soak-test-"));
  const soak = spawn(Deno.execPath(), [
    "run",
    "-A",
    "--unstable-kv",
    "tools/soak/main.ts",
    "--minutes",
    String(minutes),
    "--rate",
    String(rate),
    "--seed",
    "1",
    ...flags,
    "--out",
    out,
  ], { cwd: root, detached: true, stdio: ["ignore", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  soak.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
  soak.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
  const exited = new Promise<number | null>((resolve) => soak.on("exit", (code) => resolve(code)));
  try {
    // The drain goes on while jobs finish: after a late controller restart a chain of long jobs
    // on one endpoint can take it past two minutes (tools/soak/drain.ts).
    const code = await within(exited, "the soak to finish", 6 * 60_000);
    assert.ok(existsSync(join(out, "summary.json")), `no summary.json\n${stdout}\n${stderr}`);
    const summary: Summary = JSON.parse(readFileSync(join(out, "summary.json"), "utf8"));
    const context = `${stdout}\n${stderr.split("\n").slice(-30).join("\n")}`;
    assert.ok(summary.accepted >= rate * minutes * 60 * 0.8, `too few jobs accepted\n${context}`);
    assert.equal(summary.lost, 0, `lost ${summary.lostExamples.join(", ")}\n${context}`);
    assert.equal(summary.ran, summary.accepted);
    assert.equal(summary.drain.complete, true, context);
    assert.deepEqual(summary.crashes, [], context);
    for (const kind of kinds) {
      assert.ok(summary.faults.byKind[kind] > 0, `no ${kind} fault\n${context}`);
    }
    assert.ok(summary.restarts.count > 0 && summary.restarts.withoutDelivery === 0, context);
    // Every SIGTERMed worker drained by itself; its jobs ran once (no excuse covers them).
    assert.equal(summary.gracefulStops.timedOut, 0, context);
    assert.equal(
      summary.duplicates.avoidable,
      0,
      `avoidable duplicates: ${JSON.stringify(summary.avoidable, null, 1)}\n${context}`,
    );
    check?.(summary, context);
    assert.equal(code, 0, context);
    assert.match(stdout, /^soak: \d+ accepted, \d+ ran, lost 0, .* — ok\n$/);
  } finally {
    try {
      process.kill(-soak.pid!, "SIGKILL"); // the soak's whole process group
    } catch {
      // Already gone.
    }
    await within(exited, "the soak to be reaped");
    rmSync(out, { recursive: true, force: true });
  }
}
