/**
 * The remote-KV scenario: the job stores on a Deno KV file behind the round trips of a hosted
 * Deno KV (Deno Deploy: a commit about 10 ms, a read about 5 ms within a region), simulated by
 * `RemoteKv` from `testing.ts`, beside the same file at 0 ms through the same wrapper (so that
 * the counts compare). These are the baseline figures for the store rewrite.
 *
 * Configurations, each at both latencies: a flow shared by **1, 2 and 4 instance processes**
 * (`DenoKvClusterStore`, ids `i0`..`i3`, default lease), and the **single-instance store**
 * (`DenoKvJobStore`, one process) as the baseline row. The store is chosen in one function,
 * `openStore` in `remote_kv_instance.ts`. Rounds alternate every configuration, so a drift of
 * the machine hits all alike; the figures are medians over the rounds.
 *
 * One run of a configuration, on a fresh KV file:
 * - **fill**: this process adds the backlog (`jobs` jobs, 1,000 an `addMany`) through a queue of
 *   the same store, which then leaves; the instances start (each its queue's load and, shared,
 *   its registration) and report ready.
 * - **drain**: on `go` each instance zeroes its wrapper's counters and attaches 4 in-process
 *   endpoints (window 100 unless `--window` says, no-op handler). Timed from `go` to the last completion in any
 *   instance; a drain still running after `capSeconds` is cut there and its jobs/s computed
 *   from the jobs done by then (the run says so). Then every instance reports its counters:
 *   commits, reads (`getMany` calls and list batches) and mutations per job are their sums over
 *   the instances, divided by the jobs done.
 * - **enqueue to start**: with the backlog drained and the workers idle, instance `i0` adds
 *   `probeJobs` jobs one at a time (each `probeSpacing` ms after the last add resolved), timing
 *   each from its `add` call to its handler's start, in wall-clock ms comparable across the
 *   processes (`performance.timeOrigin + performance.now()`). With several instances, `i0`
 *   first closes its own endpoints, so every probe job starts on **another** instance (with
 *   them, `i0` would start its own jobs at once and the cross-instance path would not be seen):
 *   the path measured is the shared backlog, found by the others' wakers (the flow's wake
 *   counter, read and watched) and claimed through KV. With one instance it is measured on that
 *   instance.
 *   Skipped after a capped drain (the workers are not idle).
 *
 * @module
 */

import { join } from "node:path";
import { JobQueue } from "../../mod.ts";
import { RemoteKv } from "../../testing.ts";
import { type Child, spawnChild } from "../lib/proc.ts";
import { binary, now, repoPath, runtimeVersion, until } from "../lib/runtime.ts";
import { median, percentileSorted, round } from "../lib/stats.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";
import { openStore, type RemoteInstanceConfig } from "./remote_kv_instance.ts";

/** One configuration: which store, how many instance processes, which latency. */
export interface RemoteKvConfiguration {
  readonly store: "shared" | "single";
  readonly instances: number;
  /** ms; 0 is the KV file as it is (through the wrapper). */
  readonly commitLatency: number;
  readonly readLatency: number;
}

/** One run of a configuration. */
export interface RemoteKvRun {
  readonly jobsPerSecond: number;
  /** Jobs done in the drain (fewer than the backlog when `capped`). */
  readonly drained: number;
  readonly seconds: number;
  readonly capped: boolean;
  readonly commitsPerJob: number;
  readonly readsPerJob: number;
  readonly mutationsPerJob: number;
  /** Enqueue on `i0` to the handler's start (on another instance when there are several), ms. */
  readonly enqueueToStart: {
    readonly p50: number;
    readonly p99: number;
    readonly count: number;
    /** Round trips of every instance during the probe, per probe job (idle polls included). */
    readonly commitsPerJob: number;
    readonly readsPerJob: number;
  } | null;
}

