/**
 * The workpull benchmark suite (issues #5 and #15): throughput against the per-job and the
 * batched raw WebSocket baselines, the BullMQ and NATS JetStream peers, durable throughput
 * (in-process producer and `POST /jobs`), the durable backlog (ingest and drain), latency, failover, memory and the browser client's
 * size, each side by side with its baseline, measured in alternating rounds and reported as
 * medians with every round.
 *
 *   deno task bench           # everything, Deno, Bun and Node; writes bench/results.json and .md
 *   deno task bench:quick     # fewer jobs and rounds; prints only
 *   deno task bench:bun       # the scenarios that apply to Bun, on Bun; prints only
 *
 * The flags are listed by `--help` (see {@linkcode COMMAND}). The 1-minute load average is
 * recorded before and after every scenario; a run on a busy machine (`lib/machine_load.ts`)
 * says so in its results and does not rewrite the README section. Every child process is
 * killed and reaped and every temporary directory removed, also on failure or Ctrl-C.
 *
 * Node (the pinned Node 22, running the TypeScript sources) runs the throughput scenario only:
 * `serveNode` with Node worker processes beside the raw baseline on Node (a `ws` server).
 *
 * @module
 */

import { cpus, freemem, loadavg, platform, release, totalmem } from "node:os";
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { commandLine, type CommandSpec, numberArg } from "./lib/cli.ts";
import { busyVerdict, load1, type LoadRecord, measureLoad } from "./lib/machine_load.ts";
import { killAll, liveChildren, runInherit, runToEnd } from "./lib/proc.ts";
import {
  markdownSummary,
  type MemoryResult,
  readmeSection,
  type Results,
  type RuntimeResults,
  targets,
  textSummary,
} from "./lib/report.ts";
import {
  binary,
  repoPath,
  runtime,
  runtimeLabel,
  runtimeVersion,
  scriptCommand,
} from "./lib/runtime.ts";
import { median, round } from "./lib/stats.ts";
import { makeTempDir, removeTempDir, removeTempDirs } from "./lib/tmp.ts";
import type { RemoteKvResult } from "./scenarios/remote_kv.ts";

const SCENARIOS = [
  "throughput",
  "peer",
  "nats",
  "durable",
  "backlog",
  "cluster",
  "remote-kv",
  "latency",
  "failover",
  "memory",
  "size",
];
/** Scenarios a run includes only when `--scenarios` names them (each adds minutes). */
const OPT_IN = new Set(["remote-kv"]);
/** Scenarios that run once per runtime (the others are runtime-independent: run once). */
const PER_RUNTIME = new Set([
  "throughput",
  "durable",
  "backlog",
  "cluster",
  "remote-kv",
  "latency",
  "failover",
  "memory",
]);
const RUNTIMES = ["deno", "bun", "node"];
/** The per-runtime scenarios that also run on Node. */
const ON_NODE = new Set(["throughput"]);

