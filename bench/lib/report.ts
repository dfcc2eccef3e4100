/**
 * The suite's results: the JSON document (`bench/results.json`), the targets of issues #5 and
 * #15 checked against it (those of #15 in `performance_targets.ts`), a plain-text table for the
 * terminal, the Markdown summary (`bench/results.md`) and the README section.
 *
 * @module
 */

import type { ClientSizeResult } from "../scenarios/client_size.ts";
import type { DurableResult } from "../scenarios/durable.ts";
import type { BacklogResult } from "../scenarios/backlog.ts";
import type { ClusterResult } from "../scenarios/cluster.ts";
import type { FailoverResult } from "../scenarios/failover.ts";
import type { LatencyResult } from "../scenarios/latency.ts";
import type { NatsPeerResult } from "../scenarios/nats_peer.ts";
import type { PeerResult } from "../scenarios/peer.ts";
import type { ThroughputResult } from "../scenarios/throughput.ts";
import { describeKernelThreads, KERNEL_THREAD_MIN_MS } from "./kernel_threads.ts";
import { describeRunQueue } from "./run_queue.ts";
import type { BusyVerdict, LoadRecord } from "./machine_load.ts";
import { natsComparisons, performanceTargets } from "./performance_targets.ts";
import { runtimeLabel } from "./runtime.ts";

/** Memory scenario figures (bytes). */
export interface MemoryResult {
  readonly runtime: string;
  readonly method: string;
  readonly points: {
    readonly pending: number;
    readonly rounds: number;
    readonly perJob: number;
    readonly payloadBytes: number;
    readonly idBytes: number;
    readonly beyondPayload: number;
  }[];
}

/** What one runtime measured. */
export interface RuntimeResults {
  throughput?: ThroughputResult;
  durable?: DurableResult;
  backlog?: BacklogResult;
  cluster?: ClusterResult;
  latency?: LatencyResult;
  failover?: FailoverResult;
  memory?: MemoryResult;
  /** Scenario → why it did not run on this runtime. */
  skipped: Record<string, string>;
  /** The load around each scenario this runtime ran. */
  loads?: LoadRecord[];
}

/** The whole document. */
export interface Results {
  readonly generatedAt: string;
  readonly command: string;
  machine: Record<string, unknown>;
  readonly versions: Record<string, string>;
  readonly config: Record<string, unknown>;
  readonly runtimes: { deno?: RuntimeResults; bun?: RuntimeResults; node?: RuntimeResults };
  peer?: PeerResult;
  nats?: NatsPeerResult;
  clientSize?: ClientSizeResult;
  targets: Target[];
  /** The load around every scenario, in the order they ran. */
  loads?: LoadRecord[];
  /** Whether the machine was busy during the run, and why. */
  busy?: BusyVerdict;
}

/** One target of an issue and whether this run met it. */
export interface Target {
  readonly target: string;
  readonly measured: string;
  readonly met: boolean;
  /** The issue that set it (#5 when absent). */
  readonly issue?: number;
}

/** Formatting shared with `performance_targets.ts`. */
export const n0 = (value: number): string => Math.round(value).toLocaleString("en-US");
export const ms = (value: number, digits = 1): string => `${value.toFixed(digits)} ms`;
export const x = (value: number): string => `${value.toFixed(2)}x`;
const kb = (bytes: number) => `${(bytes / 1000).toFixed(1)} KB`;

/** Check the issue's targets against what ran. */
export function targets(results: Results): Target[] {
  const out: Target[] = [];
  const runtimes = Object.entries(results.runtimes) as [string, RuntimeResults][];
  for (const [name, r] of runtimes) {
    for (const pair of r.throughput?.pairs ?? []) {
      out.push({
        target:
          `Throughput in memory over WebSocket (${name}, ${pair.topology}) >= 0.9x raw WebSocket`,
        measured: `${x(pair.ratio)} (${n0(pair.workpull.median)} vs ${n0(pair.raw.median)} jobs/s)`,
        met: pair.ratio >= 0.9,
      });
    }
  }
  const peer = results.peer;
  if (peer && "best" in peer) {
    for (const [name, r] of runtimes) {
      for (const pair of r.throughput?.pairs ?? []) {
        const ratio = pair.workpull.median / peer.best.jobsPerSecond;
        out.push({
          target:
            `Throughput (${name}, ${pair.topology}) >= 5x BullMQ (best of concurrency 1 and 50)`,
          measured: `${x(ratio)} (${n0(pair.workpull.median)} vs ${
            n0(peer.best.jobsPerSecond)
          } jobs/s)`,
          met: ratio >= 5,
        });
      }
    }
  }
  const durable = results.runtimes.deno?.durable;
  if (durable) {
    out.push({
      target: "Durable (Deno KV file) >= 10,000 jobs/s",
      measured: `${n0(durable.endToEnd.median)} jobs/s (raw one commit at a time: ${
        n0(durable.rawSingle.median)
      })`,
      met: durable.endToEnd.median >= 10_000,
    });
  }
  const backlog = results.runtimes.deno?.backlog;
  if (backlog) {
    out.push({
      target: "Backlog ingest over POST /jobs (batches of 100, Deno KV file) >= 30,000 jobs/s",
      issue: 10,
      measured: `${n0(backlog.ingest.median)} jobs/s (raw KV, same writes: ${
        n0(backlog.rawIngest.median)
      })`,
      met: backlog.ingest.median >= 30_000,
    });
    out.push({
      target: "Backlog drain to workers (Deno KV file) >= 20,000 jobs/s",
      issue: 10,
      measured: `${n0(backlog.drain.median)} jobs/s (raw KV, same writes: ${
        n0(backlog.rawDrain.median)
      })`,
      met: backlog.drain.median >= 20_000,
    });
  }
  for (const [name, r] of runtimes) {
    const kill = r.failover?.kill;
    if (kill && kill.samples.length > 0) {
      const worst = Math.max(...kill.samples.map((s) => s.firstRedelivery));
      out.push({
        target: `Failover after SIGKILL (${name}): first redelivery < 100 ms`,
        measured: `median ${ms(kill.median.firstRedelivery)}, worst ${ms(worst)}`,
        met: worst < 100,
      });
    }
    const silent = r.failover?.silent;
    if (silent) {
      const worst = Math.max(...silent.samples.map((s) => s.detected));
      out.push({
        target: `Silent worker (${name}) detected within the configured bound (${
          ms(silent.bound, 0)
        }; default <= 10 s)`,
        measured: `median ${ms(silent.median.detected, 0)}, worst ${ms(worst, 0)}`,
        met: worst <= silent.bound && silent.bound <= 10_000,
      });
    }
  }
  const memory = results.runtimes.deno?.memory;
  for (const point of memory?.points ?? []) {
    out.push({
      target: `Heap <= 300 bytes per pending job beyond its payload (${n0(point.pending)} pending)`,
      measured: `${point.beyondPayload.toFixed(0)} bytes`,
      met: point.beyondPayload <= 300,
    });
  }
  if (results.clientSize) {
    out.push({
      target: "Worker client <= 15 KB gzip",
      measured: `${kb(results.clientSize.gzip)} gzip (${kb(results.clientSize.minified)} minified)`,
      met: results.clientSize.gzip <= 15_000,
    });
  }
  return [...out, ...performanceTargets(results)];
}

