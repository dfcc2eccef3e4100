/**
 * One instance of the cluster scenario's shared flow: a `JobQueue` on a `DenoKvClusterStore`
 * over the scenario's KV file, with in-process worker endpoints attached on the `go` command.
 * Configured by `WORKPULL_BENCH_INSTANCE` (JSON, {@linkcode InstanceConfig}); commands arrive on
 * stdin as JSON lines, reports leave on stdout as JSON lines, times in `now()` (comparable
 * across processes on one machine).
 *
 * Reports: `ready`; `claimed` (how many jobs it holds, after each claim); `done` (completions
 * so far and the time of the latest, at most every 20 ms and when asked); `start` (each handler
 * start, in `watch` mode); `takeover` (it took another instance over).
 *
 * @module
 */

import process from "node:process";
import { connectInProcess, JobQueue, WorkerEndpoint } from "../../mod.ts";
import { type ClusterKvLike, DenoKvClusterStore } from "../../deno_kv.ts";
import { now } from "../lib/runtime.ts";
import { onCommand } from "../lib/commands.ts";

/** The configuration of an instance. */
export interface InstanceConfig {
  readonly kvPath: string;
  readonly workers: number;
  readonly window: number;
  /** What a handler does: return at once, never return, or take this many ms. */
  readonly handler: "noop" | "stuck" | number;
  /** Report every handler start. */
  readonly watch: boolean;
  readonly leaseTtl: number;
  readonly renewInterval: number;
}

const config: InstanceConfig = JSON.parse(process.env.WORKPULL_BENCH_INSTANCE ?? "{}");
const report = (message: Record<string, unknown>) =>
  process.stdout.write(`${JSON.stringify(message)}\n`);

const kv = await Deno.openKv(config.kvPath);
const store = new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
  prefix: ["bench"],
  maxBacklog: 100_000_000,
  retention: 600_000,
  instance: { leaseTtl: config.leaseTtl, renewInterval: config.renewInterval },
});
const take = store.take.bind(store);
let claimed = 0;
store.take = async (max) => {
  const jobs = await take(max);
  claimed += jobs.length;
  if (jobs.length > 0) report({ ev: "claimed", count: claimed, at: now() });
  return jobs;
};
const takeNow = store.takeNow.bind(store);
store.takeNow = (max) => {
  const jobs = takeNow(max); // claimed ahead, handed out at once
  claimed += jobs?.length ?? 0;
  if (jobs && jobs.length > 0) report({ ev: "claimed", count: claimed, at: now() });
  return jobs;
};
store.addEventListener("takeover", ({ takeover }) => {
  report({ ev: "takeover", jobs: takeover.jobs, at: now() });
});
const queue = new JobQueue({ name: "bench", store });
await queue.start();

let done = 0;
let last = 0;
let reported = 0;
const flush = () => {
  if (reported === done) return;
  reported = done;
  report({ ev: "done", count: done, last });
};
setInterval(flush, 20);

function attach(): void {
  for (let i = 0; i < config.workers; i++) {
    connectInProcess(
      queue.controller,
      new WorkerEndpoint({
        producer: "bench",
        name: `w${i + 1}`,
        window: config.window,
        handler: async ({ messageId }) => {
          if (config.watch) report({ ev: "start", id: messageId, at: now() });
          if (config.handler === "stuck") await new Promise(() => {});
          if (typeof config.handler === "number") {
            await new Promise((resolve) => setTimeout(resolve, config.handler as number));
          }
          done += 1;
          last = now();
        },
      }),
    );
  }
}

onCommand((command) => {
  if (command.cmd === "go") attach();
});
process.stdin.on("end", () => process.exit(0));
process.on("SIGTERM", () => process.exit(0));

report({ ev: "ready", at: now() });
