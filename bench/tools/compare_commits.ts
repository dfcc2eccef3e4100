/**
 * Two commits side by side, in one run on one machine: "is this change slower than the commit
 * before it?" (issues #8 and #11 ask that the throughput benchmark be no more than 5 % below the
 * run before a change, same run, same machine).
 *
 * Each commit is checked out into its own temporary git worktree. Its dependencies: when its
 * `package-lock.json` is identical to this checkout's, the worktree links this checkout's
 * `node_modules` (nothing is installed); otherwise it gets its own `npm ci`. The tool says which.
 * Then the scenario of each commit (its own `bench/scenarios/throughput.ts` or `durable.ts`, with
 * its own warm-up and its own raw baselines) runs once per round, the two commits alternating and
 * taking turns going first, on each runtime asked for (durable: Deno only). At the end: each
 * layout's median workpull jobs/s for both commits and the ratio head/base, the same for the ratio
 * to the raw baseline measured in the same process, which cancels slow drifts of the machine's
 * load (for the throughput scenario's job-queue rows, "raw" is the controller alone), every round, and the load average around the whole run with the CPU other processes used
 * during it. The durable scenario's layouts are its in-process and `POST /jobs` producers, each
 * against raw KV commits of 100 jobs.
 * The worktrees are removed at the end, also after a failure or Ctrl-C.
 *
 *   deno run -A bench/tools/compare_commits.ts --base=9375f33 --head=HEAD [--runtimes=deno,bun]
 *     [--rounds=5] [--jobs=100000] [--scenario=throughput|durable]
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import { existsSync, readFileSync, symlinkSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { commandLine, numberArg } from "../lib/cli.ts";
import type { DurableResult } from "../scenarios/durable.ts";
import { load1, type LoadRecord, measureLoad, stealPart } from "../lib/machine_load.ts";
import { repoPath } from "../lib/runtime.ts";
import { median } from "../lib/stats.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";

const RUNTIMES = ["deno", "bun"];
/** A scenario: its script and how to read each layout's figures from its JSON result. */
interface Scenario {
  readonly script: string;
  readonly runtimes: readonly string[];
  readonly layouts: (result: never) => [string, LayoutSample][];
  /** Jobs per run unless --jobs says otherwise. */
  readonly jobs: number;
  /** What "x raw" divides by. */
  readonly baseline: string;
}

const SCENARIOS: Readonly<Record<string, Scenario>> = {
  throughput: {
    script: "bench/scenarios/throughput.ts",
    runtimes: RUNTIMES,
    jobs: 100_000,
    baseline: "the raw WebSocket baseline (a job-queue row: over the controller alone)",
    layouts: (result: ThroughputResult) =>
      result.pairs.flatMap((pair) => {
        const rows: [string, LayoutSample][] = [
          [pair.topology, { workpull: pair.workpull.median, raw: pair.raw.median }],
        ];
        // Workpull as a job queue, against the controller alone (its "x raw").
        const queue = pair.jobQueue?.median;
        if (queue) {
          rows.push([`${pair.topology} job queue`, { workpull: queue, raw: pair.workpull.median }]);
        }
        return rows;
      }),
  },
  durable: {
    script: "bench/scenarios/durable.ts",
    runtimes: ["deno"],
    jobs: 30_000,
    baseline: "raw KV commits of 100 jobs",
    layouts: (result: DurableResult) => [
      ["in-process producer", { workpull: result.endToEnd.median, raw: result.rawBatch.median }],
      ["POST /jobs", { workpull: result.remote.median, raw: result.rawBatch.median }],
    ],
  },
};