/** The command line (`--help` prints it). */
const COMMAND: CommandSpec = {
  usage: "deno run -A --unstable-kv bench/run.ts [flags]   (or: bun bench/run.ts [flags])",
  summary: [
    "Run the workpull benchmark suite and print its results. A full run (no flag that narrows",
    "it) writes bench/results.json, bench/results.md and, unless the machine was busy,",
    "bench/README_SECTION.md.",
  ].join("\n"),
  flags: {
    scenarios: {
      kind: "value",
      value: "a,b,…",
      help: `scenarios to run (default all but ${[...OPT_IN].join(", ")}): ${SCENARIOS.join(", ")}`,
    },
    runtimes: {
      kind: "value",
      value: "a,b",
      help:
        "runtimes of the per-runtime scenarios: deno, bun, node (default all on Deno, the running one otherwise)",
    },
    jobs: {
      kind: "value",
      value: "N",
      help:
        "jobs per run of throughput, peer, nats, durable, latency (default 100000; 20000 with --quick); also backlog and remote-kv when given (default 30000 and 10000)",
    },
    rounds: {
      kind: "value",
      value: "N",
      help:
        "throughput rounds (default 5; 3 with --quick); also the rounds of nats, backlog, remote-kv and latency when given (default 3)",
    },
    quick: { kind: "switch", help: "fewer jobs and rounds everywhere; prints only" },
    "commit-latency": {
      kind: "value",
      value: "MS",
      help: "remote-kv: the simulated round trip of a KV commit (default 10)",
    },
    "read-latency": {
      kind: "value",
      value: "MS",
      help: "remote-kv: the simulated round trip of a KV read or list batch (default 5)",
    },
    window: {
      kind: "value",
      value: "N",
      help: "remote-kv: each endpoint's window (default 100)",
    },
    "probe-spacing": {
      kind: "value",
      value: "MS",
      help: "remote-kv: the wait between one enqueue-to-start probe job and the next (default 5)",
    },
    write: {
      kind: "switch",
      help: "write results.json and results.md even for a partial run (never README_SECTION.md)",
    },
    out: {
      kind: "value",
      value: "DIR",
      help: "where --write and full runs write (default bench/)",
    },
    json: { kind: "value", value: "FILE", help: "also write the results document (JSON) to FILE" },
    child: { kind: "switch", help: "run as the Bun part of a run (internal)", internal: true },
  },
  notes: [
    "Scenarios:",
    "  throughput  workpull over WebSocket vs the per-job and the batched raw WebSocket baselines",
    "              (1 process × 4 endpoints and 4 × 1); per runtime",
    "  peer        BullMQ + Redis (needs redis-server and node; skipped without them)",
    "  nats        NATS JetStream work queue, memory and file storage (needs nats-server and",
    "              node; skipped without them)",
    "  durable     workpull + Deno KV file, in-process producer and POST /jobs, vs raw KV commits",
    "  backlog     job queue on a Deno KV file: POST /jobs ingest with no worker, then the drain",
    "              to a worker process, each vs the store's own writes as raw KV commits",
    "  cluster     1, 2 and 3 instances sharing a flow on one Deno KV file (aggregate",
    "              throughput), and an instance SIGKILL → takeover → first redelivery (Deno)",
    "  remote-kv   the KV stores behind a simulated hosted KV (RemoteKv: 10 ms a commit, 5 ms a",
    "              read) beside 0 ms: 1, 2 and 4 shared instances and the single store; jobs/s,",
    "              commits and reads a job, enqueue → start across instances (Deno; opt-in: only",
    "              with --scenarios=remote-kv)",
    "  latency     submit → handler start at half the maximum throughput; per runtime",
    "  failover    SIGKILL and SIGSTOP of a worker process; per runtime",
    "  memory      controller heap per pending job (Deno)",
    "  size        the browser worker client, bundled, minified, gzipped",
    "",
    "Examples:",
    "  deno task bench:quick",
    "  deno run -A --unstable-kv bench/run.ts --scenarios=throughput,nats --runtimes=deno --quick",
  ].join("\n"),
};

const argv = process.argv.slice(2);
const { values } = commandLine(COMMAND, argv);
const flag = (name: string) => values[name] as string | undefined;
const quick = values.quick === true;
const child = values.child === true;
const selected = (flag("scenarios")?.split(",") ?? SCENARIOS.filter((name) => !OPT_IN.has(name)))
  .filter(Boolean);
const runtimes = (flag("runtimes")?.split(",") ??
  (runtime === "deno" ? ["deno", "bun", "node"] : [runtime]))
  .filter(Boolean);
