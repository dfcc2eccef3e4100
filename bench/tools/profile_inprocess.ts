/**
 * CPU profile of the core alone: producer, controller and 4 in-process worker endpoints on one
 * thread (no network), no-op handler, window 100. Useful to see the per-job cost of the core
 * without socket noise.
 *
 *   deno run -A bench/tools/profile_inprocess.ts [jobs=300000] [rounds=3]
 *
 * @module
 */

import { mkdirSync } from "node:fs";
import process from "node:process";
import {
  BufferedProducer,
  connectInProcess,
  WorkerEndpoint,
  WorkPullingController,
} from "../../mod.ts";
import { printTop, startProfiling, stopProfiling } from "../lib/profile.ts";
import { repoPath } from "../lib/runtime.ts";
import { commandLine, numberArg } from "../lib/cli.ts";

const { values, positionals } = commandLine({
  usage: "deno run -A bench/tools/profile_inprocess.ts [jobs] [rounds] [--profile]",
  summary:
    "Producer, controller and 4 in-process worker endpoints on one thread: jobs/s and µs/job.",
  positionals: [
    { name: "jobs", help: "jobs per round (default 300000)" },
    { name: "rounds", help: "measured rounds (default 3)" },
  ],
  flags: {
    profile: { kind: "switch", help: "record a CPU profile into .tmp/profiles and summarize it" },
  },
});
const jobs = numberArg("jobs", positionals[0], 300_000);
const rounds = numberArg("rounds", positionals[1], 3);
const producer = new BufferedProducer<{ n: number }>();
const controller = new WorkPullingController({ name: "bench", producer });
await controller.start();
let done = 0;
let target = 0;
let finish: () => void = () => {};
for (let i = 0; i < 4; i++) {
  connectInProcess(
    controller,
    new WorkerEndpoint<{ n: number }>({
      producer: "bench",
      name: `w${i}`,
      window: 100,
      handler: () => {
        if (++done === target) finish();
      },
    }),
  );
}
async function batch(count: number): Promise<number> {
  target = done + count;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const start = performance.now();
  for (let n = 0; n < count; n++) producer.submit({ n });
  await finished;
  return performance.now() - start;
}
await batch(jobs / 2);
const profile = values.profile === true;
if (profile) await startProfiling();
const times = [];
for (let i = 0; i < rounds; i++) times.push(await batch(jobs));
console.log(
  `jobs/s: ${times.map((ms) => Math.round(jobs / ms * 1000)).join(", ")} (${
    (times.reduce((a, b) => a + b) / rounds / jobs * 1000).toFixed(2)
  } µs/job)`,
);
if (profile) {
  const dir = repoPath(".tmp", "profiles");
  mkdirSync(dir, { recursive: true });
  printTop((await stopProfiling(dir, "inprocess"))!, 0, 40);
}
await controller.close();
process.exit(0);
