/**
 * One instance process of the remote-KV scenario (`remote_kv.ts`): a `JobQueue` whose store
 * reaches the scenario's KV file through a {@linkcode RemoteKv}, the file behind the round trips
 * of a hosted Deno KV (0 ms for the local baseline, else the scenario's commit and read
 * latencies), with in-process worker endpoints attached on `go`. Configured by
 * `WORKPULL_BENCH_INSTANCE` (JSON, {@linkcode RemoteInstanceConfig}); commands arrive on stdin as
 * JSON lines, reports leave on stdout as JSON lines, times in `now()` (wall-clock ms, comparable
 * across processes on one machine).
 *
 * The store is made in one place, {@linkcode openStore}, because the store API is being changed:
 * today the shared configurations use `DenoKvClusterStore` and the single-instance baseline
 * `DenoKvJobStore`; the unified store will take `DenoKvJobStore(kv, { prefix, instance })` there.
 *
 * Commands and reports:
 * - (on start) `ready` once the queue has started (its load and, shared, its registration);
 * - `go`: the wrapper's counters are zeroed and the endpoints attach; `done` reports (completions
 *   so far and the time of the latest) follow at most every 20 ms;
 * - `stats`: `stats` with the wrapper's counters since `go` (or the last `reset`);
 * - `reset`: the counters are zeroed (`reset`);
 * - `detach`: the endpoints close and the queue starts again (same id) with none (`detached`),
 *   so that this instance takes no more jobs (see the command's comment);
 * - `probe` (`count`, `spacing` ms): one job at a time is added, `spacing` ms after the last add
 *   resolved, each reported as `enqueued` with the time of the `add` call; every instance
 *   reports `start` (id, time, instance) when a probe job's handler starts, then `probed`.
 *
 * @module
 */

import process from "node:process";
import { connectInProcess, JobQueue, type JobStore, WorkerEndpoint } from "../../mod.ts";
import { DenoKvClusterStore, DenoKvJobStore } from "../../deno_kv.ts";
import { RemoteKv } from "../../testing.ts";
import { now, sleep } from "../lib/runtime.ts";
import { onCommand } from "../lib/commands.ts";

/** The configuration of an instance. */
export interface RemoteInstanceConfig {
  readonly kvPath: string;
  /** `shared`: one of several instances of a flow; `single`: the flow's only process. */
  readonly store: "shared" | "single";
  /** This instance's id ("i0".."i3"). */
  readonly id: string;
  readonly commitLatency: number;
  readonly readLatency: number;
  readonly workers: number;
  readonly window: number;
}

/** The key prefix of the flow (the parent fills the backlog under it). */
export const PREFIX = ["bench"] as const;
/** The backlog bound of every store in the scenario. */
export const MAX_BACKLOG = 1_000_000;

/**
 * The store of one instance: the only place that knows which store class serves which
 * configuration (the parent's fill uses it too).
 */
export function openStore(
  kv: RemoteKv,
  config: Pick<RemoteInstanceConfig, "store" | "id">,
): JobStore {
  const prefix = [...PREFIX];
  return config.store === "single"
    ? new DenoKvJobStore(kv, { prefix, maxBacklog: MAX_BACKLOG })
    : new DenoKvClusterStore(kv, { prefix, maxBacklog: MAX_BACKLOG, instance: { id: config.id } });
}

if (import.meta.main) await main();

async function main(): Promise<void> {
  const config: RemoteInstanceConfig = JSON.parse(process.env.WORKPULL_BENCH_INSTANCE ?? "{}");
  const report = (message: Record<string, unknown>) =>
    process.stdout.write(`${JSON.stringify(message)}\n`);

  const local = await Deno.openKv(config.kvPath);
  const kv = new RemoteKv(local, {
    commitLatency: config.commitLatency,
    readLatency: config.readLatency,
  });
  let queue = new JobQueue({ name: "bench", store: openStore(kv, config) });
  await queue.start();

  let done = 0;
  let last = 0;
  let reported = 0;
  setInterval(() => {
    if (reported === done) return;
    reported = done;
    report({ ev: "done", count: done, last });
  }, 20);

  const endpoints: WorkerEndpoint[] = [];
  const attach = () => {
    for (let i = 0; i < config.workers; i++) {
      const endpoint = new WorkerEndpoint({
        producer: "bench",
        name: `${config.id}-w${i + 1}`,
        window: config.window,
        handler: ({ messageId }) => {
          if (messageId.startsWith("probe-")) {
            report({ ev: "start", id: messageId, at: now(), instance: config.id });
          }
          done += 1;
          last = now();
        },
      });
      endpoints.push(endpoint);
      connectInProcess(queue.controller, endpoint);
    }
  };

  const probe = async (count: number, spacing: number) => {
    for (let i = 0; i < count; i++) {
      const at = now();
      await queue.add({ probe: i }, { messageId: `probe-${i}` });
      report({ ev: "enqueued", id: `probe-${i}`, at });
      await sleep(spacing);
    }
    report({ ev: "probed", count });
  };

  onCommand(async (command) => {
    switch (command.cmd) {
      case "go":
        kv.reset();
        attach();
        break;
      case "reset":
        kv.reset();
        report({ ev: "reset" });
        break;
      case "stats":
        report({
          ev: "stats",
          done,
          commits: kv.commits,
          reads: kv.reads,
          mutations: kv.mutations,
          checks: kv.checks,
        });
        break;
      case "detach":
        // Closing the endpoints is not enough: the controller's grant from before stays open,
        // and the store would claim (and hold, with no worker to run it) the next job added
        // here. A queue that never had a worker asks for nothing.
        await Promise.all(endpoints.splice(0).map((endpoint) => endpoint.close()));
        await queue.close();
        queue = new JobQueue({ name: "bench", store: openStore(kv, config) });
        await queue.start();
        report({ ev: "detached" });
        break;
      case "probe":
        await probe(command.count as number, command.spacing as number);
        break;
    }
  });
  process.stdin.on("end", () => process.exit(0));
  process.on("SIGTERM", () => process.exit(0));

  report({ ev: "ready", at: now() });
}