/** The rows of the headline table: measure, workpull, baseline, ratio. */
function headline(results: Results): string[][] {
  const rows: string[][] = [];
  const peer = results.peer && "best" in results.peer ? results.peer : undefined;
  for (const [name, r] of Object.entries(results.runtimes) as [string, RuntimeResults][]) {
    const label = runtimeLabel(name);
    for (const pair of r.throughput?.pairs ?? []) {
      rows.push([
        `Throughput, in memory, WebSocket, ${label}, ${pair.topology} (processes × endpoints)`,
        `${n0(pair.workpull.median)} jobs/s`,
        `raw WebSocket ${n0(pair.raw.median)} jobs/s`,
        x(pair.ratio),
      ]);
      if (pair.batched) {
        rows.push([
          `  same, against the batched raw WebSocket limit, ${label}, ${pair.topology}`,
          `${n0(pair.workpull.median)} jobs/s`,
          `batched raw WebSocket ${n0(pair.batched.median)} jobs/s`,
          x(pair.batchedRatio),
        ]);
      }
      if (pair.jobQueue && pair.jobQueueRatio !== undefined) {
        rows.push([
          `  as a job queue (JobQueue on a MemoryJobStore), ${label}, ${pair.topology}`,
          `${n0(pair.jobQueue.median)} jobs/s`,
          `workpull's controller alone ${n0(pair.workpull.median)} jobs/s`,
          x(pair.jobQueueRatio),
        ]);
      }
    }
    if (r.durable) {
      rows.push([
        `Durable, Deno KV file, WebSocket, ${label}, 1×4`,
        `${n0(r.durable.endToEnd.median)} jobs/s`,
        `raw KV: ${n0(r.durable.rawSingle.median)} jobs/s one job per commit; ${
          n0(r.durable.rawBatch.median)
        } jobs/s 100 per commit`,
        `${x(r.durable.endToEnd.median / r.durable.rawSingle.median)} / ${
          x(r.durable.endToEnd.median / r.durable.rawBatch.median)
        }`,
      ]);
      if (r.durable.remote) {
        rows.push([
          `Durable, Deno KV file, POST /jobs from another process (batches of ${r.durable.remoteProducer.batch}), ${label}, 1×4`,
          `${n0(r.durable.remote.median)} jobs/s`,
          `raw KV ${n0(r.durable.rawBatch.median)} jobs/s 100 per commit`,
          x(r.durable.remote.median / r.durable.rawBatch.median),
        ]);
      }
    }
    if (r.backlog) {
      const b = r.backlog;
      rows.push([
        `Backlog ingest, POST /jobs (batches of ${b.ingestProducer.batch}) into a Deno KV file, no worker, ${label}`,
        `${n0(b.ingest.median)} jobs/s`,
        `raw KV, the store's writes, 100 jobs per commit: ${n0(b.rawIngest.median)} jobs/s`,
        x(b.ingest.median / b.rawIngest.median),
      ]);
      rows.push([
        `Backlog drain, Deno KV file → 1 worker process × 4, ${label}`,
        `${n0(b.drain.median)} jobs/s`,
        `raw KV, the store's writes, 100 jobs per commit: ${n0(b.rawDrain.median)} jobs/s`,
        x(b.drain.median / b.rawDrain.median),
      ]);
    }
    if (r.cluster) {
      const [one, ...more] = r.cluster.throughput;
      for (const t of more) {
        rows.push([
          `Shared flow on one Deno KV file, ${t.instances} instances × ${r.cluster.endpointsPerInstance} endpoints, ${label}`,
          `${n0(t.median)} jobs/s`,
          `1 instance ${n0(one.median)} jobs/s`,
          x(t.median / one.median),
        ]);
      }
      const k = r.cluster.takeover.median;
      rows.push([
        `Instance SIGKILLed holding ${k.jobs} jobs, lease ${
          ms(r.cluster.takeover.leaseTtl, 0)
        } renewed every ${ms(r.cluster.takeover.renewInterval, 0)}, ${label}`,
        `taken over ${ms(k.takeover, 0)}, first redelivery ${ms(k.firstRedelivery, 0)}, all done ${
          ms(k.allDone, 0)
        }`,
        "",
        "",
      ]);
    }
    if (r.latency) {
      const m = r.latency.median;
      rows.push([
        `Latency submit → handler start, ${label}, 4×1, at ${
          n0(r.latency.rate)
        } jobs/s (50% of max)`,
        `p50 ${ms(m.p50, 2)}, p99 ${ms(m.p99)}, p99.9 ${ms(m.p999)}, max ${ms(m.max)}`,
        "",
        "",
      ]);
    }
    if (r.failover) {
      const k = r.failover.kill.median;
      rows.push([
        `Failover after SIGKILL, ${label} (${k.jobs} unconfirmed jobs)`,
        `detected ${ms(k.detected)}, first redelivery ${ms(k.firstRedelivery)}, all confirmed ${
          ms(k.allConfirmed)
        }`,
        "",
        "",
      ]);
      const s = r.failover.silent;
      if (s) {
        rows.push([
          `Silent (half-open) worker, ${label}, default liveness`,
          `detected ${ms(s.median.detected, 0)}, first redelivery ${
            ms(s.median.firstRedelivery, 0)
          }`,
          `bound ${ms(s.bound, 0)}`,
          "",
        ]);
      }
    }
    if (r.memory) {
      for (const point of r.memory.points) {
        rows.push([
          `Controller heap per pending job beyond its payload, ${n0(point.pending)} pending`,
          `${point.beyondPayload.toFixed(0)} bytes`,
          `payload ${point.payloadBytes.toFixed(0)} bytes`,
          "",
        ]);
      }
    }
  }
  if (peer) {
    const c1 = peer.byConcurrency["1"]?.median;
    const c50 = peer.byConcurrency["50"]?.median;
    rows.push([
      `Peer: BullMQ ${peer.bullmq} + Redis ${
        peer.redis.replace(/^Redis server v=/, "")
      }, Node ${peer.node}`,
      `${n0(peer.best.jobsPerSecond)} jobs/s (concurrency ${peer.best.concurrency})`,
      `concurrency 1: ${c1 ? n0(c1) : "-"}; 50: ${c50 ? n0(c50) : "-"} jobs/s`,
      "",
    ]);
  }
  for (const c of natsComparisons(results)) {
    rows.push([c.measure, c.workpull ? `${n0(c.workpull)} jobs/s` : "", c.peer, c.ratio]);
  }
  if (results.clientSize) {
    const c = results.clientSize;
    rows.push([
      "Browser worker client (client.ts, esbuild --minify)",
      `${kb(c.gzip)} gzip`,
      `${kb(c.minified)} minified, ${kb(c.brotli)} brotli`,
      "",
    ]);
  }
  return rows;
}

