/**
 * The NATS JetStream peer: the same no-op jobs through a JetStream work queue, with the
 * official `@nats-io/*` clients on Node and Debian's `nats-server`, which the script starts
 * (127.0.0.1, a free port, its store in a temporary directory) and stops. Skipped with the
 * reason when `nats-server` or `node` is missing.
 *
 * Each round: a fresh stream (retention `workqueue`, storage memory or file) with one durable
 * pull consumer shared by the workers (explicit acks, `max_ack_pending` {@linkcode
 * NATS_TUNING}); 4 worker processes consuming `maxMessages` per pull and acking every message
 * at once; one producer process publishing `{"n":i}` and awaiting each PubAck, with
 * `outstanding` publishes in flight at a time (all in `bench/scenarios/nats_peer.mjs`). jobs/s
 * from the first publish to the moment the stream is empty (every message acked; polled every
 * `pollMs` ms). Every round checks that every job was delivered once and acked: the workers'
 * acks add up to the job count, the consumer delivered exactly that many with none pending
 * or redelivered, and the stream is empty. Memory and file rounds alternate.
 *
 * Run from Deno, each file round has a round of workpull on a Deno KV file beside it (the
 * durable scenario's system, given as `besideFile`): file storage is compared round by round
 * with what workpull did in the same minute, not with a median measured minutes earlier. Both
 * are CPU-bound on this machine, and workpull's durable rate drifts more than a median of three
 * rounds smooths: two runs of the durable scenario minutes apart on 2026-12-03 gave medians of
 * 85,313 and 52,860 jobs/s (raw KV at 100 jobs per commit: 65,484 and 60,899).
 *
 * @module
 */

import process from "node:process";
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { type Child, spawnChild } from "../lib/proc.ts";
import { type NatsServer, natsServerBinary, startNatsServer } from "../lib/nats_server.ts";
import { repoPath } from "../lib/runtime.ts";
import { median, round } from "../lib/stats.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";

/** The consumer and publisher settings (documented in bench/README.md). */
export const NATS_TUNING = {
  /** Worker processes sharing the durable consumer. */
  workers: 4,
  /**
   * Messages per pull request of each worker (`consume({ max_messages })`, the library's
   * default; it pulls again when 75 % are used). 1000 measured no faster and cost more CPU.
   */
  maxMessages: 100,
  /** The consumer's `max_ack_pending` (the server's default), above the 4 × 100 pulled at once. */
  maxAckPending: 1000,
  /**
   * Publishes awaiting their PubAck at a time: enough that the publisher is not bound by the
   * round trip (a few ms under load); 1000 measured slower.
   */
  outstanding: 256,
  /** How often the producer polls the stream for emptiness, ms. */
  pollMs: 2,
} as const;

/**
 * {@linkcode NATS_TUNING}, with any field overridden by the JSON object in the environment
 * variable `WORKPULL_BENCH_NATS` (for trying other settings; the results record what ran).
 */
export function tuning(): typeof NATS_TUNING {
  const override = process.env.WORKPULL_BENCH_NATS;
  return override ? { ...NATS_TUNING, ...JSON.parse(override) } : NATS_TUNING;
}

/** The storage types measured. */
export type NatsStorage = "memory" | "file";

/** One storage type's rounds (jobs/s) and their median. */
export interface NatsSeries {
  readonly samples: number[];
  readonly median: number;
}

/** The scenario's result. */
export type NatsPeerResult =
  | { readonly skipped: string }
  | {
    readonly natsServer: string;
    readonly clients: Record<string, string>;
    readonly node: string;
    readonly jobs: number;
    readonly rounds: number;
    readonly tuning: typeof NATS_TUNING;
    readonly memory: NatsSeries;
    readonly file: NatsSeries;
    /** Per round: acks counted by the workers (each must equal `jobs`). */
    readonly acked: { readonly memory: number[]; readonly file: number[] };
    /**
     * workpull on a Deno KV file, one round beside each file round (run from Deno), and per round
     * its rate / that file round's.
     */
    readonly besideFile?: NatsSeries & { readonly ratios: number[] };
  };

function which(command: string): string | undefined {
  try {
    return execFileSync("which", [command], { encoding: "utf8" }).trim() || undefined;
  } catch {
    return undefined;
  }
}

