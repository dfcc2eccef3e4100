/**
 * Scenario 3, durable throughput: scenario 1's workpull system (server here, 1 worker process
 * × 4 endpoints, window 100, no-op handler) with a `DenoKvWorkQueue` on a fresh Deno KV file,
 * jobs/s from the first submission to the last confirmation. Baselines, alternating with it:
 * the adapter's own writes done directly with `Deno.openKv` atomics, same keys and values
 * (per job: store the job and rewrite meta; mark it accepted; delete it when confirmed — three
 * commits, each checking the epoch and meta versionstamps as the adapter does), one job per
 * commit and 100 jobs per commit. Deno only (Bun reaches Deno KV files through npm `@deno/kv`,
 * which `bench/durable_throughput.ts` covers).
 *
 * @module
 */

import { join } from "node:path";
import process from "node:process";
import { DenoKvWorkQueue } from "../../deno_kv.ts";
import { rawKvWrites } from "../lib/raw_kv.ts";
import { now, runtimeVersion } from "../lib/runtime.ts";
import { WorkpullSetup } from "../lib/setups.ts";
import { median, round } from "../lib/stats.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";

/** Open a fresh KV file in a temporary directory; removed by `close`. */
async function freshKv(): Promise<{ kv: Deno.Kv; close(): void }> {
  const dir = makeTempDir("kv");
  const kv = await Deno.openKv(join(dir, "queue.kv"));
  return {
    kv,
    close() {
      kv.close();
      removeTempDir(dir);
    },
  };
}

/** The adapter's three commits per job, `perCommit` jobs in each (`lib/raw_kv.ts`); jobs/s. */
async function raw(jobs: number, perCommit: number): Promise<number> {
  const { kv, close } = await freshKv();
  try {
    const started = now();
    await rawKvWrites(kv, jobs, perCommit);
    return jobs / ((now() - started) / 1000);
  } finally {
    close();
  }
}

/** The workpull system on a fresh KV file; jobs/s. */
async function endToEnd(jobs: number, window: number): Promise<number> {
  const { kv, close } = await freshKv();
  let setup: WorkpullSetup | undefined;
  try {
    setup = await WorkpullSetup.start({ processes: 1, perProcess: 4 }, {
      window,
      controller: { queue: new DenoKvWorkQueue(kv) },
    });
    return await setup.run(jobs);
  } finally {
    await setup?.close();
    close();
  }
}

/** The scenario's result (jobs/s medians). */
export interface DurableResult {
  readonly runtime: string;
  readonly rounds: number;
  readonly jobs: {
    readonly endToEnd: number;
    readonly rawSingle: number;
    readonly rawBatch: number;
  };
  readonly endToEnd: { readonly samples: number[]; readonly median: number };
  readonly rawSingle: { readonly samples: number[]; readonly median: number };
  readonly rawBatch: { readonly samples: number[]; readonly median: number };
}

/** Run the scenario (Deno only). */
export async function durable(options: {
  jobs: number;
  singleJobs: number;
  rounds: number;
  window: number;
  log: (line: string) => void;
}): Promise<DurableResult> {
  const e2e: number[] = [];
  const single: number[] = [];
  const batch: number[] = [];
  const runs: [number[], () => Promise<number>][] = [
    [e2e, () => endToEnd(options.jobs, options.window)],
    [single, () => raw(options.singleJobs, 1)],
    [batch, () => raw(options.jobs, 100)],
  ];
  await endToEnd(Math.round(options.jobs / 4), options.window); // warm-up
  for (let i = 0; i < options.rounds; i++) {
    const order = i % 2 === 0 ? runs : runs.toReversed();
    for (const [samples, run] of order) samples.push(await run());
    options.log(
      `  round ${i + 1}/${options.rounds}: workpull + KV ${fmt(e2e.at(-1)!)}, raw 1/commit ${
        fmt(single.at(-1)!)
      }, raw 100/commit ${fmt(batch.at(-1)!)} jobs/s`,
    );
  }
  const summary = (samples: number[]) => ({
    samples: samples.map((v) => round(v)),
    median: round(median(samples)),
  });
  return {
    runtime: runtimeVersion(),
    rounds: options.rounds,
    jobs: { endToEnd: options.jobs, rawSingle: options.singleJobs, rawBatch: options.jobs },
    endToEnd: summary(e2e),
    rawSingle: summary(single),
    rawBatch: summary(batch),
  };
}

function fmt(value: number): string {
  return Math.round(value).toLocaleString("en-US");
}

if (import.meta.main) {
  const result = await durable({
    jobs: Number(process.argv[2] ?? 20_000),
    singleJobs: 1000,
    rounds: Number(process.argv[3] ?? 3),
    window: 100,
    log: console.log,
  });
  console.log(JSON.stringify(result));
  process.exit(0);
}
