/**
 * Scenario 3b, the durable backlog (Deno KV file), Deno only. A `JobQueue` on a `DenoKvJobStore`
 * in a fresh KV file, served by `serveDeno`:
 *
 * - **ingest**: another process (`http_producer.ts`) posts jobs to `POST /jobs` in batches of
 *   {@linkcode INGEST}`.batch` with a client token, `concurrency` requests in flight, with no
 *   worker connected; jobs/s from its first request to the last `201`. Each answer means the
 *   jobs are committed to the KV file. Baseline: the store's own writes for the same jobs (each
 *   record with its small payload in it, 100 jobs per commit, fenced by the epoch) done directly
 *   with KV atomics.
 * - **drain**: the backlog filled (by the ingest run), one worker process × 4 endpoints (window
 *   100, no-op handler) joins; jobs/s from the first worker bound to the last job completed (its
 *   try stored as completed in the KV file). Baseline: the store's writes for taking and
 *   completing the same jobs (100 per commit) done directly with KV atomics.
 *
 * Rounds alternate workpull and the baselines; the ratios are per round.
 *
 * @module
 */

import { join } from "node:path";
import { DenoKvJobStore } from "../../deno_kv.ts";
import { serveDeno } from "../../deno.ts";
import { JobQueue } from "../../mod.ts";
import { signToken, type WorkpullServer } from "../../server.ts";
import { type Child, spawnChild } from "../lib/proc.ts";
import { rawBacklogDrain, rawBacklogIngest } from "../lib/raw_backlog.ts";
import { now, repoPath, runtime, runtimeVersion, scriptCommand, until } from "../lib/runtime.ts";
import { SECRET, workerToken } from "../lib/servers.ts";
import { spawnWorker } from "../lib/setups.ts";
import { median, round } from "../lib/stats.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";

/** The remote producer of the ingest run: jobs per `POST /jobs` and requests in flight. */
export const INGEST = { batch: 100, concurrency: 4 } as const;

/** A fresh KV file in a temporary directory; removed by `close`. */
async function freshKv(): Promise<{ kv: Deno.Kv; close(): void }> {
  const dir = makeTempDir("backlog");
  const kv = await Deno.openKv(join(dir, "jobs.kv"));
  return {
    kv,
    close() {
      kv.close();
      removeTempDir(dir);
    },
  };
}

/** One workpull round: ingest over HTTP, then drain by a worker process; jobs/s of each. */
async function workpullRound(jobs: number, window: number) {
  const { kv, close } = await freshKv();
  const queue = new JobQueue({
    name: "bench",
    store: new DenoKvJobStore(kv, { prefix: ["bench"], maxBacklog: jobs + 1 }),
  });
  let server: WorkpullServer | undefined;
  let producer: Child | undefined;
  let worker: Child | undefined;
  try {
    await queue.start();
    server = await serveDeno({ queue, auth: { secret: SECRET } });
    // Ingest: no worker connected.
    const token = await signToken(SECRET, { producer: "bench", expiresIn: 3_600_000 });
    const { command, args } = scriptCommand(runtime, repoPath("bench/scenarios/http_producer.ts"));
    producer = spawnChild("backlog producer", command, args, {
      stdin: true,
      env: {
        WORKPULL_BENCH: JSON.stringify({
          url: new URL("jobs", server.url).href,
          token,
          jobs,
          ...INGEST,
        }),
      },
    });
    await producer.next((r) => r.ev === "ready", "the producer ready", 30_000);
    let failure: string | undefined;
    producer.onReport((r) => {
      if (r.ev === "error") failure = `POST /jobs answered ${r.status}: ${r.body}`;
    });
    const started = producer.next((r) => r.ev === "start", "the first POST /jobs", 10_000);
    const posted = producer.next((r) => r.ev === "posted", "every batch answered", 300_000);
    posted.catch(() => {}); // awaited below unless the run failed first
    producer.command({ cmd: "go" });
    const start = (await started).t as number;
    const end = (await posted).t as number;
    if (failure) throw new Error(failure);
    const ingest = jobs / ((end - start) / 1000);
    const waiting = queue.stats().backlog.waiting;
    if (waiting !== jobs) throw new Error(`${waiting} jobs waiting after ingest, not ${jobs}`);

    // Drain: a worker process joins the full backlog.
    let firstBound: number | undefined;
    queue.controller.addEventListener("worker-bound", () => (firstBound ??= now()));
    const target = queue.controller.stats().totals.confirmed + jobs;
    worker = await spawnWorker("backlog worker", {
      mode: "workpull",
      url: server.workersUrl.href,
      token: await workerToken("w0"),
      name: "w0",
      concurrency: 4,
      window,
      handler: "noop",
    });
    await until(
      () => queue.controller.stats().totals.confirmed >= target,
      `${jobs} jobs drained`,
      300_000,
    );
    await until(() => queue.stats().backlog.active === 0, "the last tries stored", 30_000);
    const stored = now();
    const completed = queue.stats().backlog;
    if (completed.waiting + completed.active + completed.failed + completed.dead !== 0) {
      throw new Error(`jobs left after the drain: ${JSON.stringify(completed)}`);
    }
    const drain = jobs / ((stored - firstBound!) / 1000);
    return { ingest, drain };
  } finally {
    await producer?.kill();
    await worker?.kill();
    await server?.close();
    await queue.close();
    close();
  }
}