/** A plain-text table. */
export function textTable(header: readonly string[], rows: readonly string[][]): string {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => (r[i] ?? "").length)));
  const line = (cells: readonly string[]) =>
    cells.map((cell, i) => (cell ?? "").padEnd(widths[i])).join("  ").trimEnd();
  return [line(header), widths.map((w) => "-".repeat(w)).join("  "), ...rows.map(line)].join("\n");
}

/** A Markdown table. */
export function markdownTable(header: readonly string[], rows: readonly string[][]): string {
  const escape = (cell: string) => cell.replaceAll("|", "\\|");
  return [
    `| ${header.join(" | ")} |`,
    `| ${header.map(() => "---").join(" | ")} |`,
    ...rows.map((r) => `| ${r.map((cell) => escape(cell ?? "")).join(" | ")} |`),
  ].join("\n");
}

const HEADLINE = ["Measure (medians)", "workpull", "baseline / peer", "ratio"];

/** The terminal summary: headline table, targets, the load around each scenario. */
export function textSummary(results: Results): string {
  return [
    textTable(HEADLINE, headline(results)),
    "",
    textTable(
      ["Target", "Issue", "Measured", "Met"],
      results.targets.map((t) => [
        t.target,
        `#${t.issue ?? 5}`,
        t.measured,
        t.met ? "yes" : "NO",
      ]),
    ),
    ...skippedLines(results),
    "",
    textTable(LOAD_HEADER, loadRows(results)),
  ].join("\n");
}

const LOAD_HEADER = [
  "Scenario",
  "runtime",
  "load avg before",
  "after",
  "seconds",
  "CPU of other processes",
  "of it, steal (other VMs on the host)",
];

/** One row per scenario: the 1-minute load average around it and others' CPU during it. */
function loadRows(results: Results): string[][] {
  return (results.loads ?? []).map((l) => [
    l.scenario,
    l.runtime,
    l.before.toFixed(2),
    l.after.toFixed(2),
    l.seconds.toFixed(1),
    coresOrNotMeasured(l.othersCores),
    coresOrNotMeasured(l.stealCores),
  ]);
}

function coresOrNotMeasured(cores: number | null | undefined): string {
  return cores === null || cores === undefined ? "not measured" : `${cores.toFixed(2)} cores`;
}

/** The busy warning, or nothing for a quiet run. */
function busyLines(results: Results): string[] {
  if (!results.busy?.busy) return [];
  return [
    `> **Warning: the machine was busy during this run** (${
      results.busy.reasons.join("; ")
    }). These figures are not fit to publish; the README section was not rewritten.`,
    "",
  ];
}

function skippedLines(results: Results): string[] {
  const lines: string[] = [];
  for (const [name, r] of Object.entries(results.runtimes) as [string, RuntimeResults][]) {
    for (const [scenario, why] of Object.entries(r.skipped)) {
      lines.push(`- ${scenario} on ${name}: not run (${why})`);
    }
  }
  if (results.peer && "skipped" in results.peer) {
    lines.push(`- peer (BullMQ): skipped (${results.peer.skipped})`);
  }
  if (results.nats && "skipped" in results.nats) {
    lines.push(`- nats (NATS JetStream): skipped (${results.nats.skipped})`);
  }
  return lines.length ? ["", "Not run:", ...lines] : [];
}