const { values } = commandLine({
  usage:
    "deno run -A bench/tools/compare_commits.ts --base=<commit> --head=<commit> [--runtimes=deno,bun] [--rounds=N] [--jobs=N] [--scenario=throughput|durable]",
  summary: [
    "Run the throughput or durable scenario of two commits alternately in one run on this machine and print",
    "each layout's median jobs/s for both and the ratio head/base, with the load average. Each",
    "commit runs from a temporary git worktree (this checkout's node_modules when its",
    "package-lock.json is identical, else its own npm ci); the worktrees are removed at the end.",
  ].join("\n"),
  flags: {
    base: { kind: "value", value: "COMMIT", help: "the commit to compare against (required)" },
    head: { kind: "value", value: "COMMIT", help: "the commit under test (required)" },
    runtimes: {
      kind: "value",
      value: "a,b",
      help: `runtimes to run the scenario on: ${RUNTIMES.join(", ")} (default: all it runs on)`,
    },
    rounds: { kind: "value", value: "N", help: "rounds per commit and runtime (default 5)" },
    jobs: {
      kind: "value",
      value: "N",
      help: "jobs per run of the scenario (default 100000; durable 30000)",
    },
    scenario: {
      kind: "value",
      value: "NAME",
      help: `the scenario to compare: ${Object.keys(SCENARIOS).join(", ")} (default throughput)`,
    },
  },
  notes: [
    "Example:",
    "  deno run -A bench/tools/compare_commits.ts --base=9375f33 --head=HEAD --runtimes=deno --rounds=3 --jobs=20000",
  ].join("\n"),
});

function usageError(message: string): never {
  console.error(`error: ${message}\n(run with --help for the usage)`);
  process.exit(2);
}

const base = values.base as string | undefined;
const head = values.head as string | undefined;
if (!base || !head) usageError("--base and --head are both required");
const scenario = (values.scenario as string | undefined) ?? "throughput";
const chosen = SCENARIOS[scenario];
if (chosen === undefined) {
  usageError(`unknown scenario "${scenario}" (scenarios: ${Object.keys(SCENARIOS).join(", ")})`);
}
const script = chosen.script;
const runtimes = ((values.runtimes as string | undefined) ?? chosen.runtimes.join(",")).split(",")
  .filter(Boolean);
const badRuntime = runtimes.find((name) => !RUNTIMES.includes(name));
if (badRuntime !== undefined) {
  usageError(`unknown runtime "${badRuntime}" (runtimes: ${RUNTIMES.join(", ")})`);
}
if (runtimes.some((name) => !chosen.runtimes.includes(name))) {
  usageError(`the ${scenario} scenario runs on ${chosen.runtimes.join(", ")} only`);
}
const rounds = numberArg("--rounds", values.rounds, 5);
const jobs = numberArg("--jobs", values.jobs, chosen.jobs);

/** One side of the comparison, checked out. */
interface Side {
  readonly label: "base" | "head";
  readonly commit: string;
  readonly sha: string;
  readonly dir: string;
  /** "linked" (this checkout's node_modules) or "npm ci". */
  dependencies: string;
}

/** One layout's figures from one run of the scenario. */
interface LayoutSample {
  readonly workpull: number;
  readonly raw: number;
}

/** What a run of the throughput scenario prints last (its result, as JSON). */
interface ThroughputResult {
  readonly runtime: string;
  readonly pairs: readonly {
    readonly topology: string;
    readonly raw: { readonly median: number };
    readonly workpull: { readonly median: number };
    /** Workpull as a job queue (commits since the job-queue row). */
    readonly jobQueue?: { readonly median: number };
  }[];
}

const root = repoPath();
const children = new Set<ChildProcess>();

/** Run a command to its end (bounded); its stdout, or an error with its output. */
function run(
  command: string,
  args: readonly string[],
  cwd: string,
  timeout: number,
  ownGroup = false,
): Promise<string> {
  return new Promise((resolve, reject) => {
    // A scenario runs in its own process group, so that its worker processes die with it.
    const child = spawn(command, [...args], {
      cwd,
      stdio: ["ignore", "pipe", "pipe"],
      detached: ownGroup,
    });
    children.add(child);
    let stdout = "";
    let stderr = "";
    child.stdout!.setEncoding("utf8").on("data", (chunk: string) => (stdout += chunk));
    child.stderr!.setEncoding("utf8").on("data", (chunk: string) => (stderr += chunk));
    const timer = setTimeout(() => kill(child), timeout);
    child.on("error", (error) => {
      clearTimeout(timer);
      children.delete(child);
      reject(new Error(`cannot run ${command}: ${error.message}`));
    });
    child.on("exit", (code, signal) => {
      clearTimeout(timer);
      children.delete(child);
      if (code === 0) return resolve(stdout);
      const tail = `${stdout}\n${stderr}`.trim().split("\n").slice(-15).join("\n");
      reject(
        new Error(`${command} ${args.join(" ")} failed (${signal ?? code}) in ${cwd}:\n${tail}`),
      );
    });
  });
}

