/**
 * The cluster scenario: several instances of one flow on one Deno KV file
 * (`DenoKvClusterStore`), each an instance process (`cluster_instance.ts`) with its own
 * in-process worker endpoints.
 *
 * - **Aggregate throughput with 1, 2 and 3 instances**, in alternating rounds of the same run:
 *   per round a fresh KV file whose shared backlog this process fills with `jobs` jobs first;
 *   then the instances start, and on `go` each attaches 4 endpoints (window 100, no-op handler)
 *   and claims as its workers pull. Timed from `go` to the last completion in any instance. What
 *   scales is the flow's work on the file: claims, tries and outcomes of different instances
 *   contend for SQLite's one writer, so on one machine the aggregate shows that cost, not more
 *   cores (a hosted KV spreads writers).
 * - **Takeover**: a victim instance holds 20 jobs it never finishes (2 endpoints, window 10);
 *   two survivors with idle workers (5 ms a job) wait. The victim gets SIGKILL. Measured from
 *   the kill: a survivor's takeover, the first start of one of the victim's jobs on a survivor
 *   (the first redelivery) and all 20 done. Lease TTL 2 s, renewed every 500 ms, so a takeover
 *   comes at most 2.5 s after the kill (the last renewal may be up to one interval old).
 *
 * @module
 */

import { join } from "node:path";
import { type ClusterKvLike, DenoKvClusterStore } from "../../deno_kv.ts";
import { planJob } from "../../src/lifecycle/job_options.ts";
import { type Child, spawnChild } from "../lib/proc.ts";
import { binary, now, repoPath, runtimeVersion, until } from "../lib/runtime.ts";
import { median, round } from "../lib/stats.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";
import type { InstanceConfig } from "./cluster_instance.ts";

/** The throughput of one instance count. */
export interface ClusterThroughput {
  readonly instances: number;
  /** jobs/s, one per round. */
  readonly samples: number[];
  readonly median: number;
}

/** One takeover round, ms after the kill. */
export interface TakeoverSample {
  readonly takeover: number;
  readonly firstRedelivery: number;
  readonly allDone: number;
  readonly jobs: number;
}

/** The scenario's result. */
export interface ClusterResult {
  readonly runtime: string;
  readonly jobs: number;
  readonly rounds: number;
  readonly endpointsPerInstance: number;
  readonly window: number;
  readonly throughput: ClusterThroughput[];
  readonly takeover: {
    readonly leaseTtl: number;
    readonly renewInterval: number;
    readonly samples: TakeoverSample[];
    readonly median: TakeoverSample;
  };
}

const ENDPOINTS = 4;
const WINDOW = 100;
const LEASE_TTL = 2000;
const RENEW = 500;
const VICTIM_JOBS = 20;

function spawnInstance(name: string, config: InstanceConfig): Child {
  return spawnChild(name, binary("deno"), [
    "run",
    "-A",
    "--unstable-kv",
    "--quiet",
    repoPath("bench/scenarios/cluster_instance.ts"),
  ], { env: { WORKPULL_BENCH_INSTANCE: JSON.stringify(config) }, stdin: true });
}

/** Fill the shared backlog of the KV file at `path` with `count` jobs. */
async function fill(path: string, count: number, prefix: string): Promise<void> {
  const kv = await Deno.openKv(path);
  try {
    const store = new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
      prefix: ["bench"],
      maxBacklog: 100_000_000,
    });
    const plan = planJob({}, Date.now());
    for (let n = 0; n < count; n += 1000) {
      const batch = [];
      for (let i = n; i < Math.min(count, n + 1000); i++) {
        batch.push({ id: `${prefix}${i}`, payload: `{"n":${i}}`, plan });
      }
      await store.enqueue(batch);
    }
    store.close();
  } finally {
    kv.close();
  }
}

/** One throughput round with `count` instances: jobs/s. */
async function throughputRound(count: number, jobs: number): Promise<number> {
  const dir = makeTempDir("cluster");
  const instances: Child[] = [];
  try {
    const kvPath = join(dir, "flow.kv");
    await fill(kvPath, jobs, "j");
    const config: InstanceConfig = {
      kvPath,
      workers: ENDPOINTS,
      window: WINDOW,
      handler: "noop",
      watch: false,
      leaseTtl: 10_000,
      renewInterval: 3_000,
    };
    for (let i = 0; i < count; i++) instances.push(spawnInstance(`instance ${i + 1}`, config));
    await Promise.all(instances.map((child) => child.next((r) => r.ev === "ready", "ready")));
    const done = instances.map(() => ({ count: 0, last: 0 }));
    instances.forEach((child, i) =>
      child.onReport((r) => {
        if (r.ev === "done") done[i] = { count: r.count as number, last: r.last as number };
      })
    );
    const go = now();
    for (const child of instances) child.command({ cmd: "go" });
    await until(
      () => done.reduce((sum, d) => sum + d.count, 0) >= jobs,
      `${jobs} jobs done by ${count} instances`,
      300_000,
      5,
    );
    const end = Math.max(...done.map((d) => d.last));
    return jobs / ((end - go) / 1000);
  } finally {
    await Promise.all(instances.map((child) => child.kill()));
    removeTempDir(dir);
  }
}

