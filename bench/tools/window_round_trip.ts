/**
 * How large a window has to be for a network's round trip. One worker endpoint whose handler keeps
 * the thread busy for `--spin-us` µs a job (a synchronous, CPU-bound handler) is connected to the
 * controller through a TCP proxy that holds every chunk `--delay` ms each way
 * (`lib/delay_proxy.ts`), once for each window of `--windows`.
 *
 * An endpoint holds at most `window` jobs and asks for more when half of them remain, so it runs
 * at most about `window` jobs a round trip, and it keeps busy when a window takes a round trip or
 * two to run. For each window the tool prints the rate (the median of the rounds, each timed from
 * the first submission to the last confirmation) against the handler's own limit, how many round
 * trips a window of jobs takes to run, and, timed inside the worker process with the runtime's
 * WebSocket (`lib/round_trip_probe.ts`), the round trip from a top-up request to the next jobs
 * frame (p50) and the jobs a jobs frame carried. `--client=ws` connects the worker with npm `ws`
 * instead, which turns Nagle's algorithm off (Deno's own client leaves it on).
 *
 *   deno run -A bench/tools/window_round_trip.ts [--delay=10] [--spin-us=100]
 *     [--windows=50,100,200,400,800] [--jobs=10000] [--rounds=3] [--client=runtime|ws]
 *
 * The runtime is this process's, for the server and the worker process alike.
 *
 * @module
 */

import process from "node:process";
import { BufferedProducer, WorkPullingController } from "../../mod.ts";
import { commandLine, numberArg, wholeNumber } from "../lib/cli.ts";
import { delayProxy } from "../lib/delay_proxy.ts";
import type { Report } from "../lib/proc.ts";
import { runtimeVersion, until } from "../lib/runtime.ts";
import { serveWorkpull, workerToken } from "../lib/servers.ts";
import { spawnWorker, submitStreaming } from "../lib/setups.ts";
import { median } from "../lib/stats.ts";

const { values } = commandLine({
  usage:
    "deno run -A bench/tools/window_round_trip.ts [--delay=10] [--spin-us=100] [--windows=50,100,200,400,800] [--jobs=10000] [--rounds=3] [--client=runtime|ws]",
  summary:
    "One worker endpoint with a CPU-bound handler behind a delaying proxy: jobs/s for each window.",
  flags: {
    delay: { kind: "value", value: "ms", help: "delay added each way, ms (default 10)" },
    "spin-us": { kind: "value", value: "µs", help: "the handler's busy time a job (default 100)" },
    windows: { kind: "value", value: "a,b", help: "windows to try (default 50,100,200,400,800)" },
    jobs: { kind: "value", value: "N", help: "jobs a round (default 10000)" },
    rounds: { kind: "value", value: "N", help: "measured rounds a window (default 3)" },
    client: {
      kind: "value",
      value: "runtime|ws",
      help: "the worker's WebSocket: the runtime's (default) or npm ws's",
    },
  },
});
const delay = numberArg("--delay", values.delay, 10, 0);
const spinUs = numberArg("--spin-us", values["spin-us"], 100);
const jobs = numberArg("--jobs", values.jobs, 10_000);
const rounds = numberArg("--rounds", values.rounds, 3);
const windows = String(values.windows ?? "50,100,200,400,800").split(",").map((text) => {
  try {
    return wholeNumber("a window", text, 0, 1);
  } catch (error) {
    console.error(`error: ${(error as Error).message}`);
    process.exit(2);
  }
});

const client = values.client === "ws" ? "ws" : "runtime";
if (values.client !== undefined && values.client !== client) {
  console.error(`error: --client must be runtime or ws, got "${values.client}"`);
  process.exit(2);
}
const spinMs = spinUs / 1000;
const roundTrip = 2 * delay;
const handlerLimit = 1000 / spinMs;

process.env.WORKPULL_BENCH_ROUND_TRIPS = "1"; // the worker process inherits it

const producer = new BufferedProducer<Record<string, unknown>>();
const controller = new WorkPullingController({ name: "bench", producer });
await controller.start();
const server = await serveWorkpull(controller, producer);
const proxy = await delayProxy(server.port, delay);
const url = new URL(server.workersUrl.href);
url.port = String(proxy.port);

/** Run `count` jobs; jobs/s from the first submission to the last confirmation. */
async function run(count: number): Promise<number> {
  const target = controller.stats().totals.confirmed + count;
  const started = performance.now();
  await Promise.all([
    submitStreaming(producer, count),
    until(() => controller.stats().totals.confirmed >= target, `${count} confirmations`, 600_000),
  ]);
  return count / ((performance.now() - started) / 1000);
}

console.log(
  `${runtimeVersion()}, worker on ${client === "ws" ? "npm ws" : "the runtime's WebSocket"}: ` +
    `round trip ${roundTrip} ms through the proxy, handler ${spinUs} µs a job (at most ${
      Math.round(handlerLimit).toLocaleString("en-US")
    } jobs/s), ${jobs.toLocaleString("en-US")} jobs a round`,
);
try {
  for (const window of windows) {
    const name = `w${window}`;
    const worker = await spawnWorker(`worker ${name}`, {
      mode: "workpull",
      url: url.href,
      token: await workerToken(name),
      name,
      concurrency: 1,
      window,
      handler: "spin",
      delayMs: spinMs,
      client,
    });
    try {
      await run(Math.ceil(jobs / 4)); // warm-up
      const probed = () => {
        const report = worker.next((r: Report) => r.ev === "round-trips", "round trips", 10_000);
        worker.command({ cmd: "round-trips" });
        return report;
      };
      await probed(); // drop the warm-up's samples
      const rates: number[] = [];
      for (let i = 0; i < rounds; i++) rates.push(await run(jobs));
      const rate = median(rates);
      const probe = await probed();
      const jobsFrames = probe.jobsFrames as number;
      const timed = jobsFrames === 0
        ? "not timed (npm ws)"
        : `round trip p50 ${median(probe.rtt as number[]).toFixed(1)} ms, ${
          (rounds * jobs / jobsFrames).toFixed(1)
        } jobs a frame`;
      const windowRuns = roundTrip === 0
        ? ""
        : `; a window runs in ${(window * spinMs / roundTrip).toFixed(2)} round trips`;
      console.log(
        `  window ${String(window).padStart(5)}: ${
          Math.round(rate).toLocaleString("en-US").padStart(7)
        } jobs/s, ${
          Math.round(100 * rate / handlerLimit)
        } % of the handler's limit${windowRuns}; ${timed}; rounds ${
          rates.map((r) => Math.round(r).toLocaleString("en-US")).join(", ")
        }`,
      );
    } finally {
      await worker.kill();
    }
  }
} finally {
  await proxy.close();
  await server.close();
  await controller.close();
}
