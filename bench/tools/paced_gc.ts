/**
 * The controller's young-generation collections under a paced load, after a burst of `submit()`
 * calls and without one, side by side (Deno). A burst keeps thousands of jobs alive through a
 * collection; V8 then decides to allocate every later object of the sites whose objects survived
 * in the old generation ("allocation-site pretenuring"). Such an object, dead within a millisecond,
 * keeps what it points to alive through the next two scavenges: each one copies and promotes it,
 * and the pauses grow with it. The tool shows whether the controller's hot path has such a site.
 *
 * Each run is a child process (`--v8-flags=--trace-gc-nvp`): a `BufferedProducer`, a
 * `WorkPullingController` and 4 scripted workers that answer each jobs frame in a later task (as
 * sockets make them); first `burst` jobs submitted at once with a `submit()` each (0: none) and
 * confirmed, then `rate` jobs/s, a `submit()` each on a 1 ms timer as the latency scenario paces
 * them, for a second unmeasured and then for `seconds`. For the scavenges of the paced part it
 * prints their number, the mean and largest pause, and the bytes each one kept (survived in the
 * young generation) and promoted; beside them the process's CPU time per paced job, and how many
 * paced jobs were still unconfirmed when the pacing ended (the workers kept up when none).
 *
 *   deno run -A bench/tools/paced_gc.ts [rate=100000] [seconds=4] [--burst=50000] [--rounds=2]
 *
 * @module
 */

import process from "node:process";
import { BufferedProducer, WorkPullingController } from "../../mod.ts";
import { commandLine, numberArg } from "../lib/cli.ts";
import { runToEnd } from "../lib/proc.ts";
import { binary, repoPath, sleep } from "../lib/runtime.ts";
import { attachScriptedWorkers } from "../lib/scripted_workers.ts";
import { median } from "../lib/stats.ts";

const { values, positionals } = commandLine({
  usage:
    "deno run -A bench/tools/paced_gc.ts [rate] [seconds] [--burst=N] [--rounds=N] (Deno only)",
  summary:
    "The controller's scavenges under a paced load, after a burst of submit() calls and without.",
  positionals: [
    { name: "rate", help: "paced jobs/s (default 100000)" },
    { name: "seconds", help: "paced seconds a run (default 4)" },
  ],
  flags: {
    burst: { kind: "value", value: "N", help: "jobs submitted at once first (default 50000)" },
    rounds: { kind: "value", value: "N", help: "runs with and without the burst (default 2)" },
    child: { kind: "value", value: "N", help: "run one measured child", internal: true },
  },
});
const rate = numberArg("rate", positionals[0], 100_000);
const seconds = numberArg("seconds", positionals[1], 4);
const PACING = "paced_gc: pacing";
const PACED = "paced_gc: paced";

if (values.child !== undefined) {
  await child(numberArg("--child", values.child, 0, 0));
  process.exit(0);
}
if (!("Deno" in globalThis)) {
  console.error("error: paced_gc.ts reads V8's GC trace of a Deno child; run it with deno");
  process.exit(2);
}
const burst = numberArg("--burst", values.burst, 50_000, 0);
const rounds = numberArg("--rounds", values.rounds, 2);

/** One scavenge of the paced part, from a `--trace-gc-nvp` line. */
interface Scavenge {
  readonly pause: number;
  readonly survived: number;
  readonly promoted: number;
}

/** What one measured child reports: its scavenges while pacing, and what the pacing cost. */
interface PacedRun {
  readonly scavenges: Scavenge[];
  /** CPU time of the process per paced job, µs. */
  readonly cpuPerJob: number;
  /** Paced jobs not yet confirmed when the pacing ended (the workers fell behind). */
  readonly behind: number;
}

