/**
 * The worker processes' garbage collections in the throughput scenario's setup (Deno): a
 * controller here, `processes` worker processes × `perProcess` endpoints (window 100, no-op
 * handler) run with V8's `--trace-gc`, a warm-up and then `rounds` batches of `jobs`. For the
 * measured batches it prints, per million jobs, the young collections (how many, their pauses in
 * all, the mean and the longest) and the full ones, and the heap each young collection left (the
 * smallest and the largest): a heap that climbs from one young collection to the next keeps dead
 * objects alive through them (see `bench/README.md`, "The worker's buffer: dead jobs kept alive").
 *
 *   deno run -A bench/tools/worker_gc.ts [jobs=200000] [rounds=5] [processes=1] [perProcess=4]
 *
 * @module
 */

import process from "node:process";
import { commandLine, numberArg } from "../lib/cli.ts";
import { median } from "../lib/stats.ts";

const { positionals } = commandLine({
  usage: "deno run -A bench/tools/worker_gc.ts [jobs] [rounds] [processes] [perProcess]",
  summary: "The worker processes' garbage collections at full speed (Deno, --trace-gc).",
  positionals: [
    { name: "jobs", help: "jobs per round (default 200000)" },
    { name: "rounds", help: "measured rounds (default 5)" },
    { name: "processes", help: "worker processes (default 1)" },
    { name: "perProcess", help: "endpoints per worker process (default 4)" },
  ],
  flags: {},
});
if (!("Deno" in globalThis)) {
  console.error("worker_gc.ts runs on Deno (it reads V8's --trace-gc of Deno worker processes)");
  process.exit(2);
}
const jobs = numberArg("jobs", positionals[0], 200_000);
const rounds = numberArg("rounds", positionals[1], 5);
const topology = {
  processes: numberArg("processes", positionals[2], 1),
  perProcess: numberArg("perProcess", positionals[3], 4),
};

// The worker processes inherit the environment: V8 prints each collection on their stdout, which
// the benchmark's line reader skips (it reads JSON lines only) and this tool reads.
process.env.DENO_V8_FLAGS = "--trace-gc";
const { WorkpullSetup } = await import("../lib/setups.ts");

interface Collection {
  readonly young: boolean;
  readonly pauseMs: number;
  readonly heapAfterMb: number;
}
/** A `--trace-gc` line: `… Scavenge 40.7 (58.3) -> 9.2 (58.3) MB, …, 0.79 / 0.00 ms`. */
const LINE =
  /: (Scavenge|Minor Mark-Sweep|(?:Incremental )?Mark-Compact|Mark-Sweep)[^>]*-> ([\d.]+) \([\d.]+\) MB,.*?([\d.]+) \/ [\d.]+ ms/;

const setup = await WorkpullSetup.start(topology, { window: 100 });
let collections: Collection[] = [];
for (const worker of setup.workers) {
  let pending = "";
  worker.process.stdout?.on("data", (chunk: string) => {
    pending += chunk;
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines) {
      const match = LINE.exec(line);
      if (!match) continue;
      collections.push({
        young: match[1] === "Scavenge" || match[1] === "Minor Mark-Sweep",
        heapAfterMb: Number(match[2]),
        pauseMs: Number(match[3]),
      });
    }
  });
}
try {
  await setup.run(jobs / 2);
  await new Promise((resolve) => setTimeout(resolve, 200)); // the warm-up's lines, then forget them
  collections = [];
  const rates: number[] = [];
  for (let i = 0; i < rounds; i++) rates.push(Math.round(await setup.run(jobs)));
  await new Promise((resolve) => setTimeout(resolve, 200));
  const perMillion = 1_000_000 / (jobs * rounds);
  const young = collections.filter((c) => c.young);
  const full = collections.filter((c) => !c.young);
  const total = (list: Collection[]) => list.reduce((sum, c) => sum + c.pauseMs, 0);
  const heaps = young.map((c) => c.heapAfterMb);
  console.log(
    `workpull ${topology.processes}×${topology.perProcess} on ${Deno.version.deno}, window 100, ` +
      `${rounds} rounds of ${jobs.toLocaleString("en-US")} jobs: ${
        rates.map((rate) => rate.toLocaleString("en-US")).join(", ")
      } jobs/s (median ${Math.round(median(rates)).toLocaleString("en-US")})`,
  );
  console.log(
    `worker processes, per million jobs: ${(young.length * perMillion).toFixed(0)} young ` +
      `collections, ${(total(young) * perMillion).toFixed(0)} ms in all (mean ${
        young.length ? (total(young) / young.length).toFixed(2) : "-"
      } ms, longest ${Math.max(0, ...young.map((c) => c.pauseMs)).toFixed(2)} ms); ${
        (full.length * perMillion).toFixed(1)
      } full collections, ${(total(full) * perMillion).toFixed(0)} ms in all`,
  );
  if (heaps.length) {
    console.log(
      `heap after a young collection: ${Math.min(...heaps).toFixed(1)}–${
        Math.max(...heaps).toFixed(1)
      } MB`,
    );
  }
} finally {
  await setup.close();
}
process.exit(0);
