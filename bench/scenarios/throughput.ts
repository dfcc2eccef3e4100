/**
 * Scenario 1, throughput in memory over WebSocket: one controller (this process), 4 worker
 * endpoints in 1 worker process (1×4) and in 4 worker processes (4×1), no-op handler, payload
 * `{"n":i}`, window 100; jobs/s from the first `submit()` to the last confirmation seen by the
 * controller. Baselines, with the same layout (sockets per process) and window per socket: the
 * per-job raw WebSocket server and clients of `lib/servers.ts` (one frame per job, one
 * confirmation per job), and the batched raw WebSocket limit of `lib/batched_raw.ts` (workpull's
 * batching and cumulative confirmation, no queue logic). Rounds rotate the three systems (and
 * which goes first) after five unmeasured warm-up runs of each; each ratio is the median of the
 * per-round ratios.
 *
 * @module
 */

import process from "node:process";
import { median, round } from "../lib/stats.ts";
import {
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
    r: number[];
    b: number[];
    w: number[];
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
      pairs.push({ topology, raw, batched, workpull, r: [], b: [], w: [] });
    }
    // JIT and heap warm-up: a few hundred thousand jobs on every runtime (see WARMUP_RUNS).
    log(`  warm-up (${WARMUP_RUNS} × ${jobs.toLocaleString("en-US")} jobs each, not counted)`);
    for (let i = 0; i < WARMUP_RUNS; i++) {
      for (const pair of pairs) {
        await pair.raw.run(jobs);
        await pair.batched.run(jobs);
        await pair.workpull.run(jobs);
      }
    }
    await options.onMeasure?.();
    for (let i = 0; i < rounds; i++) {
      const ordered = i % 2 === 0 ? pairs : pairs.toReversed();
      for (const pair of ordered) {
        // Each system goes first in turn; every other cycle the other two swap.
        const systems = ["raw", "batched", "workpull"] as const;
        const order = systems.map((_, k) => systems[(i + k) % systems.length]);
        if ((i / systems.length | 0) % 2 === 1) order.push(...order.splice(1, 2).reverse());
        for (const system of order) {
          const rate = await pair[system].run(jobs);
          (system === "raw" ? pair.r : system === "batched" ? pair.b : pair.w).push(rate);
        }
        const label = topologyLabel(pair.topology);
        log(
          `  round ${i + 1}/${rounds} ${label}: raw ${fmt(pair.r.at(-1)!)}, batched raw ${
            fmt(pair.b.at(-1)!)
          }, workpull ${fmt(pair.w.at(-1)!)} jobs/s (${
            (pair.w.at(-1)! / pair.r.at(-1)!).toFixed(2)
          }x raw, ${(pair.w.at(-1)! / pair.b.at(-1)!).toFixed(2)}x batched)`,
        );
      }
    }
  } finally {
    for (const pair of pairs) {
      await pair.raw.close();
      await pair.batched.close();
      await pair.workpull.close();
    }
  }
  return {
    runtime: runtimeVersion(),
    jobs,
    rounds,
    window,
    pairs: pairs.map(({ topology, r, b, w }) => {
      const ratios = w.map((value, i) => round(value / r[i], 3));
      const batchedRatios = w.map((value, i) => round(value / b[i], 3));
      return {
        topology: topologyLabel(topology),
        raw: { samples: r.map((v) => round(v)), median: round(median(r)) },
        workpull: { samples: w.map((v) => round(v)), median: round(median(w)) },
        ratios,
        ratio: round(median(ratios), 3),
        batched: { samples: b.map((v) => round(v)), median: round(median(b)) },
        batchedRatios,
        batchedRatio: round(median(batchedRatios), 3),
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