/** A raw baseline on a fresh KV file. */
async function raw(run: (kv: Deno.Kv) => Promise<number>): Promise<number> {
  const { kv, close } = await freshKv();
  try {
    return await run(kv);
  } finally {
    close();
  }
}

/** Samples and their median. */
interface Series {
  readonly samples: number[];
  readonly median: number;
}

/** The scenario's result (jobs/s). */
export interface BacklogResult {
  readonly runtime: string;
  readonly rounds: number;
  readonly jobs: number;
  readonly ingestProducer: typeof INGEST;
  /** `POST /jobs` into the KV backlog, no worker. */
  readonly ingest: Series;
  /** Raw KV: the same records and payloads, 100 jobs per commit. */
  readonly rawIngest: Series;
  /** Backlog → one worker process × 4 endpoints, every try stored completed. */
  readonly drain: Series;
  /** Raw KV: the same take and completion writes, 100 jobs per commit. */
  readonly rawDrain: Series;
  /** Per round: ingest / raw ingest, drain / raw drain. */
  readonly ratios: { readonly ingest: number[]; readonly drain: number[] };
}

/** Run the scenario (Deno only). */
export async function backlog(options: {
  jobs: number;
  rounds: number;
  window: number;
  log: (line: string) => void;
}): Promise<BacklogResult> {
  const ingest: number[] = [];
  const drain: number[] = [];
  const rawIngest: number[] = [];
  const rawDrain: number[] = [];
  const runs: (() => Promise<void>)[] = [
    async () => {
      const round = await workpullRound(options.jobs, options.window);
      ingest.push(round.ingest);
      drain.push(round.drain);
    },
    async () => void rawIngest.push(await raw((kv) => rawBacklogIngest(kv, options.jobs, 100))),
    async () => void rawDrain.push(await raw((kv) => rawBacklogDrain(kv, options.jobs, 100))),
  ];
  await workpullRound(Math.round(options.jobs / 4), options.window); // warm-up
  for (let i = 0; i < options.rounds; i++) {
    for (const run of i % 2 === 0 ? runs : runs.toReversed()) await run();
    options.log(
      `  round ${i + 1}/${options.rounds}: ingest over POST /jobs ${fmt(ingest.at(-1)!)} ` +
        `(raw KV ${fmt(rawIngest.at(-1)!)}), drain to workers ${fmt(drain.at(-1)!)} ` +
        `(raw KV ${fmt(rawDrain.at(-1)!)}) jobs/s`,
    );
  }
  const series = (samples: number[]): Series => ({
    samples: samples.map((v) => round(v)),
    median: round(median(samples)),
  });
  return {
    runtime: runtimeVersion(),
    rounds: options.rounds,
    jobs: options.jobs,
    ingestProducer: INGEST,
    ingest: series(ingest),
    rawIngest: series(rawIngest),
    drain: series(drain),
    rawDrain: series(rawDrain),
    ratios: {
      ingest: ingest.map((value, i) => round(value / rawIngest[i], 3)),
      drain: drain.map((value, i) => round(value / rawDrain[i], 3)),
    },
  };
}

function fmt(value: number): string {
  return Math.round(value).toLocaleString("en-US");
}

if (import.meta.main) {
  const result = await backlog({
    jobs: Number(Deno.args[0] ?? 20_000),
    rounds: Number(Deno.args[1] ?? 2),
    window: 100,
    log: console.log,
  });
  console.log(JSON.stringify(result));
  Deno.exit(0);
}