/** A configuration's runs and medians. */
export interface RemoteKvRow extends RemoteKvConfiguration {
  readonly runs: RemoteKvRun[];
  readonly median: {
    readonly jobsPerSecond: number;
    readonly commitsPerJob: number;
    readonly readsPerJob: number;
    readonly mutationsPerJob: number;
    readonly enqueueToStartP50: number | null;
    readonly enqueueToStartP99: number | null;
    readonly probeCommitsPerJob: number | null;
    readonly probeReadsPerJob: number | null;
  };
  /** Where enqueue-to-start was measured. */
  readonly probe: "another instance" | "same instance";
  /** Whether any run's drain was cut at the time cap. */
  readonly capped: boolean;
}

/** The scenario's result. */
export interface RemoteKvResult {
  readonly runtime: string;
  readonly jobs: number;
  readonly rounds: number;
  readonly endpointsPerInstance: number;
  readonly window: number;
  readonly commitLatency: number;
  readonly readLatency: number;
  readonly probeJobs: number;
  readonly probeSpacing: number;
  readonly capSeconds: number;
  readonly rows: RemoteKvRow[];
}

/** The scenario's options. */
export interface RemoteKvOptions {
  readonly jobs: number;
  readonly rounds: number;
  readonly commitLatency: number;
  readonly readLatency: number;
  readonly probeJobs: number;
  readonly probeSpacing: number;
  readonly capSeconds: number;
  /** Each endpoint's window (default 100). */
  readonly window?: number;
  readonly log: (line: string) => void;
}

const ENDPOINTS = 4;
const WINDOW = 100;
const FILL_BATCH = 1000;

function spawnInstance(config: RemoteInstanceConfig): Child {
  return spawnChild(`instance ${config.id}`, binary("deno"), [
    "run",
    "-A",
    "--unstable-kv",
    "--quiet",
    repoPath("bench/scenarios/remote_kv_instance.ts"),
  ], { env: { WORKPULL_BENCH_INSTANCE: JSON.stringify(config) }, stdin: true });
}

/** Fill the backlog of the file at `path` through a queue of the configuration's store. */
async function fill(path: string, jobs: number, store: RemoteKvConfiguration["store"]) {
  const local = await Deno.openKv(path);
  try {
    const kv = new RemoteKv(local, { commitLatency: 0, readLatency: 0 });
    const queue = new JobQueue({ name: "bench", store: openStore(kv, { store, id: "fill" }) });
    await queue.start();
    for (let n = 0; n < jobs; n += FILL_BATCH) {
      const batch = [];
      for (let i = n; i < Math.min(jobs, n + FILL_BATCH); i++) {
        batch.push({ payload: { n: i }, messageId: `j${i}` });
      }
      await queue.addMany(batch);
    }
    await queue.close();
  } finally {
    local.close();
  }
}

/** Send `cmd` to every instance; resolves with their answers (the report named like it). */
function askAll(instances: readonly Child[], cmd: "stats" | "reset") {
  return Promise.all(instances.map((child) => {
    const answer = child.next((r) => r.ev === cmd, cmd);
    child.command({ cmd });
    return answer;
  }));
}

