/**
 * Durable throughput on a Deno KV file, measured in one run against the raw KV ceilings:
 *
 * - **raw, 1 job per commit**: the adapter's writes for one job (store, accept, confirm: three
 *   atomic commits, each checking the epoch and meta keys and rewriting meta), one at a time;
 * - **raw, 100 jobs per commit**: the same writes with 100 jobs in each of the three commits;
 * - **end to end**: `BufferedProducer` → `WorkPullingController` → `DenoKvWorkQueue` → four
 *   in-process workers (window 100, no-op handler), with `maxBatch` 1, 100 and 1000.
 *
 * Each measurement uses a fresh KV file in a temporary directory; the median of the rounds is
 * reported. Runs on Deno (`Deno.openKv`) and Bun (npm `@deno/kv`):
 *
 *   deno run -A --unstable-kv bench/durable_throughput.ts [rounds=3]
 *   bun bench/durable_throughput.ts [rounds=3]
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import {
  BufferedProducer,
  connectInProcess,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { DenoKvWorkQueue } from "../deno_kv.ts";
import { rawKvWrites } from "./lib/raw_kv.ts";
import { kvClient, openKv } from "../tests/fixtures/open_kv.ts";

const rounds = Number(process.argv[2] ?? 3);

/** Run `body` on a fresh KV file; returns jobs/s. */
async function onFreshKv(jobs: number, body: (kv: Deno.Kv) => Promise<void>): Promise<number> {
  const dir = mkdtempSync(join(tmpdir(), "workpull-bench-"));
  const kv = await openKv(join(dir, "q.kv"));
  try {
    const start = performance.now();
    await body(kv);
    return jobs / (performance.now() - start) * 1000;
  } finally {
    kv.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/** The adapter's three commits, `perCommit` jobs in each (`lib/raw_kv.ts`). */
function raw(jobs: number, perCommit: number): Promise<number> {
  return onFreshKv(jobs, (kv) => rawKvWrites(kv, jobs, perCommit));
}

/** Producer → controller → KV queue → 4 in-process workers. */
function endToEnd(jobs: number, maxBatch: number): Promise<number> {
  return onFreshKv(jobs, async (kv) => {
    const producer = new BufferedProducer<{ n: number }>({ maxBatch });
    const controller = new WorkPullingController({
      name: "bench",
      producer,
      queue: new DenoKvWorkQueue(kv),
      maxBatch,
    });
    await controller.start();
    let done = 0;
    const finished = Promise.withResolvers<void>();
    const workers = Array.from({ length: 4 }, (_, i) => {
      const worker = new WorkerEndpoint<{ n: number }>({
        producer: "bench",
        name: `w${i}`,
        window: 100,
        handler: () => {
          if (++done === jobs) finished.resolve();
        },
      });
      connectInProcess(controller, worker);
      return worker;
    });
    for (let n = 0; n < jobs; n++) producer.submit({ n });
    await finished.promise;
    await Promise.all(workers.map((worker) => worker.close()));
    await controller.close();
  });
}

const median = (values: number[]) => values.toSorted((a, b) => a - b)[values.length >> 1];

const scenarios: [string, () => Promise<number>][] = [
  ["raw KV, 1 job per commit (3 commits/job)", () => raw(2_000, 1)],
  ["raw KV, 100 jobs per commit", () => raw(50_000, 100)],
  ["end to end, maxBatch 1", () => endToEnd(3_000, 1)],
  ["end to end, maxBatch 100", () => endToEnd(50_000, 100)],
  ["end to end, maxBatch 1000", () => endToEnd(50_000, 1000)],
];

const runtime = kvClient === "deno" ? `Deno ${Deno.version.deno}` : `Bun ${process.versions.bun}`;
console.log(`durable throughput on a KV file, ${runtime}, median of ${rounds} rounds\n`);
const report: Record<string, number> = {};
for (const [name, run] of scenarios) {
  const samples: number[] = [];
  for (let round = 0; round < rounds; round++) samples.push(await run());
  report[name] = Math.round(median(samples));
  console.log(
    `${name.padEnd(44)} ${String(report[name]).padStart(7)} jobs/s   ` +
      `(${samples.map((s) => Math.round(s)).join(", ")})`,
  );
}
console.log(`\n${JSON.stringify({ runtime, rounds, jobsPerSecond: report })}`);
process.exit(0);