const badScenario = selected.find((name) => !SCENARIOS.includes(name));
const badRuntime = runtimes.find((name) => !RUNTIMES.includes(name));
if (badScenario !== undefined || badRuntime !== undefined) {
  console.error(
    `error: ${
      badScenario !== undefined
        ? `unknown scenario "${badScenario}" (scenarios: ${SCENARIOS.join(", ")})`
        : `unknown runtime "${badRuntime}" (runtimes: ${RUNTIMES.join(", ")})`
    }\n(run with --help for the usage)`,
  );
  process.exit(2);
}
const jobs = numberArg("--jobs", flag("jobs"), quick ? 20_000 : 100_000);
const rounds = numberArg("--rounds", flag("rounds"), quick ? 3 : 5);
const config = {
  jobs,
  rounds,
  window: 100,
  peer: { jobs, rounds: quick ? 1 : 2, concurrencies: [1, 50] },
  nats: { jobs, rounds: flag("rounds") ? rounds : quick ? 1 : 3 },
  // As many jobs as the NATS peer it is compared with (30,000 before: at 40,000 jobs/s that run
  // lasted 0.75 s, and its fixed start and end weighed as much as the gap being measured).
  durable: { jobs, singleJobs: quick ? 300 : 1000, rounds: quick ? 2 : 5 },
  backlog: {
    jobs: flag("jobs") ? jobs : quick ? 10_000 : 30_000,
    rounds: flag("rounds") ? rounds : quick ? 2 : 3,
  },
  cluster: { jobs: quick ? 5_000 : 20_000, rounds: quick ? 2 : 3, takeoverRounds: quick ? 2 : 3 },
  remoteKv: {
    jobs: flag("jobs") ? jobs : quick ? 2_000 : 10_000,
    rounds: flag("rounds") ? rounds : quick ? 1 : 3,
    commitLatency: numberArg("--commit-latency", flag("commit-latency"), 10, 0),
    readLatency: numberArg("--read-latency", flag("read-latency"), 5, 0),
    probeJobs: quick ? 50 : 200,
    probeSpacing: numberArg("--probe-spacing", flag("probe-spacing"), 5, 0),
    window: numberArg("--window", flag("window"), 100, 1),
    capSeconds: 20,
  },
  latency: {
    maxJobs: jobs,
    seconds: quick ? 2 : 3,
    rounds: flag("rounds") ? rounds : quick ? 2 : 3,
  },
  failover: { killRounds: quick ? 3 : 5, silentRounds: quick ? 1 : 3 },
  memory: quick ? [{ pending: 100_000, rounds: 1 }] : [
    { pending: 100_000, rounds: 3 },
    { pending: 1_000_000, rounds: 1 },
  ],
};
const full = !quick && !flag("scenarios") && !flag("jobs") && !flag("rounds") &&
  runtimes.includes("deno") && runtimes.includes("bun");
const write = (full || values.write === true) && !child;
const outDir = flag("out") ?? repoPath("bench");
const log = (line: string) => console.log(line);

let interrupted = false;
const onSignal = () => {
  if (interrupted) return;
  interrupted = true;
  console.error("\ninterrupted: stopping every child process");
  killAll().finally(() => {
    removeTempDirs();
    process.exit(130);
  });
};
process.on("SIGINT", onSignal);
process.on("SIGTERM", onSignal);

/** A runtime's results, with the scenarios `lib/report.ts` does not summarise (yet). */
type HereResults = RuntimeResults & { remoteKv?: RemoteKvResult };