/** One run of `configuration`. */
async function run(configuration: RemoteKvConfiguration, options: RemoteKvOptions) {
  const { jobs, probeJobs, probeSpacing, capSeconds } = options;
  const dir = makeTempDir("remote-kv");
  const instances: Child[] = [];
  try {
    const kvPath = join(dir, "flow.kv");
    await fill(kvPath, jobs, configuration.store);
    for (let i = 0; i < configuration.instances; i++) {
      instances.push(spawnInstance({
        kvPath,
        store: configuration.store,
        id: `i${i}`,
        commitLatency: configuration.commitLatency,
        readLatency: configuration.readLatency,
        workers: ENDPOINTS,
        window: options.window ?? WINDOW,
      }));
    }
    await Promise.all(
      instances.map((child) => child.next((r) => r.ev === "ready", "ready", 60_000)),
    );

    // The drain.
    const done = instances.map(() => ({ count: 0, last: 0 }));
    instances.forEach((child, i) =>
      child.onReport((r) => {
        if (r.ev === "done") done[i] = { count: r.count as number, last: r.last as number };
      })
    );
    const total = () => done.reduce((sum, d) => sum + d.count, 0);
    const go = now();
    for (const child of instances) child.command({ cmd: "go" });
    await until(
      () => total() >= jobs || now() - go > capSeconds * 1000,
      `${jobs} jobs done`,
      (capSeconds + 60) * 1000,
      5,
    );
    const cut = now();
    const capped = total() < jobs;
    const drained = capped ? total() : jobs;
    const seconds = ((capped ? cut : Math.max(...done.map((d) => d.last))) - go) / 1000;
    const stats = await askAll(instances, "stats");
    const sum = (key: string) => stats.reduce((all, s) => all + (s[key] as number), 0);

    // Enqueue to start.
    let enqueueToStart: RemoteKvRun["enqueueToStart"] = null;
    if (!capped && probeJobs > 0) {
      const [origin] = instances;
      if (instances.length > 1) {
        const detached = origin.next((r) => r.ev === "detached", "detached");
        origin.command({ cmd: "detach" });
        await detached;
      }
      await askAll(instances, "reset");
      const enqueued = new Map<string, number>();
      const started = new Map<string, { at: number; instance: string }>();
      origin.onReport((r) => {
        if (r.ev === "enqueued") enqueued.set(r.id as string, r.at as number);
      });
      for (const child of instances) {
        child.onReport((r) => {
          if (r.ev === "start" && !started.has(r.id as string)) {
            started.set(r.id as string, { at: r.at as number, instance: r.instance as string });
          }
        });
      }
      origin.command({ cmd: "probe", count: probeJobs, spacing: probeSpacing });
      await until(
        () => enqueued.size >= probeJobs && started.size >= probeJobs,
        `${probeJobs} probe jobs started`,
        120_000,
        5,
      );
      const latencies: number[] = [];
      for (const [id, at] of enqueued) {
        const start = started.get(id)!;
        if (instances.length > 1 && start.instance === "i0") {
          throw new Error(`probe job ${id} started on the enqueuing instance`);
        }
        latencies.push(start.at - at);
      }
      latencies.sort((a, b) => a - b);
      const probeStats = await askAll(instances, "stats");
      const probeSum = (key: string) => probeStats.reduce((all, s) => all + (s[key] as number), 0);
      enqueueToStart = {
        p50: round(percentileSorted(latencies, 50), 1),
        p99: round(percentileSorted(latencies, 99), 1),
        count: latencies.length,
        commitsPerJob: round(probeSum("commits") / probeJobs, 2),
        readsPerJob: round(probeSum("reads") / probeJobs, 2),
      };
    }
    return {
      jobsPerSecond: round(drained / seconds),
      drained,
      seconds: round(seconds, 2),
      capped,
      commitsPerJob: round(sum("commits") / drained, 3),
      readsPerJob: round(sum("reads") / drained, 3),
      mutationsPerJob: round(sum("mutations") / drained, 3),
      enqueueToStart,
    };
  } finally {
    await Promise.all(instances.map((child) => child.kill()));
    removeTempDir(dir);
  }
}

/** The configurations, in the order every round runs them. */
function configurations(commitLatency: number, readLatency: number): RemoteKvConfiguration[] {
  const latencies = [{ commitLatency: 0, readLatency: 0 }, { commitLatency, readLatency }];
  return latencies.flatMap((latency) => [
    { store: "single" as const, instances: 1, ...latency },
    ...[1, 2, 4].map((instances) => ({ store: "shared" as const, instances, ...latency })),
  ]);
}

/** A configuration's name in logs and the table. */
function label(c: RemoteKvConfiguration): string {
  const store = c.store === "single" ? "DenoKvJobStore" : "DenoKvClusterStore";
  return `${store} × ${c.instances}, ${c.commitLatency}/${c.readLatency} ms`;
}