/** The Markdown summary (`bench/results.md`). */
export function markdownSummary(results: Results, reproduce: string): string {
  const m = results.machine;
  const parts = [
    "# workpull benchmark results",
    "",
    `Generated ${results.generatedAt} by \`${results.command}\`.`,
    "",
    `Machine: ${m.cpus} × ${m.cpuModel}, ${m.memory}, ${m.os}; load average ${m.loadStart} at the start, ${m.loadEnd} at the end (the machine is shared).`,
    `Versions: ${Object.entries(results.versions).map(([k, v]) => `${k} ${v}`).join(", ")}; ${
      results.clientSize ? `esbuild ${results.clientSize.esbuild}` : ""
    }.`,
    "",
    ...busyLines(results),
    "## Summary",
    "",
    markdownTable(HEADLINE, headline(results)),
    "",
    "## Targets (issues #5, #10 and #15)",
    "",
    markdownTable(
      ["Target", "Issue", "Measured", "Met"],
      results.targets.map((t) => [
        t.target.trim(),
        `#${t.issue ?? 5}`,
        t.measured,
        t.met ? "yes" : "**no**",
      ]),
    ),
    ...skippedLines(results),
    "",
    "## Load on the machine",
    "",
    "The 1-minute load average (`os.loadavg()`) just before and just after each scenario, and the CPU that other processes used during it (the machine's busy time from `/proc/stat` minus this run's own processes; `lib/machine_load.ts`). " +
    "The load average includes the benchmark's own processes, which keep every core busy, so it reads high after a scenario and decays over minutes. " +
    `Rule: ${results.busy?.rule ?? "not recorded"}. Verdict: ${
      results.busy ? (results.busy.busy ? "**busy**" : "quiet") : "not recorded"
    }.`,
    "",
    markdownTable(LOAD_HEADER, loadRows(results)),
    "",
    "## Details",
    "",
    ...details(results),
    "## Reproduce",
    "",
    "```sh",
    reproduce,
    "```",
    "",
  ];
  return parts.join("\n");
}

