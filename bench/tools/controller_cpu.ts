/**
 * The controller's CPU cost per job, without sockets and without real workers: a
 * `BufferedProducer` (given the jobs as the throughput benchmark gives them: `submitMany`, 1,000 a
 * call, 4 calls waiting at a time; `--at-once`: every call of the round at once; `--each`: one
 * `submit()` a job), a `WorkPullingController` and 4 scripted workers that speak raw frames
 * (register, request with window 100, top-up at half the window, as `WorkerEndpoint` does) and
 * spend almost nothing per job (they count the jobs of each jobs frame in its text).
 * What it measures is what the controller process spends per job in the network benchmark,
 * minus the socket work: the number to drive down when the controller is the bottleneck.
 * Beside the CPU time it prints the bytes allocated per job (V8's `total_allocated_bytes`, where
 * the runtime has it): what the young-generation collector has to sweep.
 *
 * `--allocations` (Deno) also samples every allocation of the measured rounds and prints the bytes
 * per job each function allocated (V8's sampling heap profiler; a function V8 inlined is charged
 * to its caller): where the bytes per job come from.
 *
 * `--outcomes` measures the job-queue mode instead: the controller with a `MemoryWorkQueue` and
 * `outcomes` on, workers announcing feature `outcomes` (their jobs frames carry try numbers and
 * every confirmation goes through the durable lane with its outcome).
 *
 * `--job-queue` measures a job queue: a `JobQueue` on a `MemoryJobStore` (jobs added with
 * `addMany`, 1,000 a call, 4 calls waiting at a time, then taken from its backlog), its controller
 * and the same workers with feature `outcomes`: what a job costs with retries, results and states.
 *
 *   deno run -A bench/tools/controller_cpu.ts [jobs=300000] [rounds=5] [--profile] [--allocations]
 *     [--outcomes] [--job-queue] [--each] [--at-once]
 *
 * @module
 */

import { mkdirSync } from "node:fs";
import process from "node:process";
import v8 from "node:v8";
import {
  BufferedProducer,
  JobQueue,
  MemoryJobStore,
  MemoryWorkQueue,
  WorkPullingController,
} from "../../mod.ts";
import {
  printAllocationsPerJob,
  printTop,
  startAllocationSampling,
  startProfiling,
  stopProfiling,
} from "../lib/profile.ts";
import { median } from "../lib/stats.ts";
import { commandLine, numberArg } from "../lib/cli.ts";
import { repoPath } from "../lib/runtime.ts";
import { attachScriptedWorkers } from "../lib/scripted_workers.ts";
import { addStreaming, SUBMIT_BATCH, SUBMIT_IN_FLIGHT, submitStreaming } from "../lib/setups.ts";

const { values, positionals } = commandLine({
  usage:
    "deno run -A bench/tools/controller_cpu.ts [jobs] [rounds] [--profile] [--allocations] [--outcomes] [--job-queue] [--each] [--at-once]",
  summary: "The controller's CPU time per job without sockets (4 scripted workers, window 100).",
  positionals: [
    { name: "jobs", help: "jobs per round (default 300000)" },
    { name: "rounds", help: "measured rounds (default 5)" },
  ],
  flags: {
    profile: { kind: "switch", help: "record a CPU profile into .tmp/profiles and summarize it" },
    allocations: {
      kind: "switch",
      help: "Deno: sample every allocation and print the bytes per job of each function",
    },
    outcomes: {
      kind: "switch",
      help: "job-queue mode: a MemoryWorkQueue, outcomes on, workers with feature outcomes",
    },
    "job-queue": {
      kind: "switch",
      help: "a JobQueue on a MemoryJobStore: jobs added with addMany, taken from its backlog",
    },
    each: { kind: "switch", help: "submit every job with its own submit() (default: submitMany)" },
    "at-once": {
      kind: "switch",
      help: "submitMany every batch of the round at once (default: 4 batches waiting at a time)",
    },
  },
});
const jobs = numberArg("jobs", positionals[0], 300_000);
const rounds = numberArg("rounds", positionals[1], 5);
const jobQueue = values["job-queue"] === true;
const outcomes = values.outcomes === true || jobQueue;
const each = values.each === true;
const atOnce = values["at-once"] === true;
const WINDOW = 100;