/** The scenarios of this runtime, run here. */
async function runHere(): Promise<HereResults> {
  const loads: LoadRecord[] = [];
  const results: HereResults = { skipped: {}, loads };
  const want = (name: string) =>
    selected.includes(name) && PER_RUNTIME.has(name) && (runtime !== "node" || ON_NODE.has(name));
  if (runtime === "node") {
    for (const name of selected.filter((name) => PER_RUNTIME.has(name) && !ON_NODE.has(name))) {
      results.skipped[name] = "the Node runs cover throughput only";
    }
  }
  /** Run one scenario, recording the load average before and after it. */
  const measured = <T>(name: string, body: () => Promise<T>) =>
    measureLoad(loads, name, runtime, body);
  if (want("throughput")) {
    log(`\n[${runtime}] 1. throughput, in memory, over WebSocket`);
    const { throughput } = await import("./scenarios/throughput.ts");
    results.throughput = await measured("throughput", () =>
      throughput({
        jobs,
        rounds,
        window: config.window,
        topologies: [{ processes: 1, perProcess: 4 }, { processes: 4, perProcess: 1 }],
        log,
      }));
  }
  if (want("durable")) {
    if (runtime === "deno") {
      log(`\n[${runtime}] 3. durable: Deno KV file`);
      const { durable } = await import("./scenarios/durable.ts");
      results.durable = await measured(
        "durable",
        () => durable({ ...config.durable, window: config.window, log }),
      );
    } else {
      results.skipped.durable = "the Deno KV file scenario is Deno's; Bun reaches KV files " +
        "through npm @deno/kv, measured by bench/durable_throughput.ts";
    }
  }
  if (want("backlog")) {
    if (runtime === "deno") {
      log(`\n[${runtime}] 3b. backlog: job queue on a Deno KV file, ingest and drain`);
      const { backlog } = await import("./scenarios/backlog.ts");
      results.backlog = await measured(
        "backlog",
        () => backlog({ ...config.backlog, window: config.window, log }),
      );
    } else {
      results.skipped.backlog = "the Deno KV file scenario is Deno's";
    }
  }
  if (want("cluster")) {
    if (runtime === "deno") {
      log(`\n[${runtime}] 3c. cluster: instances sharing a flow on one Deno KV file`);
      const { cluster } = await import("./scenarios/cluster.ts");
      results.cluster = await measured("cluster", () => cluster({ ...config.cluster, log }));
    } else {
      results.skipped.cluster = "the instances are Deno processes on a Deno KV file";
    }
  }
  if (want("remote-kv")) {
    if (runtime === "deno") {
      log(`\n[${runtime}] 3d. remote-kv: the KV stores behind a simulated hosted KV`);
      const { remoteKv } = await import("./scenarios/remote_kv.ts");
      // Its table is printed at the end of the run, after the summary.
      results.remoteKv = await measured("remote-kv", () => remoteKv({ ...config.remoteKv, log }));
    } else {
      results.skipped["remote-kv"] = "the instances are Deno processes on a Deno KV file";
    }
  }
  if (want("latency")) {
    log(`\n[${runtime}] 4. latency at 50% of the maximum throughput`);
    const { latency } = await import("./scenarios/latency.ts");
    results.latency = await measured(
      "latency",
      () => latency({ ...config.latency, window: config.window, log }),
    );
  }
  if (want("failover")) {
    log(`\n[${runtime}] 5. failover`);
    const { failover } = await import("./scenarios/failover.ts");
    results.failover = await measured("failover", () => failover({ ...config.failover, log }));
  }
  if (want("memory")) {
    if (runtime === "deno") {
      log(`\n[${runtime}] 6. memory: controller heap per pending job`);
      results.memory = await measured("memory", memory);
    } else {
      results.skipped.memory = "measured on Deno (V8 heap, --expose-gc)";
    }
  }
  return results;
}

/** Scenario 6: each measurement in a fresh Deno process with --expose-gc. */
async function memory(): Promise<MemoryResult> {
  const points = [];
  for (const { pending, rounds } of config.memory) {
    const samples: Record<string, number>[] = [];
    for (let i = 0; i < rounds; i++) {
      const { code, stdout, stderr } = await runToEnd(binary("deno"), [
        "run",
        "-A",
        "--quiet",
        "--v8-flags=--expose-gc",
        repoPath("bench/scenarios/memory_child.ts"),
        String(pending),
      ], { timeout: 300_000 });
      if (code !== 0) throw new Error(`memory measurement failed: ${stderr}`);
      samples.push(JSON.parse(stdout.trim().split("\n").at(-1)!));
    }
    const pick = (key: string) => round(median(samples.map((s) => s[key])), 1);
    const point = {
      pending,
      rounds,
      perJob: pick("perJob"),
      payloadBytes: pick("payloadBytes"),
      idBytes: pick("idBytes"),
      beyondPayload: pick("beyondPayload"),
    };
    log(
      `  ${
        pending.toLocaleString("en-US")
      } pending: ${point.perJob} bytes per job, payload ${point.payloadBytes}, beyond payload ${point.beyondPayload} (MessageID string ${point.idBytes} included)`,
    );
    points.push(point);
  }
  return {
    runtime: runtimeVersion(),
    method:
      'A MemoryWorkQueue holds N stored and accepted jobs (payload `{"n":i}`, MessageID a random UUID); a fresh controller with no workers loads them on `start()` into its pending pool. ' +
      "Heap used (after forced GCs, `--expose-gc`) before and after `start()`, divided by N. The queue's `load()` hands out fresh strings (as a store's load does), so the figure includes each MessageID and payload string; " +
      "the payload strings' own heap, measured the same way, is subtracted. Each measurement in a fresh process.",
    points,
  };
}

