/**
 * Scenario 1, throughput in memory over WebSocket: one controller (this process), 4 worker
 * endpoints in 1 worker process (1×4) and in 4 worker processes (4×1), no-op handler, payload
 * `{"n":i}`, window 100; jobs/s from the first `submit()` to the last confirmation seen by the
 * controller. Baselines, with the same layout (sockets per process) and window per socket: the
 * per-job raw WebSocket server and clients of `lib/servers.ts` (one frame per job, one
 * confirmation per job), and the batched raw WebSocket limit of `lib/batched_raw.ts` (workpull's
 * batching and cumulative confirmation, no queue logic). Beside them, workpull as a job queue
 * (`JobQueueSetup`: a `JobQueue` on a `MemoryJobStore`, every job a record with its state, tries
 * and result) with the same worker processes, against workpull's controller alone: what the job
 * lifecycle costs. Rounds rotate the four systems (and which goes first) after five unmeasured
 * warm-up runs of each; each ratio is the median of the per-round ratios.
 *
 * @module
 */

import process from "node:process";
import { median, round } from "../lib/stats.ts";
import {
  JobQueueSetup,
  RawSetup,
  type Setup,
  type Topology,
  topologyLabel,
  WorkpullSetup,
} from "../lib/setups.ts";
import { runtime, runtimeVersion } from "../lib/runtime.ts";
import { BatchedRawSetup } from "../lib/batched_raw.ts";

/**
 * Unmeasured runs of each system before the rounds (both layouts run them, so the code shared by
 * the two controllers sees 1,000,000 jobs). Five, not two: workpull on Deno (1×4, 100,000 jobs a
 * run, alternating with the batched limit) ran 285–505k jobs/s over its first 10 runs and
 * 602–637k over the next 4; in a second try its runs from the 7th on had a median of about 640k
 * (495–709k). The batched limit was within its later range from its second run. Two warm-up runs
 * measured a workpull still warming up against a settled baseline.
 */
const WARMUP_RUNS = 5;

/** Options of {@linkcode throughput}. */
export interface ThroughputOptions {
  readonly jobs: number;
  readonly rounds: number;
  readonly window: number;
  readonly topologies: readonly Topology[];
  readonly log: (line: string) => void;
  /** Called between the warm-up and the measured rounds (profiling starts there). */
  readonly onMeasure?: () => Promise<void>;
}

/** One layout's figures. */
export interface ThroughputPair {
  readonly topology: string;
  readonly raw: { readonly samples: number[]; readonly median: number };
  readonly workpull: { readonly samples: number[]; readonly median: number };
  /** workpull / raw, per round. */
  readonly ratios: number[];
  readonly ratio: number;
  /** The batched raw WebSocket limit. */
  readonly batched: { readonly samples: number[]; readonly median: number };
  /** workpull / batched raw, per round, and their median. */
  readonly batchedRatios: number[];
  readonly batchedRatio: number;
  /** workpull as a job queue (`JobQueueSetup`); absent in results from before it was measured. */
  readonly jobQueue?: { readonly samples: number[]; readonly median: number };
  /** job queue / workpull, per round, and their median. */
  readonly jobQueueRatios?: number[];
  readonly jobQueueRatio?: number;
}

/** The scenario's result. */
export interface ThroughputResult {
  readonly runtime: string;
  readonly jobs: number;
  readonly rounds: number;
  readonly window: number;
  readonly pairs: ThroughputPair[];
}