const producer = new BufferedProducer<{ n: number }>();
const queue = jobQueue ? new JobQueue({ name: "bench", store: new MemoryJobStore() }) : undefined;
const controller = queue?.controller ?? new WorkPullingController({
  name: "bench",
  producer,
  ...(outcomes ? { queue: new MemoryWorkQueue(), outcomes: true } : {}),
});
await (queue ?? controller).start();
const workers = attachScriptedWorkers(controller, { window: WINDOW, outcomes });

/** Bytes allocated on the JavaScript heap so far (V8 only: Bun's figure is not a running total). */
function allocatedBytes(): number | undefined {
  if ("Bun" in globalThis) return undefined;
  const stats = v8.getHeapStatistics() as { total_allocated_bytes?: number };
  return stats.total_allocated_bytes;
}

/**
 * CPU time (user + system) of this process for `count` jobs, ms (robust to other load), and the
 * bytes allocated meanwhile.
 */
async function batch(count: number): Promise<{ ms: number; bytes: number | undefined }> {
  const finished = workers.confirmedAll(workers.confirmed + count);
  const allocated = allocatedBytes();
  const start = process.cpuUsage();
  if (queue) {
    const inFlight = atOnce ? Math.ceil(count / SUBMIT_BATCH) : SUBMIT_IN_FLIGHT;
    addStreaming(queue, count, inFlight).catch((error) => console.error(error));
  } else if (each) {
    for (let n = 0; n < count; n++) producer.submit({ n }).catch(() => {});
  } else {
    // At once: one call waiting per batch, so every call is made before any receipt comes.
    const inFlight = atOnce ? Math.ceil(count / SUBMIT_BATCH) : SUBMIT_IN_FLIGHT;
    submitStreaming(producer, count, inFlight).catch(() => {});
  }
  await finished;
  await new Promise((resolve) => setTimeout(resolve, 0));
  const used = process.cpuUsage(start);
  const after = allocatedBytes();
  const bytes = allocated === undefined || after === undefined ? undefined : after - allocated;
  return { ms: (used.user + used.system) / 1000, bytes };
}

await batch(jobs / 2);
const profile = values.profile === true;
if (profile) await startProfiling();
const sampling = values.allocations === true && !profile && await startAllocationSampling();
const times: number[] = [];
const bytes: number[] = [];
for (let i = 0; i < rounds; i++) {
  const round = await batch(jobs);
  times.push(round.ms);
  if (round.bytes !== undefined) bytes.push(round.bytes / jobs);
}
console.log(
  `${jobQueue ? "job queue" : `controller + producer${outcomes ? " (outcomes)" : ""}`}${
    jobQueue
      ? atOnce ? ", addMany at once" : ", addMany streamed"
      : each
      ? ", submit() each"
      : atOnce
      ? ", submitMany at once"
      : ", submitMany streamed"
  }, CPU time: ${median(times.map((ms) => ms * 1000 / jobs)).toFixed(2)} µs/job ` +
    `(rounds: ${times.map((ms) => (ms * 1000 / jobs).toFixed(2)).join(", ")})` +
    (bytes.length ? `; allocated: ${Math.round(median(bytes))} bytes/job` : ""),
);
if (sampling) await printAllocationsPerJob(jobs * rounds);
if (profile) {
  const dir = repoPath(".tmp", "profiles");
  mkdirSync(dir, { recursive: true });
  printTop((await stopProfiling(dir, "controller_cpu"))!, 0, 40);
}
await (queue ?? controller).close();
process.exit(0);