/** Another runtime's scenarios, in a child process of that runtime running this script. */
async function runOn(target: "bun" | "node"): Promise<RuntimeResults> {
  const dir = makeTempDir(target);
  try {
    const file = join(dir, `${target}.json`);
    const passed = argv.filter((arg) =>
      !arg.startsWith("--runtimes=") && !arg.startsWith("--json=") && arg !== "--write"
    );
    const { command, args } = scriptCommand(target, repoPath("bench/run.ts"));
    const code = await runInherit(command, [
      ...args,
      ...passed,
      "--child",
      `--runtimes=${target}`,
      `--json=${file}`,
    ], { timeout: 30 * 60_000 });
    if (code !== 0) throw new Error(`the ${runtimeLabel(target)} run failed (exit ${code})`);
    return JSON.parse(readFileSync(file, "utf8"));
  } finally {
    removeTempDir(dir);
  }
}

async function versions(): Promise<Record<string, string>> {
  const out: Record<string, string> = {};
  const ask = async (name: string, command: string, args: string[]) => {
    try {
      const { stdout } = await runToEnd(command, args, { timeout: 10_000 });
      out[name] = stdout.trim().split("\n")[0];
    } catch {
      // not installed
    }
  };
  await ask("deno", binary("deno"), ["--version"]);
  await ask("bun", binary("bun"), ["--version"]);
  await ask("node", "node", ["--version"]);
  // "deno 2.9.6 (stable, release, …)" → "2.9.6"; "v20.20.2" → "20.20.2".
  for (const [name, text] of Object.entries(out)) {
    out[name] = text.match(/\d+\.\d+\.\d+/)?.[0] ?? text;
  }
  out.hono = JSON.parse(readFileSync(repoPath("node_modules/hono/package.json"), "utf8")).version;
  out.valibot = JSON.parse(readFileSync(repoPath("node_modules/valibot/package.json"), "utf8"))
    .version;
  return out;
}

