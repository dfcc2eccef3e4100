/**
 * Scenario 2, the peer: the same number of no-op jobs through BullMQ 5 with a local Redis.
 * The script starts Debian's `redis-server` itself (127.0.0.1, a free port, no persistence, a
 * temporary directory) and stops it by PID; it needs `redis-server` and `node` on the PATH and
 * is skipped with a message otherwise. Each round runs a BullMQ worker process (concurrency 1
 * or 50) and a producer process (`addBulk` in chunks of 1000), both on Node; jobs/s is measured
 * from the producer's first add to the worker's last completion. Concurrency 1 and 50
 * alternate; the best median is the peer's figure.
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { createServer } from "node:net";
import process from "node:process";
import { type Child, spawnChild, withTimeout } from "../lib/proc.ts";
import { repoPath, sleep } from "../lib/runtime.ts";
import { median, round } from "../lib/stats.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";

/** The scenario's result. */
export type PeerResult =
  | { readonly skipped: string }
  | {
    readonly redis: string;
    readonly bullmq: string;
    readonly node: string;
    readonly jobs: number;
    readonly rounds: number;
    readonly byConcurrency: Record<string, { samples: number[]; median: number }>;
    readonly best: { readonly concurrency: number; readonly jobsPerSecond: number };
  };

function which(command: string): string | undefined {
  try {
    return execFileSync("which", [command], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** A free TCP port on 127.0.0.1 (bound and released; Redis binds it right after). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.on("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
}

/** Start redis-server on a free port; resolves when it accepts commands. */
async function startRedis(binary: string, dir: string): Promise<{ child: Child; port: number }> {
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawnChild("redis-server", binary, [
      "--port",
      String(port),
      "--bind",
      "127.0.0.1",
      "--save",
      "",
      "--appendonly",
      "no",
      "--dir",
      dir,
      "--daemonize",
      "no",
      "--logfile",
      "",
    ]);
    let ready = false;
    child.process.stdout?.on("data", (chunk: string) => {
      if (String(chunk).includes("Ready to accept connections")) ready = true;
    });
    const deadline = Date.now() + 10_000;
    while (!ready && child.running && Date.now() < deadline) await sleep(20);
    if (ready) return { child, port };
    await child.kill();
  }
  throw new Error("redis-server did not start");
}

/** One round: jobs/s from the first add to the last completion. */
async function bullmqRound(
  node: string,
  port: number,
  queue: string,
  jobs: number,
  concurrency: number,
): Promise<number> {
  const script = repoPath("bench/scenarios/bullmq_peer.mjs");
  const cwd = repoPath();
  const worker = spawnChild("bullmq worker", node, [
    script,
    "worker",
    String(port),
    queue,
    String(jobs),
    String(concurrency),
  ], { cwd });
  let producer: Child | undefined;
  try {
    await worker.next((r) => r.ev === "ready", "BullMQ worker ready", 30_000);
    const done = worker.next((r) => r.ev === "done", "BullMQ jobs done", 300_000);
    producer = spawnChild("bullmq producer", node, [
      script,
      "producer",
      String(port),
      queue,
      String(jobs),
    ], { cwd });
    const start = await producer.next((r) => r.ev === "start", "BullMQ producer start", 30_000);
    const end = await done;
    return jobs / (((end.t as number) - (start.t as number)) / 1000);
  } finally {
    await worker.kill();
    await producer?.kill();
  }
}

/** Run the scenario; skipped (with the reason) when Redis or Node is missing. */
export async function peer(options: {
  jobs: number;
  rounds: number;
  concurrencies: readonly number[];
  log: (line: string) => void;
}): Promise<PeerResult> {
  const redisBinary = which("redis-server");
  const node = which("node");
  if (!redisBinary || !node) {
    const missing = [!redisBinary && "redis-server", !node && "node"].filter(Boolean).join(" and ");
    return { skipped: `${missing} not found on the PATH` };
  }
  const dir = makeTempDir("redis");
  const { child: redis, port } = await startRedis(redisBinary, dir);
  try {
    const samples: Record<number, number[]> = {};
    for (const c of options.concurrencies) samples[c] = [];
    await bullmqRound(node, port, "warmup", Math.min(5000, options.jobs), 50);
    for (let i = 0; i < options.rounds; i++) {
      const order = i % 2 === 0 ? options.concurrencies : options.concurrencies.toReversed();
      for (const c of order) {
        samples[c].push(await bullmqRound(node, port, `bench-${i}-${c}`, options.jobs, c));
      }
      options.log(
        `  round ${i + 1}/${options.rounds}: ${
          options.concurrencies.map((c) =>
            `concurrency ${c}: ${Math.round(samples[c].at(-1)!).toLocaleString("en-US")} jobs/s`
          ).join(", ")
        }`,
      );
    }
    const byConcurrency = Object.fromEntries(
      options.concurrencies.map((c) => [
        String(c),
        { samples: samples[c].map((v) => round(v)), median: round(median(samples[c])) },
      ]),
    );
    const best = options.concurrencies
      .map((c) => ({ concurrency: c, jobsPerSecond: round(median(samples[c])) }))
      .sort((a, b) => b.jobsPerSecond - a.jobsPerSecond)[0];
    const bullmqVersion = JSON.parse(
      (await import("node:fs")).readFileSync(repoPath("node_modules/bullmq/package.json"), "utf8"),
    ).version;
    return {
      redis: execFileSync(redisBinary, ["--version"], { encoding: "utf8" }).trim().split(" ")
        .slice(0, 3).join(" "),
      bullmq: bullmqVersion,
      node: execFileSync(node, ["--version"], { encoding: "utf8" }).trim(),
      jobs: options.jobs,
      rounds: options.rounds,
      byConcurrency,
      best,
    };
  } finally {
    await withTimeout(redis.stop(), 15_000, "redis-server to stop");
    removeTempDir(dir);
  }
}

if (import.meta.main) {
  const result = await peer({
    jobs: Number(process.argv[2] ?? 20_000),
    rounds: Number(process.argv[3] ?? 1),
    concurrencies: [1, 50],
    log: console.log,
  });
  console.log(JSON.stringify(result, null, 1));
  process.exit(0);
}
