/**
 * Scenario 3, durable throughput: scenario 1's workpull system (server here, 1 worker process
 * × 4 endpoints, window 100, no-op handler) with a `DenoKvWorkQueue` on a fresh Deno KV file,
 * jobs/s from the first submission until the queue has written the last confirmation (as a raw
 * run ends with its last commit; the controller may write a confirmation some commits after the
 * worker sent it). Baselines, alternating with it:
 * the adapter's own writes done directly with `Deno.openKv` atomics, same keys and values
 * (store the jobs and rewrite meta; accept them with one record a run; delete them when
 * confirmed and remember them in one completed record — three commits, each checking the epoch
 * and meta versionstamps as the adapter does), one job per commit and 100 jobs per commit. Deno
 * only (Bun reaches Deno KV files through npm `@deno/kv`, which `bench/durable_throughput.ts`
 * covers).
 *
 * The same system also runs with a **remote producer** (the durable path through `POST /jobs`):
 * a separate process (`http_producer.ts`) posts the jobs in batches of
 * {@linkcode REMOTE_PRODUCER}`.batch` with a client token, `concurrency` requests in flight,
 * every batch answered with a 2xx; jobs/s from its first request until the last confirmation is
 * written.
 *
 * @module
 */

import { join } from "node:path";
import process from "node:process";
import { DenoKvWorkQueue } from "../../deno_kv.ts";
import { signToken } from "../../server.ts";
import { type Child, spawnChild } from "../lib/proc.ts";
import { rawKvWrites } from "../lib/raw_kv.ts";
import { countWrittenConfirmations } from "../lib/written_confirmations.ts";
import { now, repoPath, runtime, runtimeVersion, scriptCommand, until } from "../lib/runtime.ts";
import { SECRET } from "../lib/servers.ts";
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

/** The adapter's three commits, `perCommit` jobs in each (`lib/raw_kv.ts`); jobs/s. */
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

/**
 * The workpull system on a fresh KV file; jobs/s until the last confirmation is written. The NATS
 * peer (`nats_peer.ts`) runs it too, beside each of its file-storage rounds.
 */
export async function endToEnd(jobs: number, window: number): Promise<number> {
  const { kv, close } = await freshKv();
  let setup: WorkpullSetup | undefined;
  try {
    const queue = new DenoKvWorkQueue(kv);
    const written = countWrittenConfirmations(queue);
    setup = await WorkpullSetup.start({ processes: 1, perProcess: 4 }, {
      window,
      controller: { queue },
    });
    return await setup.run(jobs, () => written.count() >= jobs);
  } finally {
    await setup?.close();
    close();
  }
}

/** The remote producer: jobs per `POST /jobs` and requests in flight. */
export const REMOTE_PRODUCER = { batch: 100, concurrency: 4 } as const;

/**
 * The workpull system on a fresh KV file, fed over `POST /jobs` by another process; jobs/s
 * until the last confirmation is written.
 */
async function remoteEndToEnd(jobs: number, window: number): Promise<number> {
  const { kv, close } = await freshKv();
  let setup: WorkpullSetup | undefined;
  let producer: Child | undefined;
  try {
    const queue = new DenoKvWorkQueue(kv);
    const written = countWrittenConfirmations(queue);
    setup = await WorkpullSetup.start({ processes: 1, perProcess: 4 }, {
      window,
      controller: { queue },
    });
    const token = await signToken(SECRET, { producer: "bench", expiresIn: 3_600_000 });
    const { command, args } = scriptCommand(runtime, repoPath("bench/scenarios/http_producer.ts"));
    producer = spawnChild("remote producer", command, args, {
      stdin: true,
      env: {
        WORKPULL_BENCH: JSON.stringify({
          url: new URL("jobs", setup.server.url).href,
          token,
          jobs,
          ...REMOTE_PRODUCER,
        }),
      },
    });
    await producer.next((r) => r.ev === "ready", "the remote producer ready", 30_000);
    let failure: string | undefined;
    producer.onReport((r) => {
      if (r.ev === "error") failure = `POST /jobs answered ${r.status}: ${r.body}`;
    });
    const started = producer.next((r) => r.ev === "start", "the first POST /jobs", 10_000);
    const posted = producer.next((r) => r.ev === "posted", "every batch answered", 120_000);
    posted.catch(() => {}); // awaited below unless the run failed first
    producer.command({ cmd: "go" });
    const start = await started;
    await until(
      () => failure !== undefined || written.count() >= jobs,
      `${jobs} confirmations of jobs posted over HTTP, written`,
      120_000,
    );
    if (failure) throw new Error(failure);
    const end = now();
    await posted;
    return jobs / ((end - (start.t as number)) / 1000);
  } finally {
    await producer?.kill();
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
    readonly remote: number;
  };
  readonly endToEnd: { readonly samples: number[]; readonly median: number };
  readonly rawSingle: { readonly samples: number[]; readonly median: number };
  readonly rawBatch: { readonly samples: number[]; readonly median: number };
  /** The same system fed over `POST /jobs` by a remote producer process. */
  readonly remote: { readonly samples: number[]; readonly median: number };
  readonly remoteProducer: typeof REMOTE_PRODUCER;
  /** Per round: in-process end to end / raw 100 per commit, remote / raw 100 per commit. */
  readonly ratios: { readonly endToEnd: number[]; readonly remote: number[] };
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
  const remote: number[] = [];
  const runs: [number[], () => Promise<number>][] = [
    [e2e, () => endToEnd(options.jobs, options.window)],
    [single, () => raw(options.singleJobs, 1)],
    [batch, () => raw(options.jobs, 100)],
    [remote, () => remoteEndToEnd(options.jobs, options.window)],
  ];
  await endToEnd(Math.round(options.jobs / 4), options.window); // warm-up
  await remoteEndToEnd(Math.round(options.jobs / 4), options.window);
  for (let i = 0; i < options.rounds; i++) {
    const order = i % 2 === 0 ? runs : runs.toReversed();
    for (const [samples, run] of order) samples.push(await run());
    options.log(
      `  round ${i + 1}/${options.rounds}: workpull + KV ${fmt(e2e.at(-1)!)}, over POST /jobs ${
        fmt(remote.at(-1)!)
      }, raw 1/commit ${fmt(single.at(-1)!)}, raw 100/commit ${fmt(batch.at(-1)!)} jobs/s`,
    );
  }
  const summary = (samples: number[]) => ({
    samples: samples.map((v) => round(v)),
    median: round(median(samples)),
  });
  return {
    runtime: runtimeVersion(),
    rounds: options.rounds,
    jobs: {
      endToEnd: options.jobs,
      rawSingle: options.singleJobs,
      rawBatch: options.jobs,
      remote: options.jobs,
    },
    endToEnd: summary(e2e),
    rawSingle: summary(single),
    rawBatch: summary(batch),
    remote: summary(remote),
    remoteProducer: REMOTE_PRODUCER,
    ratios: {
      endToEnd: e2e.map((value, i) => round(value / batch[i], 3)),
      remote: remote.map((value, i) => round(value / batch[i], 3)),
    },
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