async function main(): Promise<void> {
  const started = Date.now();
  if (child) {
    // A Bun (or Deno) child of the main run: this runtime's scenarios only, as JSON.
    const results = await runHere();
    writeFileSync(flag("json")!, JSON.stringify(results));
    return;
  }
  const loadStart = loadavg().map((v) => v.toFixed(2)).join(" ");
  const loadBeforeRun = load1();
  const loads: LoadRecord[] = [];
  const results: Results = {
    generatedAt: new Date().toISOString(),
    command: full ? "deno task bench" : `${runtime} bench/run.ts ${argv.join(" ")}`.trim(),
    machine: {},
    versions: await versions(),
    config,
    runtimes: {},
    targets: [],
  };
  console.log(
    `workpull benchmarks on ${runtimeVersion()}: scenarios ${selected.join(", ")}; runtimes ${
      runtimes.join(", ")
    }; ${jobs.toLocaleString("en-US")} jobs, ${rounds} rounds`,
  );
  if (runtimes.includes(runtime)) results.runtimes[runtime] = await runHere();
  if (selected.includes("size")) {
    log("\n7. browser worker client size");
    const { clientSize } = await import("./scenarios/client_size.ts");
    results.clientSize = await measureLoad(loads, "size", "any", clientSize);
    log(`  ${results.clientSize.minified} bytes minified, ${results.clientSize.gzip} gzip`);
  }
  if (selected.includes("peer")) {
    log("\n2. peer: BullMQ + Redis");
    const { peer } = await import("./scenarios/peer.ts");
    results.peer = await measureLoad(loads, "peer", "any", () => peer({ ...config.peer, log }));
    if ("skipped" in results.peer) log(`  skipped: ${results.peer.skipped}`);
  }
  if (selected.includes("nats")) {
    log("\n2b. peer: NATS JetStream (work-queue stream, durable pull consumer)");
    const { natsPeer } = await import("./scenarios/nats_peer.ts");
    // workpull on a Deno KV file runs beside each file round: Deno KV files are Deno's.
    const besideFile = runtime === "deno"
      ? async (count: number) =>
        (await import("./scenarios/durable.ts")).endToEnd(count, config.window)
      : undefined;
    results.nats = await measureLoad(
      loads,
      "nats",
      "any",
      () => natsPeer({ ...config.nats, log, besideFile }),
    );
    if ("skipped" in results.nats) log(`  skipped: ${results.nats.skipped}`);
  }
  const others = runtimes.filter((name) => name !== runtime);
  if (others.includes("bun") && selected.some((name) => PER_RUNTIME.has(name))) {
    if (existsSync(binary("bun"))) {
      log("\n[bun] the same scenarios on Bun (server and workers on Bun)");
      results.runtimes.bun = await runOn("bun");
    } else {
      log("\n[bun] skipped: no Bun binary (run `npm ci`)");
      results.runtimes.bun = { skipped: { all: "no Bun binary in node_modules/.bin" } };
    }
  }
  if (others.includes("node") && selected.some((name) => ON_NODE.has(name))) {
    if (existsSync(repoPath("node_modules", ".bin", "node"))) {
      log("\n[node] throughput on Node (server and workers on Node 22)");
      results.runtimes.node = await runOn("node");
    } else {
      log("\n[node] skipped: no pinned Node binary (run `npm ci`)");
      results.runtimes.node = { skipped: { all: "no Node binary in node_modules/.bin" } };
    }
  }
  results.machine = {
    os: `${platform()} ${release()}`,
    cpus: cpus().length,
    cpuModel: cpus()[0]?.model ?? "unknown",
    memory: `${Math.round(totalmem() / 2 ** 30)} GiB (${Math.round(freemem() / 2 ** 30)} GiB free)`,
    loadStart,
    loadEnd: loadavg().map((v) => v.toFixed(2)).join(" "),
    minutes: round((Date.now() - started) / 60_000, 1),
  };
  const allLoads = [
    ...Object.values(results.runtimes).flatMap((r) => r?.loads ?? []),
    ...loads,
  ];
  results.loads = allLoads;
  results.busy = busyVerdict(loadBeforeRun, allLoads);
  results.targets = targets(results);
  console.log(`\n${textSummary(results)}\n`);
  const remote = (results.runtimes[runtime] as HereResults | undefined)?.remoteKv;
  if (remote) {
    const { remoteKvTable } = await import("./scenarios/remote_kv.ts");
    console.log(`${remoteKvTable(remote)}\n`);
  }
  if (results.busy.busy) {
    console.log(
      `WARNING: the machine was busy during this run (${
        results.busy.reasons.join("; ")
      }): its figures are not fit to publish.`,
    );
  }
  if (flag("json")) writeFileSync(flag("json")!, `${JSON.stringify(results, null, 2)}\n`);
  if (write) {
    writeFileSync(join(outDir, "results.json"), `${JSON.stringify(results, null, 2)}\n`);
    writeFileSync(
      join(outDir, "results.md"),
      markdownSummary(
        results,
        "npm ci   # Deno, Bun, BullMQ, esbuild pinned in package.json\ndeno task bench",
      ),
    );
    if (full && !results.busy.busy) {
      writeFileSync(join(outDir, "README_SECTION.md"), readmeSection(results));
      // The section is pasted into README.md, which `deno fmt --check` covers: format it here.
      await runToEnd(binary("deno"), ["fmt", "--quiet", join(outDir, "README_SECTION.md")], {
        timeout: 30_000,
      }).catch(() => {});
      console.log(`wrote results.json, results.md and README_SECTION.md in ${outDir}`);
    } else {
      console.log(
        `wrote results.json and results.md in ${outDir}; README_SECTION.md left as it was (${
          full ? "the machine was busy" : "not a full run"
        })`,
      );
    }
  }
  console.log(`done in ${((Date.now() - started) / 60_000).toFixed(1)} min`);
}

try {
  await main();
} finally {
  await killAll();
  removeTempDirs();
}
if (liveChildren() > 0) console.error("warning: child processes still running");
process.exit(0);