/** Run the scenario on this process's runtime. */
export async function throughput(options: ThroughputOptions): Promise<ThroughputResult> {
  const { jobs, rounds, window, log } = options;
  const pairs: {
    topology: Topology;
    raw: Setup;
    batched: Setup;
    workpull: Setup;
    jobQueue: Setup;
    r: number[];
    b: number[];
    w: number[];
    q: number[];
  }[] = [];
  try {
    for (const topology of options.topologies) {
      const raw = await RawSetup.start(topology, window);
      const batched = await BatchedRawSetup.start(topology, window).catch(async (error) => {
        await raw.close();
        throw error;
      });
      const workpull = await WorkpullSetup.start(topology, { window }).catch(async (error) => {
        await raw.close();
        await batched.close();
        throw error;
      });
      const jobQueue = await JobQueueSetup.start(topology, { window }).catch(async (error) => {
        await raw.close();
        await batched.close();
        await workpull.close();
        throw error;
      });
      pairs.push({ topology, raw, batched, workpull, jobQueue, r: [], b: [], w: [], q: [] });
    }
    // JIT and heap warm-up: a few hundred thousand jobs on every runtime (see WARMUP_RUNS).
    log(`  warm-up (${WARMUP_RUNS} × ${jobs.toLocaleString("en-US")} jobs each, not counted)`);
    for (let i = 0; i < WARMUP_RUNS; i++) {
      for (const pair of pairs) {
        await pair.raw.run(jobs);
        await pair.batched.run(jobs);
        await pair.workpull.run(jobs);
        await pair.jobQueue.run(jobs);
      }
    }
    await options.onMeasure?.();
    for (let i = 0; i < rounds; i++) {
      const ordered = i % 2 === 0 ? pairs : pairs.toReversed();
      for (const pair of ordered) {
        // Each system goes first in turn; every other cycle the others run in reverse order.
        const systems = ["raw", "batched", "workpull", "jobQueue"] as const;
        const samples = { raw: pair.r, batched: pair.b, workpull: pair.w, jobQueue: pair.q };
        const order = systems.map((_, k) => systems[(i + k) % systems.length]);
        if ((i / systems.length | 0) % 2 === 1) order.push(...order.splice(1).reverse());
        for (const system of order) samples[system].push(await pair[system].run(jobs));
        const label = topologyLabel(pair.topology);
        const [r, b, w, q] = [pair.r, pair.b, pair.w, pair.q].map((list) => list.at(-1)!);
        log(
          `  round ${i + 1}/${rounds} ${label}: raw ${fmt(r)}, batched raw ${fmt(b)}, workpull ${
            fmt(w)
          } jobs/s (${(w / r).toFixed(2)}x raw, ${(w / b).toFixed(2)}x batched); job queue ${
            fmt(q)
          } jobs/s (${(q / w).toFixed(2)}x workpull)`,
        );
      }
    }
  } finally {
    for (const pair of pairs) {
      await pair.raw.close();
      await pair.batched.close();
      await pair.workpull.close();
      await pair.jobQueue.close();
    }
  }
  return {
    runtime: runtimeVersion(),
    jobs,
    rounds,
    window,
    pairs: pairs.map(({ topology, r, b, w, q }) => {
      const ratios = w.map((value, i) => round(value / r[i], 3));
      const batchedRatios = w.map((value, i) => round(value / b[i], 3));
      const jobQueueRatios = q.map((value, i) => round(value / w[i], 3));
      return {
        topology: topologyLabel(topology),
        raw: { samples: r.map((v) => round(v)), median: round(median(r)) },
        workpull: { samples: w.map((v) => round(v)), median: round(median(w)) },
        ratios,
        ratio: round(median(ratios), 3),
        batched: { samples: b.map((v) => round(v)), median: round(median(b)) },
        batchedRatios,
        batchedRatio: round(median(batchedRatios), 3),
        jobQueue: { samples: q.map((v) => round(v)), median: round(median(q)) },
        jobQueueRatios,
        jobQueueRatio: round(median(jobQueueRatios), 3),
      };
    }),
  };
}

function fmt(value: number): string {
  return Math.round(value).toLocaleString("en-US");
}

if (import.meta.main) {
  const jobs = Number(process.argv[2] ?? 100_000);
  const rounds = Number(process.argv[3] ?? 3);
  console.log(`throughput on ${runtime}`);
  const result = await throughput({
    jobs,
    rounds,
    window: 100,
    topologies: [{ processes: 1, perProcess: 4 }, { processes: 4, perProcess: 1 }],
    log: console.log,
  });
  console.log(JSON.stringify(result, null, 1));
  process.exit(0);
}
