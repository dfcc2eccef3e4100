/**
 * The controller's cost per job in **instructions**, counted by Valgrind's callgrind: the
 * `controller_cpu.ts` workload (producer, controller, 4 scripted workers, no sockets) run twice
 * under `valgrind --tool=callgrind`, with 2 and with 6 rounds of `jobs` jobs (after the same
 * warm-up); the difference of the two totals divided by the 4 rounds' jobs is what one more job
 * costs in steady state, with the start-up, the module loading and the JIT warm-up cancelled out
 * and the garbage collector's cycles averaged over several rounds.
 *
 * Why: on a shared 2-core machine CPU-time figures swing by 2x with the load of other processes
 * (caches, hyper-threads, frequency); an instruction count swings much less, so two commits (or a
 * change and its revert) can be compared on a busy machine to within a few per cent (the job-queue
 * workload of one commit counted 52,075 and 55,362 instructions a job in two runs on 2026-12-05:
 * the JIT's tiering and the collections still vary; count each side twice). It is a count, not a
 * time: it ignores cache misses and the cost of each instruction, so confirm a gain with
 * `controller_cpu.ts` on a quiet machine. V8 runs with `--single-threaded` (compilation and
 * garbage collection on the main thread: repeatable; callgrind counts every thread anyway);
 * Bun runs with its concurrent JIT off. Both runs go in parallel. Slow: a few minutes.
 *
 *   deno run -A bench/tools/controller_instructions.ts [--runtime=deno|bun] [--jobs=N] [--outcomes]
 *     [--job-queue]
 *
 * Needs `valgrind` (Debian: `apt-get install valgrind`).
 *
 * @module
 */

import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { commandLine, numberArg } from "../lib/cli.ts";
import { binary, repoPath, type Runtime } from "../lib/runtime.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";

const { values } = commandLine({
  usage:
    "deno run -A bench/tools/controller_instructions.ts [--runtime=deno|bun] [--jobs=N] [--outcomes] [--job-queue]",
  summary: [
    "Instructions per job of the controller_cpu.ts workload under valgrind's callgrind: two runs",
    "(2 and 6 rounds of N jobs) and the difference, so start-up and warm-up cancel out.",
    "Repeatable on a busy machine, unlike CPU time. Needs valgrind; takes several minutes.",
  ].join("\n"),
  flags: {
    runtime: { kind: "value", value: "deno|bun", help: "the runtime to count (default deno)" },
    jobs: { kind: "value", value: "N", help: "jobs per round (default 20000)" },
    outcomes: { kind: "switch", help: "the outcomes mode of controller_cpu.ts (--outcomes)" },
    "job-queue": {
      kind: "switch",
      help: "a JobQueue on a MemoryJobStore (controller_cpu.ts --job-queue)",
    },
  },
});
const target = (values.runtime ?? "deno") as string;
if (target !== "deno" && target !== "bun") {
  console.error(`error: unknown runtime "${target}" (runtimes: deno, bun)`);
  process.exit(2);
}
const jobs = numberArg("--jobs", values.jobs, 20_000);
const FEW = 2;
const MANY = 6;
/** The longest a callgrind run may take. */
const TIMEOUT_MS = 90 * 60_000;
const outcomes = values.outcomes === true;
const jobQueue = values["job-queue"] === true;
/** How the workload is named in the output. */
const mode = jobQueue ? " (job queue)" : outcomes ? " (outcomes)" : "";

/** Run the workload with `rounds` rounds under callgrind; its instruction total. */
function count(runtime: Runtime, rounds: number, dir: string): Promise<number> {
  const out = join(dir, `callgrind.${rounds}.out`);
  const script = repoPath("bench", "tools", "controller_cpu.ts");
  const workload = [
    String(jobs),
    String(rounds),
    ...(outcomes ? ["--outcomes"] : []),
    ...(jobQueue ? ["--job-queue"] : []),
  ];
  const command = runtime === "deno"
    ? [binary("deno"), "run", "-A", "--quiet", "--v8-flags=--single-threaded", script, ...workload]
    : [binary("bun"), script, ...workload];
  const args = [
    "--tool=callgrind",
    `--callgrind-out-file=${out}`,
    "--smc-check=all-non-file",
    ...command,
  ];
  const env = { ...process.env, BUN_JSC_useConcurrentJIT: "0" };
  return new Promise((resolve, reject) => {
    const child = spawn("valgrind", args, { env, stdio: ["ignore", "pipe", "pipe"] });
    // Bounded: a run that stops making progress (seen once under valgrind) is killed.
    const timer = setTimeout(() => child.kill("SIGKILL"), TIMEOUT_MS);
    child.on("exit", () => clearTimeout(timer));
    let output = "";
    child.stdout.on("data", (chunk) => (output += chunk));
    child.stderr.on("data", (chunk) => (output += chunk));
    child.on("error", (error) => reject(new Error(`cannot run valgrind: ${error.message}`)));
    child.on("exit", (code) => {
      if (code !== 0) {
        return reject(new Error(`callgrind run of ${rounds} rounds failed (${code}):\n${output}`));
      }
      const summary = readFileSync(out, "utf8").match(/^summary: (\d+)$/m);
      if (!summary) return reject(new Error(`no instruction total in ${out}`));
      resolve(Number(summary[1]));
    });
  });
}

const dir = makeTempDir("callgrind");
try {
  console.log(
    `counting ${target}${mode}: ${FEW} and ${MANY} rounds of ${jobs} jobs under callgrind…`,
  );
  const [a, b] = await Promise.all([count(target, FEW, dir), count(target, MANY, dir)]);
  const perJob = (b - a) / ((MANY - FEW) * jobs);
  console.log(
    `controller + producer${mode} on ${target}: ${
      Math.round(perJob).toLocaleString("en-US")
    } instructions/job (totals ${a.toLocaleString("en-US")} and ${b.toLocaleString("en-US")})`,
  );
} finally {
  removeTempDir(dir);
}