function details(results: Results): string[] {
  const out: string[] = [];
  for (const [name, r] of Object.entries(results.runtimes) as [string, RuntimeResults][]) {
    const label = runtimeLabel(name);
    if (r.throughput) {
      const t = r.throughput;
      out.push(
        `### Throughput, in memory, over WebSocket (${t.runtime})`,
        "",
        `${
          n0(t.jobs)
        } jobs per run, window ${t.window}, no-op handler, payload \`{"n":i}\`, MessageIDs random UUIDs (the default), ${t.rounds} alternating rounds after five unmeasured warm-up runs of each system. ` +
          "Controller (and raw server) in the benchmark process; workers (and raw clients) in separate processes. " +
          "workpull's producer (a `BufferedProducer`) is given each run's jobs with `submitMany`, 1,000 jobs a call, awaiting each call's receipts with 4 calls waiting at a time, as a producer streaming a large source does (the BullMQ peer awaits each `addBulk`; the NATS peer bounds its publishes awaiting a PubAck). " +
          'The raw baseline (same runtime, same layout of sockets per process) sends each job as one JSON text message `{"type":"job","id":<random UUID>,"payload":{"n":i}}`, the client parses it and answers one JSON confirmation `{"type":"ack","id":…}`, which the server parses before releasing the next job; at most `window` unconfirmed per socket; nothing else (no queue, no validation, no redelivery). ' +
          'The batched raw baseline (the practical limit, `lib/batched_raw.ts`) moves jobs as workpull does: every granted job in one frame `{"type":"jobs","seq":s,"jobs":[{"id":<random UUID>,"payload":{"n":i}},…]}`, the client confirming cumulatively with a top-up `{"type":"request","confirmed":c,"upTo":c+window}` at half the window (else an `ack` when the frame is used up); JSON.parse on both sides; no queue logic. ' +
          "The job queue (`JobQueueSetup`) is workpull as a `JobQueue` on a `MemoryJobStore`, served the same way to the same worker processes, given each run's jobs with `addMany` (1,000 a call, 4 calls waiting at a time) and taking them from its backlog: every job is a record with its state, tries and result, and every worker reports each job's outcome (feature `outcomes`); it is measured against workpull's controller alone in the same rounds. " +
          "Each ratio is the median of the per-round ratios; every round's ratio is listed.",
        "",
        markdownTable(
          [
            "Layout",
            "raw WebSocket (jobs/s)",
            "batched raw WebSocket (jobs/s)",
            "workpull (jobs/s)",
            "vs raw, per round",
            "vs raw",
            "vs batched, per round",
            "vs batched",
            "job queue (jobs/s)",
            "job queue vs workpull, per round",
            "job queue vs workpull",
          ],
          t.pairs.map((p) => [
            p.topology,
            `${n0(p.raw.median)} (${p.raw.samples.map(n0).join(", ")})`,
            p.batched ? `${n0(p.batched.median)} (${p.batched.samples.map(n0).join(", ")})` : "",
            `${n0(p.workpull.median)} (${p.workpull.samples.map(n0).join(", ")})`,
            p.ratios.map((v) => v.toFixed(2)).join(", "),
            x(p.ratio),
            p.batchedRatios ? p.batchedRatios.map((v) => v.toFixed(2)).join(", ") : "",
            p.batchedRatio === undefined ? "" : x(p.batchedRatio),
            p.jobQueue ? `${n0(p.jobQueue.median)} (${p.jobQueue.samples.map(n0).join(", ")})` : "",
            p.jobQueueRatios ? p.jobQueueRatios.map((v) => v.toFixed(2)).join(", ") : "",
            p.jobQueueRatio === undefined ? "" : x(p.jobQueueRatio),
          ]),
        ),
        "",
      );
    }
    if (r.durable) {
      const d = r.durable;
      out.push(
        `### Durable: Deno KV file (${d.runtime})`,
        "",
        `workpull over WebSocket (1 process × 4 endpoints, window 100) with \`DenoKvWorkQueue\` on a fresh file per run, ${
          n0(d.jobs.endToEnd)
        } jobs; raw KV baselines do the adapter's three fenced commits directly (store the jobs; accept them, one record a run; confirm: delete the jobs and remember them in one completed record): ${
          n0(d.jobs.rawSingle)
        } jobs one per commit, ${
          n0(d.jobs.rawBatch)
        } jobs 100 per commit. ${d.rounds} alternating rounds. A workpull run ends when the queue has written its last confirmation, as a raw run ends with its last commit.` +
          (d.remote
            ? ` The same system with a remote producer: another ${d.runtime} process posts the jobs to \`POST /jobs\` with a client token, ${d.remoteProducer.batch} jobs per request, ${d.remoteProducer.concurrency} requests in flight, each answered 2xx; timed from its first request until the queue has written the last confirmation. ` +
              `Per round, in-process / raw 100 per commit: ${
                d.ratios.endToEnd.map((v) => v.toFixed(2)).join(", ")
              }; POST /jobs / raw 100 per commit: ${
                d.ratios.remote.map((v) => v.toFixed(2)).join(", ")
              }.`
            : ""),
        "",
        markdownTable(["Run", "jobs/s (median)", "rounds"], [
          [
            "workpull + DenoKvWorkQueue",
            n0(d.endToEnd.median),
            d.endToEnd.samples.map(n0).join(", "),
          ],
          ...(d.remote
            ? [[
              "workpull + DenoKvWorkQueue, jobs over POST /jobs",
              n0(d.remote.median),
              d.remote.samples.map(n0).join(", "),
            ]]
            : []),
          [
            "raw KV, 1 job per commit",
            n0(d.rawSingle.median),
            d.rawSingle.samples.map(n0).join(", "),
          ],
          [
            "raw KV, 100 jobs per commit",
            n0(d.rawBatch.median),
            d.rawBatch.samples.map(n0).join(", "),
          ],
        ]),
        "",
      );
    }
    if (r.backlog) {
      const b = r.backlog;
      const row = (name: string, series: { median: number; samples: number[] }) => [
        name,
        n0(series.median),
        series.samples.map(n0).join(", "),
      ];
      out.push(
        `### Backlog: a job queue on a Deno KV file (${b.runtime})`,
        "",
        `A \`JobQueue\` on a \`DenoKvJobStore\` in a fresh file per round, ${
          n0(b.jobs)
        } jobs. Ingest: another ${b.runtime} process posts them to \`POST /jobs\` with a client token, ${b.ingestProducer.batch} jobs per request, ${b.ingestProducer.concurrency} requests in flight, no worker connected; timed from its first request to the last answer (each answer means the jobs are committed). Drain: then one worker process with 4 endpoints (window 100, no-op handler) joins; timed from the first endpoint bound to the last try stored as completed. The raw KV baselines do the store's own writes for the same jobs with KV atomics, 100 jobs per commit, each commit fenced by the epoch: the record with its small payload in it (ingest); one record of the tries a commit starts, then the jobs' records deleted and one record of the finished jobs written (drain). ${b.rounds} alternating rounds. Per round, ingest / raw: ${
          b.ratios.ingest.map((v) => v.toFixed(2)).join(", ")
        }; drain / raw: ${b.ratios.drain.map((v) => v.toFixed(2)).join(", ")}.`,
        "",
        markdownTable(["Run", "jobs/s (median)", "rounds"], [
          row("ingest over POST /jobs", b.ingest),
          row("raw KV, ingest writes", b.rawIngest),
          row("drain to 1 worker process × 4", b.drain),
          row("raw KV, drain writes", b.rawDrain),
        ]),
        "",
      );
    }
    if (r.cluster) {
      const c = r.cluster;
      out.push(
        `### Shared flow: several instances on one Deno KV file (${c.runtime})`,
        "",
        `Instance processes with \`DenoKvClusterStore\` on one fresh KV file per run, each with ${c.endpointsPerInstance} in-process endpoints (window ${c.window}, no-op handler); the shared backlog is filled with ${
          n0(c.jobs)
        } jobs first, timed from \`go\` to the last completion; 1, 2 and 3 instances in ${c.rounds} alternating rounds. Takeover: a victim instance holding ${c.takeover.median.jobs} jobs it never finishes is SIGKILLed; two survivors wait with idle workers; lease ${
          ms(c.takeover.leaseTtl, 0)
        }, renewed every ${ms(c.takeover.renewInterval, 0)}.`,
        "",
        markdownTable(
          ["Instances", "jobs/s (median)", "rounds"],
          c.throughput.map((
            t,
          ) => [String(t.instances), n0(t.median), t.samples.map(n0).join(", ")]),
        ),
        "",
        markdownTable(
          ["Round", "taken over", "first redelivery", "all done"],
          [
            ...c.takeover.samples.map((s, i) => [
              String(i + 1),
              ms(s.takeover, 0),
              ms(s.firstRedelivery, 0),
              ms(s.allDone, 0),
            ]),
            [
              "median",
              ms(c.takeover.median.takeover, 0),
              ms(c.takeover.median.firstRedelivery, 0),
              ms(c.takeover.median.allDone, 0),
            ],
          ],
        ),
        "",
      );
    }
    if (r.latency) {
      const l = r.latency;
      out.push(
        `### Latency (${l.runtime})`,
        "",
        `4 worker processes × 1 endpoint, window 100, a \`submit()\` a job. Maximum throughput measured first in the same run: ${
          n0(l.maxThroughput)
        } jobs/s; then a pacer submitted at ${n0(l.rate)} jobs/s (achieved ${
          n0(l.achieved)
        }) for ${l.seconds} s per round. Latency = handler start − submit, clocks \`performance.timeOrigin + performance.now()\` of each process.`,
        "",
        `The idle host just before (no benchmark process running), a 1 ms timer for ${l.hostTimer.seconds} s: woke late by p50 ${
          ms(l.hostTimer.p50, 2)
        }, p99 ${ms(l.hostTimer.p99, 2)}, p99.9 ${ms(l.hostTimer.p999, 2)}, max ${
          ms(l.hostTimer.max, 2)
        }; ${l.hostTimer.over5ms} of ${
          n0(l.hostTimer.count)
        } wake-ups over 5 ms late. A stall of the host stalls every process at once; at this rate each one leaves jobs late by as much.`,
        "",
        ...(l.kernelThreads
          ? [
            `The kernel's own threads during the measured rounds (\`/proc\`, at least ${KERNEL_THREAD_MIN_MS} ms of CPU): ${
              describeKernelThreads(l.kernelThreads)
            }. Each wake-up holds a core for about the time shown, and a process it preempts waits (see \`bench/README.md\`, "The host stalls").`,
            "",
          ]
          : []),
        ...(l.runQueue
          ? [
            `The benchmark's own processes during the measured rounds (\`/proc/<pid>/schedstat\` of each one's main thread): ${
              describeRunQueue(l.runQueue)
            }. While the controller's thread waits, nothing is dispatched, and the jobs submitted meanwhile wait behind the workers' windows (see \`bench/README.md\`, "Taking turns for a core").`,
            "",
          ]
          : []),
        markdownTable(
          ["Round", "jobs", "p50", "p90", "p99", "p99.9", "max"],
          [
            ...l.rounds.map((d, i) => [
              String(i + 1),
              n0(d.count),
              ms(d.p50, 2),
              ms(d.p90, 2),
              ms(d.p99, 2),
              ms(d.p999, 2),
              ms(d.max, 2),
            ]),
            [
              "median",
              n0(l.median.count),
              ms(l.median.p50, 2),
              ms(l.median.p90, 2),
              ms(l.median.p99, 2),
              ms(l.median.p999, 2),
              ms(l.median.max, 2),
            ],
          ],
        ),
        "",
      );
    }
    if (r.failover) {
      const f = r.failover;
      const rows = (mode: string, samples: typeof f.kill.samples) =>
        samples.map((s, i) => [
          `${mode} ${i + 1}`,
          String(s.jobs),
          ms(s.detected),
          ms(s.firstRedelivery),
          ms(s.allConfirmed),
        ]);
      out.push(
        `### Failover (${f.runtime})`,
        "",
        "A victim worker process holds 20 unconfirmed jobs (stuck in the first); two idle survivor processes (5 ms per job). " +
          "SIGKILL: times from the kill. SIGSTOP (a silent, half-open worker, default liveness settings): times from the stop.",
        "",
        markdownTable(["Round", "jobs", "binding ended", "first redelivery", "all confirmed"], [
          ...rows("SIGKILL", f.kill.samples),
          ...rows("SIGSTOP", f.silent?.samples ?? []),
        ]),
        "",
      );
    }
    if (r.memory) {
      out.push(
        `### Memory (${r.memory.runtime})`,
        "",
        r.memory.method,
        "",
        markdownTable(
          [
            "Pending jobs",
            "heap per job",
            "payload string",
            "MessageID string (included)",
            "beyond payload",
          ],
          r.memory.points.map((p) => [
            n0(p.pending),
            `${p.perJob.toFixed(0)} B`,
            `${p.payloadBytes.toFixed(0)} B`,
            `${p.idBytes.toFixed(0)} B`,
            `${p.beyondPayload.toFixed(0)} B`,
          ]),
        ),
        "",
      );
    }
    void label;
  }
  const peer = results.peer;
  if (peer && "best" in peer) {
    out.push(
      "### Peer: BullMQ",
      "",
      `${
        n0(peer.jobs)
      } no-op jobs per run through BullMQ ${peer.bullmq} on ${peer.redis} (started by the script on 127.0.0.1, no persistence), worker and producer in separate Node ${peer.node} processes, jobs added with \`addBulk\` in chunks of 1000; from the first add to the last completion. ${peer.rounds} alternating rounds.`,
      "",
      markdownTable(
        ["Concurrency", "jobs/s (median)", "rounds"],
        Object.entries(peer.byConcurrency).map((
          [c, s],
        ) => [c, n0(s.median), s.samples.map(n0).join(", ")]),
      ),
      "",
    );
  }
  const nats = results.nats;
  if (nats && "memory" in nats) {
    const t = nats.tuning;
    out.push(
      "### Peer: NATS JetStream",
      "",
      `${
        n0(nats.jobs)
      } no-op jobs per run through nats-server ${nats.natsServer} (Debian's package, started by the script on 127.0.0.1 with \`--jetstream\` and a temporary store directory, defaults otherwise) with the official clients (${
        Object.entries(nats.clients).map(([k, v]) => `${k} ${v}`).join(", ")
      }) on Node ${nats.node}. ` +
        `Per round a fresh stream (retention \`workqueue\`, one subject, storage memory or file) with one durable pull consumer (\`ack_policy: explicit\`, \`max_ack_pending\` ${
          n0(t.maxAckPending)
        }) shared by ${t.workers} worker processes, each consuming with \`consume({ max_messages: ${t.maxMessages}, callback })\` (re-pulling at the library's default threshold) and calling \`ack()\` on every message; the handler does nothing else. ` +
        `One producer process publishes \`{"n":i}\` with \`js.publish()\`, awaiting every PubAck, ${t.outstanding} publishes in flight at a time. ` +
        `jobs/s from the first publish until the stream is empty (a work-queue stream deletes a message when its ack lands; polled every ${t.pollMs} ms). ` +
        "Every round checks that the workers acked every job exactly once (their ack counts add up to the job count; the consumer delivered that many, none pending or redelivered). " +
        "Durability differs in NATS's favour: its file store writes every message to the file but does not fsync it (nats-server 2.9 made no fsync call during a 20,000-message round, traced with strace), whereas Deno KV fsyncs every commit. " +
        `${nats.rounds} rounds, memory and file alternating, after one unmeasured warm-up run.` +
        (nats.besideFile
          ? ` Beside each file round, right after it or (every other round) right before it, a round of workpull on a Deno KV file (the durable scenario's system, ${
            n0(nats.jobs)
          } jobs, after one unmeasured warm-up run of a quarter of that): file storage is compared round by round with what workpull did in the same minute, since a KV file's rate drifts more between runs minutes apart than within one.`
          : ""),
      "",
      markdownTable(
        ["Run", "jobs/s (median)", "rounds", "acks counted per round"],
        [
          ...(["memory", "file"] as const).map((storage) => [
            `NATS, ${storage} storage`,
            n0(nats[storage].median),
            nats[storage].samples.map(n0).join(", "),
            nats.acked[storage].map(n0).join(", "),
          ]),
          ...(nats.besideFile
            ? [[
              "workpull on a Deno KV file, beside each file round",
              n0(nats.besideFile.median),
              nats.besideFile.samples.map(n0).join(", "),
              "",
            ]]
            : []),
        ],
      ),
      "",
    );
    const rows = natsComparisons(results).filter((c) => c.perRound.length > 0);
    if (rows.length > 0) {
      out.push(
        "workpull against each NATS round: its median, or the workpull round run beside it:",
        "",
        markdownTable(
          ["Comparison", "ratio per NATS round", "ratio"],
          rows.map((c) => [
            c.measure,
            c.perRound.map((v) => v.toFixed(2)).join(", "),
            `${c.ratio} (${c.paired ? "median of the rounds" : "of the medians"})`,
          ]),
        ),
        "",
      );
    }
  }
  if (results.clientSize) {
    const c = results.clientSize;
    out.push(
      "### Browser worker client",
      "",
      `\`client.ts\` bundled by esbuild ${c.esbuild} (\`--bundle --minify --format=esm --platform=browser --target=es2022\`, dependencies included): ${
        n0(c.minified)
      } bytes minified, ${n0(c.gzip)} gzip -9, ${n0(c.brotli)} brotli. Largest inputs: ${
        c.inputs.map((i) => `${i.path} ${n0(i.bytes)}`).join(", ")
      }.`,
      "",
    );
  }
  return out;
}

