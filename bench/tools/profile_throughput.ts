/**
 * CPU profiles of the throughput scenario's workpull side: the controller process (this one)
 * and the worker processes, over `rounds` batches of `jobs` after a warm-up of 1,000,000 jobs
 * (`WARMUP_JOBS`: the JIT is still speeding workpull up before that). Deno only.
 *
 *   deno run -A bench/tools/profile_throughput.ts [jobs=100000] [rounds=3] [processes=1] [perProcess=4]
 *
 * Writes `.tmp/profiles/<stamp>/{controller,w0,...}.cpuprofile` and prints their summaries.
 *
 * @module
 */

import { mkdirSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { repoPath } from "../lib/runtime.ts";

const [jobs = 100_000, rounds = 3, processes = 1, perProcess = 4] = process.argv.slice(2).map(
  Number,
);
const dir = repoPath(".tmp", "profiles", new Date().toISOString().replace(/[:.]/g, "-"));
mkdirSync(dir, { recursive: true });
process.env.WORKPULL_BENCH_PROFILE = dir; // read by lib/setups.ts at import

const { warmUp, WorkpullSetup } = await import("../lib/setups.ts");
const { printTop, startProfiling, stopProfiling } = await import("../lib/profile.ts");

const setup = await WorkpullSetup.start({ processes, perProcess }, { window: 100 });
try {
  await warmUp([setup], jobs);
  await startProfiling();
  const started = performance.now();
  const rates = [];
  for (let i = 0; i < rounds; i++) rates.push(Math.round(await setup.run(jobs)));
  const elapsed = performance.now() - started;
  const paths = [await stopProfiling(dir, "controller")];
  for (const [i, worker] of setup.workers.entries()) {
    worker.command({ cmd: "profile", name: `w${i}` });
    paths.push((await worker.next((r) => r.ev === "profiled", "profile")).path as string);
  }
  console.log(`jobs/s per round: ${rates.join(", ")}; wall ${elapsed.toFixed(0)} ms`);
  for (const path of paths) printTop(path!, 10, 25);
} finally {
  await setup.close();
}
console.log(`profiles in ${join(dir)}`);
process.exit(0);