/** Run the scenario. */
export async function remoteKv(options: RemoteKvOptions): Promise<RemoteKvResult> {
  const { rounds, log } = options;
  const configs = configurations(options.commitLatency, options.readLatency);
  const runs = configs.map(() => [] as RemoteKvRun[]);
  for (let r = 1; r <= rounds; r++) {
    for (const [i, config] of configs.entries()) {
      const result = await run(config, options);
      runs[i].push(result);
      const probe = result.enqueueToStart;
      log(
        `  round ${r}: ${label(config)}: ${result.jobsPerSecond} jobs/s${
          result.capped ? ` (capped: ${result.drained} jobs in ${result.seconds} s)` : ""
        }, ${result.commitsPerJob} commits and ${result.readsPerJob} reads a job, enqueue → start ${
          probe
            ? `p50 ${probe.p50} ms, p99 ${probe.p99} ms (${probe.commitsPerJob} commits, ${probe.readsPerJob} reads a probe job)`
            : "not measured"
        }`,
      );
    }
  }
  const mid = (values: (number | null)[], digits = 1) => {
    const present = values.filter((v): v is number => v !== null);
    return present.length === 0 ? null : round(median(present), digits);
  };
  return {
    runtime: runtimeVersion(),
    jobs: options.jobs,
    rounds,
    endpointsPerInstance: ENDPOINTS,
    window: options.window ?? WINDOW,
    commitLatency: options.commitLatency,
    readLatency: options.readLatency,
    probeJobs: options.probeJobs,
    probeSpacing: options.probeSpacing,
    capSeconds: options.capSeconds,
    rows: configs.map((config, i) => ({
      ...config,
      runs: runs[i],
      median: {
        jobsPerSecond: round(median(runs[i].map((run) => run.jobsPerSecond))),
        commitsPerJob: round(median(runs[i].map((run) => run.commitsPerJob)), 3),
        readsPerJob: round(median(runs[i].map((run) => run.readsPerJob)), 3),
        mutationsPerJob: round(median(runs[i].map((run) => run.mutationsPerJob)), 3),
        enqueueToStartP50: mid(runs[i].map((run) => run.enqueueToStart?.p50 ?? null)),
        enqueueToStartP99: mid(runs[i].map((run) => run.enqueueToStart?.p99 ?? null)),
        probeCommitsPerJob: mid(runs[i].map((run) => run.enqueueToStart?.commitsPerJob ?? null), 2),
        probeReadsPerJob: mid(runs[i].map((run) => run.enqueueToStart?.readsPerJob ?? null), 2),
      },
      probe: config.instances > 1 ? "another instance" : "same instance",
      capped: runs[i].some((run) => run.capped),
    })),
  };
}

/** The result as a plain-text table (medians over the rounds). */
export function remoteKvTable(result: RemoteKvResult): string {
  const header = [
    "store",
    "instances",
    "commit/read",
    "jobs/s",
    "commits/job",
    "reads/job",
    "mutations/job",
    "enqueue→start p50",
    "p99",
    "(commits, reads)/probe job",
    "start measured on",
  ];
  const ms = (value: number | null) => (value === null ? "n/a" : `${value} ms`);
  const rows = result.rows.map(({ median: m, ...row }) => [
    row.store === "single" ? "DenoKvJobStore" : "DenoKvClusterStore",
    String(row.instances),
    `${row.commitLatency}/${row.readLatency} ms`,
    `${m.jobsPerSecond}${row.capped ? " (capped)" : ""}`,
    String(m.commitsPerJob),
    String(m.readsPerJob),
    String(m.mutationsPerJob),
    ms(m.enqueueToStartP50),
    ms(m.enqueueToStartP99),
    m.probeCommitsPerJob === null ? "n/a" : `${m.probeCommitsPerJob}, ${m.probeReadsPerJob}`,
    row.probe,
  ]);
  const widths = header.map((title, i) =>
    Math.max(title.length, ...rows.map((row) => row[i].length))
  );
  const line = (cells: string[]) =>
    cells.map((cell, i) => cell.padEnd(widths[i])).join("  ").trimEnd();
  const rounds = `${result.rounds} round${result.rounds === 1 ? "" : "s"}`;
  return [
    `remote KV (${result.runtime}), medians of ${rounds}: a backlog of ${
      result.jobs.toLocaleString("en-US")
    } jobs drained by ${result.endpointsPerInstance} endpoints an instance (window ${result.window}); ` +
    `enqueue → start over ${result.probeJobs} jobs added one at a time, ${result.probeSpacing} ms apart`,
    line(header),
    line(widths.map((width) => "-".repeat(width))),
    ...rows.map(line),
  ].join("\n");
}