/**
 * The README's "Performance" section (`bench/README_SECTION.md`): the headline figures of a full
 * run on a quiet machine, with its date, and the command that reproduces them.
 */
export function readmeSection(results: Results): string {
  const m = results.machine;
  const v = results.versions;
  const rows: string[][] = [];
  const runtimes = Object.entries(results.runtimes) as [string, RuntimeResults][];
  const peer = results.peer && "best" in results.peer ? results.peer : undefined;
  for (const [name, r] of runtimes) {
    const label = runtimeLabel(name);
    for (const pair of r.throughput?.pairs ?? []) {
      const [processes, endpoints] = pair.topology.split("×");
      rows.push([
        `Throughput in memory over WebSocket, ${label}, 4 endpoints in ${processes} process${
          processes === "1" ? "" : "es"
        }${endpoints === "1" ? "" : ""}`,
        `${n0(pair.workpull.median)} jobs/s`,
        `raw WebSocket ${n0(pair.raw.median)} jobs/s`,
        x(pair.ratio),
      ]);
      if (pair.batched) {
        rows.push([
          `  the same against the batched raw WebSocket limit`,
          `${n0(pair.workpull.median)} jobs/s`,
          `batched raw WebSocket ${n0(pair.batched.median)} jobs/s`,
          x(pair.batchedRatio),
        ]);
      }
      if (pair.jobQueue && pair.jobQueueRatio !== undefined) {
        rows.push([
          `  the same as a job queue (\`JobQueue\` on a \`MemoryJobStore\`: states, tries, results)`,
          `${n0(pair.jobQueue.median)} jobs/s`,
          `workpull's controller alone ${n0(pair.workpull.median)} jobs/s`,
          x(pair.jobQueueRatio),
        ]);
      }
    }
  }
  if (peer) {
    const lowest = Math.min(
      ...runtimes.flatMap(([, r]) => (r.throughput?.pairs ?? []).map((p) => p.workpull.median)),
    );
    rows.push([
      `Peer: BullMQ ${peer.bullmq} + Redis (best of concurrency 1 and 50)`,
      `${n0(lowest)} jobs/s (lowest controller row above)`,
      `${n0(peer.best.jobsPerSecond)} jobs/s`,
      x(lowest / peer.best.jobsPerSecond),
    ]);
    const queues = runtimes.flatMap(([, r]) =>
      (r.throughput?.pairs ?? []).flatMap((p) => p.jobQueue ? [p.jobQueue.median] : [])
    );
    if (queues.length > 0) {
      // BullMQ is a job queue: beside workpull's job queue too, states and retries on both sides.
      const lowestQueue = Math.min(...queues);
      rows.push([
        `Peer: BullMQ ${peer.bullmq} + Redis, against workpull's job queue`,
        `${n0(lowestQueue)} jobs/s (lowest job queue row above)`,
        `${n0(peer.best.jobsPerSecond)} jobs/s`,
        x(lowestQueue / peer.best.jobsPerSecond),
      ]);
    }
  }
  const deno = results.runtimes.deno;
  if (deno?.durable) {
    const d = deno.durable;
    rows.push([
      "Durable: Deno KV file, over WebSocket, Deno",
      `${n0(d.endToEnd.median)} jobs/s`,
      `raw KV commits: ${n0(d.rawSingle.median)} jobs/s one job per commit, ${
        n0(d.rawBatch.median)
      } jobs/s 100 per commit`,
      `${x(d.endToEnd.median / d.rawSingle.median)}`,
    ]);
    if (d.remote) {
      rows.push([
        `Durable: Deno KV file, jobs posted to \`POST /jobs\` by another process, Deno`,
        `${n0(d.remote.median)} jobs/s`,
        `raw KV commits, 100 jobs per commit: ${n0(d.rawBatch.median)} jobs/s`,
        x(d.remote.median / d.rawBatch.median),
      ]);
    }
  }
  if (deno?.backlog) {
    const b = deno.backlog;
    rows.push([
      `Backlog ingest: \`POST /jobs\` (batches of ${b.ingestProducer.batch}) into a Deno KV file, no worker, Deno`,
      `${n0(b.ingest.median)} jobs/s`,
      `raw KV commits of the same writes, 100 jobs per commit: ${n0(b.rawIngest.median)} jobs/s`,
      x(b.ingest.median / b.rawIngest.median),
    ]);
    rows.push([
      "Backlog drain: Deno KV file → 1 worker process × 4 endpoints, Deno",
      `${n0(b.drain.median)} jobs/s`,
      `raw KV commits of the same writes, 100 jobs per commit: ${n0(b.rawDrain.median)} jobs/s`,
      x(b.drain.median / b.rawDrain.median),
    ]);
  }
  if (deno?.cluster) {
    const c = deno.cluster;
    const [one, ...more] = c.throughput;
    for (const t of more) {
      rows.push([
        `Shared flow: ${t.instances} instances × ${c.endpointsPerInstance} endpoints on one Deno KV file, Deno`,
        `${n0(t.median)} jobs/s`,
        `1 instance: ${n0(one.median)} jobs/s`,
        x(t.median / one.median),
      ]);
    }
    const k = c.takeover.median;
    rows.push([
      `Shared flow: instance SIGKILLed holding ${k.jobs} jobs (lease ${
        ms(c.takeover.leaseTtl, 0)
      }, renewed every ${ms(c.takeover.renewInterval, 0)}), Deno`,
      `taken over after ${ms(k.takeover, 0)}, first redelivery ${ms(k.firstRedelivery, 0)}`,
      "",
      "",
    ]);
  }
  for (const c of natsComparisons(results)) {
    rows.push([c.measure, c.workpull ? `${n0(c.workpull)} jobs/s` : "", c.peer, c.ratio]);
  }
  for (const [name, r] of runtimes) {
    const label = runtimeLabel(name);
    if (r.latency) {
      rows.push([
        `Latency submit → handler start at ${n0(r.latency.rate)} jobs/s (half the max), ${label}`,
        `p50 ${ms(r.latency.median.p50, 2)}, p99 ${ms(r.latency.median.p99)}, p99.9 ${
          ms(r.latency.median.p999)
        }, max ${ms(r.latency.median.max)}`,
        `idle host: a 1 ms timer late by up to ${ms(r.latency.hostTimer.max, 1)}${
          kernelThreadNote(r.latency)
        }`,
        "",
      ]);
    }
  }
  for (const [name, r] of runtimes) {
    const label = runtimeLabel(name);
    if (r.failover) {
      const k = r.failover.kill.median;
      rows.push([
        `Worker process SIGKILLed holding ${k.jobs} jobs, ${label}`,
        `first redelivery ${ms(k.firstRedelivery)}, all confirmed ${ms(k.allConfirmed, 0)}`,
        "",
        "",
      ]);
      if (r.failover.silent) {
        rows.push([
          `Silent (half-open) worker, default liveness, ${label}`,
          `detected after ${(r.failover.silent.median.detected / 1000).toFixed(1)} s`,
          `bound ${(r.failover.silent.bound / 1000).toFixed(1)} s`,
          "",
        ]);
      }
    }
  }
  for (const point of deno?.memory?.points ?? []) {
    rows.push([
      `Controller heap per pending job, ${n0(point.pending)} pending`,
      `${point.beyondPayload.toFixed(0)} bytes beyond the payload`,
      "",
      "",
    ]);
  }
  if (results.clientSize) {
    rows.push([
      "Browser worker client (`client.ts`, minified)",
      `${kb(results.clientSize.gzip)} gzip`,
      "",
      "",
    ]);
  }
  const missed = results.targets.filter((t) => !t.met);
  return [
    "## Performance",
    "",
    `Measured on ${
      results.generatedAt.slice(0, 10)
    } by a full run of \`${results.command}\`: medians of alternating rounds, each figure next to its baseline measured in the same run, on a shared ${m.cpus}-core ${
      String(m.os).split(" ")[0]
    } machine (${m.cpuModel}) that was quiet during the run (load average ${m.loadStart} at the start, ${m.loadEnd} at the end, the benchmark's own processes included; Deno ${v.deno}, Bun ${v.bun}, Node ${v.node}; loopback only). ` +
    "Figures follow the host's processor: machines of this kind have come with AMD EPYC and " +
    "Intel Xeon processors, whose rates differ several-fold, and some ratios with them (see " +
    "[bench/README.md](bench/README.md)); compare a rerun with a run on the same processor. " +
    "Baselines: a raw WebSocket server and client exchanging one JSON job message and one JSON " +
    "confirmation per job with the same window (100) and layout; the batched raw WebSocket " +
    "limit (workpull's batching and cumulative confirmation, no queue logic); raw Deno KV " +
    "commits of the adapter's own writes; for the job queue (a `JobQueue` on a `MemoryJobStore`, " +
    "jobs added with `addMany`), workpull's controller alone in the same rounds. The throughput " +
    "and durable runs give workpull's producer its jobs with `submitMany` (1,000 a call, 4 calls " +
    "waiting at a time); the latency " +
    "runs submit each job with " +
    "`submit()`, and halve the maximum measured that way. Details, every round's samples and ratios, the load " +
    "on the machine and the methods: [bench/results.md](bench/results.md).",
    "",
    markdownTable(["", "workpull", "baseline", "ratio"], rows),
    "",
    missed.length === 0
      ? `All ${results.targets.length} targets of the benchmark issues are met in this run.`
      // A list: wrapped prose could start a line with ">=", which Markdown reads as a quote.
      : `Met ${results.targets.length - missed.length} of ${results.targets.length} targets ` +
        `of the benchmark issues; missed:\n\n${
          missed.map((t) => `- ${t.target.trim()} (issue #${t.issue ?? 5}): ${t.measured}`)
            .join("\n")
        }`,
    "",
    `Reproduce (${
      m.minutes ?? "a few"
    } minutes here; the BullMQ peer needs \`redis-server\`, the NATS peer \`nats-server\` (Debian packages), both \`node\`, and each is skipped without them):`,
    "",
    "```sh",
    "npm ci",
    "deno task bench        # writes bench/results.json and bench/results.md",
    "deno task bench:quick  # a quick look; prints only",
    "```",
    "",
  ].join("\n");
}

/**
 * `; during the rounds kdamond.0 120 ms in 18 wake-ups (6.7 ms each); the controller's thread
 * waited for a core 13 % of the rounds, a worker's 14 %`: the busiest kthread and the run-queue
 * waits of the benchmark's own threads.
 */
export function kernelThreadNote(latency: LatencyResult): string {
  const top = latency.kernelThreads?.[0];
  const waits = latency.runQueue;
  const percent = (ms: number) => `${Math.round(ms / (waits?.wallMs ?? 1) * 100)} %`;
  return (top ? `; during the rounds ${describeKernelThreads([top])}` : "") +
    (waits
      ? `; the controller's thread waited for a core ${
        percent(waits.controller.waitMs)
      } of the rounds, a worker's ${percent(waits.workers.waitMs)}`
      : "");
}