/** One round on `storage`: jobs/s and the workers' ack count. */
async function natsRound(
  node: string,
  server: NatsServer,
  name: string,
  storage: NatsStorage,
  jobs: number,
): Promise<{ rate: number; acked: number }> {
  const script = repoPath("bench/scenarios/nats_peer.mjs");
  const config = JSON.stringify({
    stream: name,
    subject: `bench.${name}`,
    storage,
    jobs,
    ...tuning(),
  });
  const cwd = repoPath();
  const args = (role: string) => [script, role, String(server.port), config];
  const producer = spawnChild("nats producer", node, args("producer"), { cwd, stdin: true });
  const workers: Child[] = [];
  try {
    await producer.next((r) => r.ev === "ready", "the stream and consumer", 30_000);
    for (let i = 0; i < tuning().workers; i++) {
      workers.push(spawnChild(`nats worker ${i}`, node, args("worker"), { cwd, stdin: true }));
    }
    await Promise.all(workers.map((w) => w.next((r) => r.ev === "ready", "worker ready", 30_000)));
    const started = producer.next((r) => r.ev === "start", "the first publish", 10_000);
    const done = producer.next((r) => r.ev === "done", "every job acked", 600_000);
    producer.command({ cmd: "go" });
    const start = await started;
    const end = await done;
    let acked = 0;
    for (const worker of workers) {
      const counted = worker.next((r) => r.ev === "count", "the ack count", 10_000);
      worker.command({ cmd: "count" });
      acked += (await counted).acked as number;
    }
    const consumer = end.consumer as Record<string, number>;
    const problems = [
      end.published !== jobs && `${end.published} PubAcks`,
      acked !== jobs && `${acked} acks counted by the workers`,
      consumer.delivered !== jobs && `${consumer.delivered} deliveries`,
      consumer.ackPending !== 0 && `${consumer.ackPending} acks pending`,
      consumer.redelivered !== 0 && `${consumer.redelivered} redelivered`,
      consumer.ackFloor !== jobs && `ack floor ${consumer.ackFloor}`,
    ].filter(Boolean);
    if (problems.length > 0) {
      throw new Error(`NATS ${storage} round of ${jobs} jobs: ${problems.join(", ")}`);
    }
    const exited = producer.exited;
    producer.command({ cmd: "delete" });
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 10_000))]);
    return { rate: jobs / (((end.t as number) - (start.t as number)) / 1000), acked };
  } finally {
    await Promise.all(workers.map((worker) => worker.kill()));
    await producer.kill();
  }
}

/** Run the scenario; skipped (with the reason) when nats-server or Node is missing. */
export async function natsPeer(options: {
  jobs: number;
  rounds: number;
  log: (line: string) => void;
  /**
   * One round of workpull on a Deno KV file with `jobs` jobs (jobs/s), run beside each file
   * round, right after it or (every other round) right before it; warmed up once first.
   */
  besideFile?: (jobs: number) => Promise<number>;
}): Promise<NatsPeerResult> {
  const binary = natsServerBinary();
  const node = which("node");
  if (!binary || !node) {
    const missing = [
      !binary && "nats-server (Debian: apt-get install nats-server)",
      !node && "node",
    ].filter(Boolean).join(" and ");
    return { skipped: `${missing} not found` };
  }
  const dir = makeTempDir("nats");
  const server = await startNatsServer(binary, dir);
  try {
    const samples: Record<NatsStorage, number[]> = { memory: [], file: [] };
    const acked: Record<NatsStorage, number[]> = { memory: [], file: [] };
    const beside: number[] = [];
    await natsRound(node, server, "warmup", "memory", Math.min(5000, options.jobs));
    await options.besideFile?.(Math.round(options.jobs / 4));
    for (let i = 0; i < options.rounds; i++) {
      const order: (NatsStorage | "beside")[] = i % 2 === 0
        ? ["memory", "file", "beside"]
        : ["beside", "file", "memory"];
      for (const storage of order) {
        if (storage === "beside") {
          if (options.besideFile) beside.push(await options.besideFile(options.jobs));
          continue;
        }
        const result = await natsRound(
          node,
          server,
          `bench_${i}_${storage}`,
          storage,
          options.jobs,
        );
        samples[storage].push(result.rate);
        acked[storage].push(result.acked);
      }
      options.log(
        `  round ${i + 1}/${options.rounds}: memory ${fmt(samples.memory.at(-1)!)}, file ${
          fmt(samples.file.at(-1)!)
        } jobs/s (4 worker processes, every job acked once)${
          options.besideFile ? `; workpull on a KV file beside it ${fmt(beside.at(-1)!)}` : ""
        }`,
      );
    }
    const series = (values: number[]): NatsSeries => ({
      samples: values.map((v) => round(v)),
      median: round(median(values)),
    });
    const version = (pkg: string) =>
      JSON.parse(readFileSync(repoPath("node_modules", pkg, "package.json"), "utf8")).version;
    return {
      natsServer: server.version,
      clients: {
        "@nats-io/transport-node": version("@nats-io/transport-node"),
        "@nats-io/jetstream": version("@nats-io/jetstream"),
      },
      node: execFileSync(node, ["--version"], { encoding: "utf8" }).trim(),
      jobs: options.jobs,
      rounds: options.rounds,
      tuning: tuning(),
      memory: series(samples.memory),
      file: series(samples.file),
      acked,
      ...(options.besideFile
        ? {
          besideFile: {
            ...series(beside),
            ratios: beside.map((rate, i) => round(rate / samples.file[i], 3)),
          },
        }
        : {}),
    };
  } finally {
    await server.stop();
    removeTempDir(dir);
  }
}

function fmt(value: number): string {
  return Math.round(value).toLocaleString("en-US");
}

if (import.meta.main) {
  const result = await natsPeer({
    jobs: Number(process.argv[2] ?? 20_000),
    rounds: Number(process.argv[3] ?? 1),
    log: console.log,
  });
  console.log(JSON.stringify(result, null, 1));
  process.exit(0);
}