/** One takeover round. */
async function takeoverRound(): Promise<TakeoverSample> {
  const dir = makeTempDir("cluster-takeover");
  const instances: Child[] = [];
  try {
    const kvPath = join(dir, "flow.kv");
    const base = { kvPath, leaseTtl: LEASE_TTL, renewInterval: RENEW, watch: true };
    const victim = spawnInstance("victim", {
      ...base,
      workers: 2,
      window: VICTIM_JOBS / 2,
      handler: "stuck",
    });
    instances.push(victim);
    await victim.next((r) => r.ev === "ready", "ready");
    victim.command({ cmd: "go" });
    await fill(kvPath, VICTIM_JOBS, "v");
    await victim.next(
      (r) => r.ev === "claimed" && (r.count as number) >= VICTIM_JOBS,
      `the victim to hold ${VICTIM_JOBS} jobs`,
    );
    const survivors = [1, 2].map((i) =>
      spawnInstance(`survivor ${i}`, { ...base, workers: 2, window: 10, handler: 5 })
    );
    instances.push(...survivors);
    await Promise.all(survivors.map((child) => child.next((r) => r.ev === "ready", "ready")));
    for (const child of survivors) child.command({ cmd: "go" });
    let takeover = 0, jobs = 0, first = 0, allDone = 0;
    const done = [0, 0];
    survivors.forEach((child, i) =>
      child.onReport((r) => {
        if (r.ev === "takeover" && takeover === 0) {
          takeover = r.at as number;
          jobs = r.jobs as number;
        }
        if (r.ev === "start" && first === 0) first = r.at as number;
        if (r.ev === "done") {
          done[i] = r.count as number;
          if (done[0] + done[1] >= VICTIM_JOBS && allDone === 0) allDone = r.last as number;
        }
      })
    );
    const killed = now();
    await victim.kill();
    await until(() => allDone > 0, "the victim's jobs done by the survivors", 60_000, 5);
    return {
      takeover: round(takeover - killed, 1),
      firstRedelivery: round(first - killed, 1),
      allDone: round(allDone - killed, 1),
      jobs,
    };
  } finally {
    await Promise.all(instances.map((child) => child.kill()));
    removeTempDir(dir);
  }
}

/** Run the scenario. */
export async function cluster(
  options: { jobs: number; rounds: number; takeoverRounds: number; log: (line: string) => void },
): Promise<ClusterResult> {
  const { jobs, rounds, takeoverRounds, log } = options;
  const counts = [1, 2, 3];
  const samples = new Map(counts.map((count) => [count, [] as number[]]));
  for (let r = 1; r <= rounds; r++) {
    for (const count of counts) {
      const rate = await throughputRound(count, jobs);
      samples.get(count)!.push(round(rate));
      log(`  round ${r}: ${count} instance${count > 1 ? "s" : ""} ${Math.round(rate)} jobs/s`);
    }
  }
  const takeovers: TakeoverSample[] = [];
  for (let r = 1; r <= takeoverRounds; r++) {
    const sample = await takeoverRound();
    takeovers.push(sample);
    log(
      `  takeover round ${r}: taken over ${sample.takeover} ms after the kill, first ` +
        `redelivery ${sample.firstRedelivery} ms, all ${VICTIM_JOBS} done ${sample.allDone} ms`,
    );
  }
  const mid = (key: keyof TakeoverSample) => round(median(takeovers.map((s) => s[key])), 1);
  return {
    runtime: runtimeVersion(),
    jobs,
    rounds,
    endpointsPerInstance: ENDPOINTS,
    window: WINDOW,
    throughput: counts.map((count) => ({
      instances: count,
      samples: samples.get(count)!,
      median: round(median(samples.get(count)!)),
    })),
    takeover: {
      leaseTtl: LEASE_TTL,
      renewInterval: RENEW,
      samples: takeovers,
      median: {
        takeover: mid("takeover"),
        firstRedelivery: mid("firstRedelivery"),
        allDone: mid("allDone"),
        jobs: mid("jobs"),
      },
    },
  };
}