async function measure(jobsAtOnce: number): Promise<PacedRun> {
  const { code, stdout, stderr } = await runToEnd(binary("deno"), [
    "run",
    "-A",
    "--quiet",
    "--v8-flags=--trace-gc-nvp",
    repoPath("bench/tools/paced_gc.ts"),
    String(rate),
    String(seconds),
    `--child=${jobsAtOnce}`,
  ], { timeout: 120_000 });
  if (code !== 0) throw new Error(`the measured child failed (${code}): ${stderr.slice(-2000)}`);
  const lines = stdout.split("\n");
  const from = lines.findIndex((line) => line.includes(PACING));
  const to = lines.findIndex((line) => line.includes(PACED));
  if (from < 0 || to < 0) throw new Error(`the measured child printed no pacing marks`);
  const scavenges: Scavenge[] = [];
  for (const line of lines.slice(from + 1, to)) {
    const json = line.indexOf("GC: {");
    if (json < 0) continue;
    const gc = JSON.parse(line.slice(json + 4));
    if (gc.gc !== "s") continue;
    scavenges.push({ pause: gc.pause, survived: gc.new_space_survived, promoted: gc.promoted });
  }
  const paced = JSON.parse(lines[to].slice(lines[to].indexOf(PACED) + PACED.length));
  return { scavenges, cpuPerJob: paced.cpuPerJob, behind: paced.behind };
}

const kb = (bytes: number) => `${Math.round(bytes / 1024).toLocaleString("en-US")} KB`;
const mean = (values: number[]) => values.reduce((sum, v) => sum + v, 0) / values.length;

console.log(
  `paced_gc on Deno: ${rate.toLocaleString("en-US")} jobs/s for ${seconds} s, a submit() each; ` +
    `burst ${burst.toLocaleString("en-US")} jobs`,
);
const promoted: Record<"burst" | "none", number[]> = { burst: [], none: [] };
for (let round = 1; round <= rounds; round++) {
  for (const kind of ["none", "burst"] as const) {
    const { scavenges, cpuPerJob, behind } = await measure(kind === "burst" ? burst : 0);
    if (scavenges.length === 0) {
      console.log(`  round ${round} ${kind}: no scavenge while pacing (pace longer)`);
      continue;
    }
    const pauses = scavenges.map((s) => s.pause);
    promoted[kind].push(mean(scavenges.map((s) => s.promoted)));
    console.log(
      `  round ${round} ${
        kind === "burst" ? "after a burst" : "no burst    "
      }: ${scavenges.length} ` +
        `scavenges, pause mean ${mean(pauses).toFixed(2)} ms, max ${
          Math.max(...pauses).toFixed(2)
        } ms; kept ${kb(mean(scavenges.map((s) => s.survived)))}, promoted ${
          kb(promoted[kind].at(-1)!)
        } a scavenge; ${cpuPerJob.toFixed(2)} µs of CPU a job, ${behind} jobs behind at the end`,
    );
  }
}
if (promoted.burst.length > 0 && promoted.none.length > 0) {
  const ratio = median(promoted.burst) / Math.max(1, median(promoted.none));
  console.log(`promoted a scavenge, after a burst / without: ${ratio.toFixed(1)}x (medians)`);
}
process.exit(0);

/** The measured process: the burst, then the paced load between two marks. */
async function child(jobsAtOnce: number): Promise<void> {
  const producer = new BufferedProducer<{ n: number }>();
  const controller = new WorkPullingController({ name: "bench", producer });
  await controller.start();
  const workers = attachScriptedWorkers(controller, { answerIn: "macrotask" });
  for (let n = 0; n < jobsAtOnce; n++) producer.submit({ n }).catch(() => {});
  await workers.confirmedAll(jobsAtOnce);
  let submitted = 0;
  const pace = async (ms: number) => {
    const started = performance.now();
    const first = submitted;
    while (performance.now() - started < ms) {
      const due = first + Math.floor((performance.now() - started) / 1000 * rate);
      for (; submitted < due; submitted++) producer.submit({ n: submitted }).catch(() => {});
      await sleep(1);
    }
  };
  await pace(1000); // unmeasured: the optimizing compiler's work and the heap's growth settle
  console.log(PACING);
  const cpu = process.cpuUsage();
  const first = submitted;
  await pace(seconds * 1000);
  const used = process.cpuUsage(cpu);
  const cpuPerJob = (used.user + used.system) / (submitted - first);
  const behind = jobsAtOnce + submitted - workers.confirmed;
  await workers.confirmedAll(jobsAtOnce + submitted);
  console.log(`${PACED} ${JSON.stringify({ cpuPerJob, behind })}`);
  await controller.close();
}