/** SIGKILL a child and, when it leads a process group, the whole group. */
function kill(child: ChildProcess): void {
  if (child.pid === undefined || child.exitCode !== null) return;
  try {
    process.kill(-child.pid, "SIGKILL");
  } catch {
    try {
      child.kill("SIGKILL");
    } catch {
      // Already gone.
    }
  }
}

const git = (args: readonly string[]) => run("git", args, root, 120_000).then((out) => out.trim());

/** Check a commit out into `dir` and give it its dependencies. */
async function checkOut(side: Side): Promise<void> {
  await git(["worktree", "add", "--detach", "--force", side.dir, side.sha]);
  const lock = await git(["show", `${side.sha}:package-lock.json`]).catch(() => undefined);
  const ours = readFileSync(join(root, "package-lock.json"), "utf8").trim();
  if (lock !== undefined && lock === ours && existsSync(join(root, "node_modules"))) {
    symlinkSync(join(root, "node_modules"), join(side.dir, "node_modules"), "dir");
    side.dependencies = "this checkout's node_modules (identical package-lock.json)";
    return;
  }
  console.log(`  ${side.label} ${side.commit}: package-lock.json differs; npm ci…`);
  await run("npm", ["ci", "--no-audit", "--no-fund", "--loglevel=error"], side.dir, 900_000);
  side.dependencies = "its own npm ci (package-lock.json differs)";
}

/** One run of the scenario of `side` on `runtime`. */
async function runScenario(side: Side, runtime: string): Promise<Map<string, LayoutSample>> {
  const path = join(side.dir, script!);
  if (!existsSync(path)) throw new Error(`${side.label} ${side.commit} has no ${script}`);
  const bin = join(side.dir, "node_modules", ".bin", runtime);
  const args = runtime === "deno"
    ? ["run", "-A", "--unstable-kv", "--quiet", path, String(jobs), "1"]
    : [path, String(jobs), "1"];
  const stdout = await run(bin, args, side.dir, 30 * 60_000, true);
  // The scenario prints its progress, then its result as JSON from the first line with "{" on.
  const start = stdout.search(/^\{/m);
  if (start < 0) throw new Error(`no result from ${side.label} on ${runtime}:\n${stdout}`);
  return new Map(chosen!.layouts(JSON.parse(stdout.slice(start)) as never));
}

let interrupted = false;
const sides: Side[] = [];
let dir: string | undefined;

/** Kill what runs, remove the worktrees and the temporary directory. */
async function cleanUp(): Promise<void> {
  for (const child of children) kill(child);
  for (const side of sides) {
    await run("git", ["worktree", "remove", "--force", side.dir], root, 60_000).catch(() => {});
  }
  await run("git", ["worktree", "prune"], root, 60_000).catch(() => {});
  if (dir) removeTempDir(dir);
}

const onSignal = () => {
  if (interrupted) return;
  interrupted = true;
  console.error("\ninterrupted: stopping the runs and removing the worktrees");
  cleanUp().finally(() => process.exit(130));
};
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);

const fmt = (value: number) => Math.round(value).toLocaleString("en-US");

try {
  const shas = await Promise.all(
    [base!, head!].map((commit) =>
      git(["rev-parse", "--verify", `${commit}^{commit}`]).catch(() => {
        usageError(`"${commit}" is not a commit of this repository`);
      })
    ),
  );
  dir = makeTempDir("compare");
  sides.push(
    { label: "base", commit: base!, sha: shas[0]!, dir: join(dir, "base"), dependencies: "" },
    { label: "head", commit: head!, sha: shas[1]!, dir: join(dir, "head"), dependencies: "" },
  );
  console.log(
    `${scenario}: base ${base} (${shas[0]!.slice(0, 10)}) vs head ${head} (${
      shas[1]!.slice(0, 10)
    }); ${rounds} rounds of ${jobs.toLocaleString("en-US")} jobs on ${runtimes.join(", ")}`,
  );
  for (const side of sides) {
    await checkOut(side);
    console.log(`  ${side.label}: ${side.dependencies}`);
  }

  const samples = new Map<string, Map<string, Map<string, LayoutSample[]>>>();
  const loads: LoadRecord[] = [];
  const loadBefore = load1();
  await measureLoad(loads, scenario, runtimes.join("+"), async () => {
    for (let round = 1; round <= rounds; round++) {
      for (const runtime of runtimes) {
        // The two commits take turns going first.
        const order = round % 2 === 1 ? sides : sides.toReversed();
        for (const side of order) {
          const result = await runScenario(side, runtime);
          const line: string[] = [];
          for (const [layout, sample] of result) {
            const byRuntime = samples.get(runtime) ?? new Map();
            samples.set(runtime, byRuntime);
            const byLayout = byRuntime.get(layout) ?? new Map();
            byRuntime.set(layout, byLayout);
            const list = byLayout.get(side.label) ?? [];
            byLayout.set(side.label, list);
            list.push(sample);
            line.push(
              `${layout} ${fmt(sample.workpull)} jobs/s (${
                (sample.workpull / sample.raw).toFixed(2)
              }x raw)`,
            );
          }
          console.log(
            `  round ${round}/${rounds} ${runtime} ${side.label}: ${line.join(", ")}; load ${
              load1().toFixed(2)
            }`,
          );
        }
      }
    }
  });

  const record = loads[0];
  console.log(
    `\n${scenario}, medians of ${rounds} rounds (workpull jobs/s; "x raw" is workpull over ` +
      `${chosen.baseline} of the same run)`,
  );
  const rows: string[][] = [[
    "runtime",
    "layout",
    "base jobs/s",
    "head jobs/s",
    "head/base",
    "base x raw",
    "head x raw",
    "head/base of x raw",
  ]];
  for (const [runtime, byLayout] of samples) {
    for (const [layout, bySide] of byLayout) {
      const baseSamples = bySide.get("base") ?? [];
      const headSamples = bySide.get("head") ?? [];
      const b = median(baseSamples.map((s) => s.workpull));
      const h = median(headSamples.map((s) => s.workpull));
      const bRaw = median(baseSamples.map((s) => s.workpull / s.raw));
      const hRaw = median(headSamples.map((s) => s.workpull / s.raw));
      rows.push([
        runtime,
        layout,
        fmt(b),
        fmt(h),
        `${(h / b).toFixed(3)}x`,
        `${bRaw.toFixed(2)}x`,
        `${hRaw.toFixed(2)}x`,
        `${(hRaw / bRaw).toFixed(3)}x`,
      ]);
    }
  }
  const widths = rows[0].map((_, c) => Math.max(...rows.map((row) => row[c].length)));
  for (const [i, row] of rows.entries()) {
    console.log(
      row.map((cell, c) => c < 2 ? cell.padEnd(widths[c]) : cell.padStart(widths[c]))
        .join("  "),
    );
    if (i === 0) console.log(widths.map((width) => "-".repeat(width)).join("  "));
  }
  console.log(
    `\nload average (1 min): ${loadBefore.toFixed(2)} before, ${
      record.after.toFixed(2)
    } after; other processes used ${
      record.othersCores === null ? "(unknown)" : `${record.othersCores.toFixed(2)} cores`
    }${stealPart(record)} on average over ${record.seconds} s`,
  );
  for (const side of sides) {
    console.log(`${side.label} ${side.commit} = ${side.sha}: ${side.dependencies}`);
  }
} catch (error) {
  if (!interrupted) {
    console.error(`error: ${error instanceof Error ? error.message : String(error)}`);
    process.exitCode = 1;
  }
} finally {
  if (!interrupted) await cleanUp();
}
