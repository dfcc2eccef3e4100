/**
 * The targets of issue #15 ("a lead that reproduces"), checked against a run, and workpull's
 * comparison with the NATS JetStream peer.
 *
 * - throughput in memory over WebSocket ≥ 1.5x the per-job raw WebSocket baseline (median of
 *   the per-round ratios) in every layout, and no round below 1.2x;
 * - ≥ 0.7x the batched raw WebSocket limit in every layout;
 * - durable on a Deno KV file (in-process producer) ≥ 0.9x raw KV at 100 jobs per commit;
 * - ≥ 5x NATS JetStream with memory storage (every layout of workpull in memory) and ≥ 2x with
 *   file storage (workpull on a Deno KV file, in rounds run beside NATS's when the run has them);
 * - latency at half the maximum throughput: p99 ≤ 5 ms and p99.9 ≤ 20 ms, Deno and Bun.
 *
 * @module
 */

import {
  kernelThreadNote,
  ms,
  n0,
  type Results,
  type RuntimeResults,
  type Target,
  x,
} from "./report.ts";
import { runtimeLabel } from "./runtime.ts";
import { median } from "./stats.ts";

/** workpull against one NATS storage type. */
export interface NatsComparison {
  readonly measure: string;
  /** workpull's median (absent when the run did not measure it). */
  readonly workpull?: number;
  /** The peer's figure, as text. */
  readonly peer: string;
  /**
   * workpull / NATS as text ("" without a workpull figure): the median of `perRound` when the
   * rounds are paired, else of the medians.
   */
  readonly ratio: string;
  /** workpull's median / each NATS round, or each paired round's workpull / NATS. */
  readonly perRound: number[];
  /** Whether each NATS round has its own workpull round beside it (`perRound` pairs them). */
  readonly paired: boolean;
}

/** The lowest workpull in-memory throughput of the run, and where it was measured. */
function lowestInMemory(results: Results): { value: number; where: string } | undefined {
  let lowest: { value: number; where: string } | undefined;
  for (const [name, r] of Object.entries(results.runtimes) as [string, RuntimeResults][]) {
    for (const pair of r.throughput?.pairs ?? []) {
      if (!lowest || pair.workpull.median < lowest.value) {
        lowest = { value: pair.workpull.median, where: `${runtimeLabel(name)} ${pair.topology}` };
      }
    }
  }
  return lowest;
}

/**
 * NATS memory storage against workpull in memory (its lowest throughput row) and NATS file
 * storage against workpull on a Deno KV file (in-process producer): the rounds run beside each
 * file round when the run has them, else the durable scenario's median. Empty without NATS
 * figures.
 */
export function natsComparisons(results: Results): NatsComparison[] {
  const nats = results.nats;
  if (!nats || !("memory" in nats)) return [];
  const peer = `NATS JetStream ${nats.natsServer}`;
  const compare = (
    measure: string,
    workpull: number | undefined,
    series: typeof nats.memory,
  ): NatsComparison => ({
    measure,
    workpull,
    peer: `${peer}: ${n0(series.median)} jobs/s`,
    ratio: workpull ? x(workpull / series.median) : "",
    perRound: workpull ? series.samples.map((sample) => workpull / sample) : [],
    paired: false,
  });
  const memory = lowestInMemory(results);
  const fileMeasure =
    `Peer: NATS JetStream, file storage, ${nats.tuning.workers} worker processes, vs workpull on a Deno KV file`;
  const beside = nats.besideFile;
  const file: NatsComparison = beside && beside.ratios.length > 0
    ? {
      measure: `${fileMeasure} (a round of each side by side)`,
      workpull: beside.median,
      peer: `${peer}: ${n0(nats.file.median)} jobs/s`,
      ratio: x(median(beside.ratios)),
      perRound: beside.ratios,
      paired: true,
    }
    : compare(fileMeasure, results.runtimes.deno?.durable?.endToEnd.median, nats.file);
  return [
    compare(
      `Peer: NATS JetStream, memory storage, ${nats.tuning.workers} worker processes, vs workpull in memory${
        memory ? ` (its lowest row, ${memory.where})` : ""
      }`,
      memory?.value,
      nats.memory,
    ),
    file,
  ];
}

/** The targets of issue #15 that this run measured. */
export function performanceTargets(results: Results): Target[] {
  const out: Target[] = [];
  const add = (target: string, measured: string, met: boolean) =>
    out.push({ target, measured, met, issue: 15 });
  const runtimes = Object.entries(results.runtimes) as [string, RuntimeResults][];
  const rounds = (values: readonly number[]) => values.map((v) => v.toFixed(2)).join(", ");
  for (const [name, r] of runtimes) {
    for (const pair of r.throughput?.pairs ?? []) {
      const worst = Math.min(...pair.ratios);
      add(
        `Throughput (${name}, ${pair.topology}) >= 1.5x the per-job raw WebSocket baseline, no round below 1.2x`,
        `${x(pair.ratio)}; rounds ${rounds(pair.ratios)}`,
        pair.ratio >= 1.5 && worst >= 1.2,
      );
      if (pair.batched) {
        add(
          `Throughput (${name}, ${pair.topology}) >= 0.7x the batched raw WebSocket limit`,
          `${x(pair.batchedRatio)} (${n0(pair.workpull.median)} vs ${
            n0(pair.batched.median)
          } jobs/s); rounds ${rounds(pair.batchedRatios)}`,
          pair.batchedRatio >= 0.7,
        );
      }
    }
  }
  const durable = results.runtimes.deno?.durable;
  if (durable?.ratios) {
    const ratio = median(durable.ratios.endToEnd);
    add(
      "Durable (Deno KV file, in-process producer) >= 0.9x raw KV at 100 jobs per commit",
      `${x(ratio)} (${n0(durable.endToEnd.median)} vs ${
        n0(durable.rawBatch.median)
      } jobs/s); rounds ${rounds(durable.ratios.endToEnd)}`,
      ratio >= 0.9,
    );
  }
  const nats = results.nats;
  if (nats && "memory" in nats) {
    for (const [name, r] of runtimes) {
      for (const pair of r.throughput?.pairs ?? []) {
        const ratio = pair.workpull.median / nats.memory.median;
        add(
          `Throughput in memory (${name}, ${pair.topology}) >= 5x NATS JetStream, memory storage`,
          `${x(ratio)} (${n0(pair.workpull.median)} vs ${n0(nats.memory.median)} jobs/s); ` +
            `per NATS round ${rounds(nats.memory.samples.map((v) => pair.workpull.median / v))}`,
          ratio >= 5,
        );
      }
    }
    const beside = nats.besideFile;
    if (beside && beside.ratios.length > 0) {
      const ratio = median(beside.ratios);
      add(
        "Durable on a Deno KV file >= 2x NATS JetStream, file storage",
        `${x(ratio)} (rounds side by side: workpull ${beside.samples.map(n0).join(", ")}, NATS ${
          nats.file.samples.map(n0).join(", ")
        } jobs/s); per round ${rounds(beside.ratios)}`,
        ratio >= 2,
      );
    } else if (durable) {
      const ratio = durable.endToEnd.median / nats.file.median;
      add(
        "Durable on a Deno KV file >= 2x NATS JetStream, file storage",
        `${x(ratio)} (${n0(durable.endToEnd.median)} vs ${n0(nats.file.median)} jobs/s); ` +
          `per NATS round ${rounds(nats.file.samples.map((v) => durable.endToEnd.median / v))}`,
        ratio >= 2,
      );
    }
  }
  for (const [name, r] of runtimes) {
    if (!r.latency) continue;
    const m = r.latency.median;
    // Beside the tail, how late the idle host woke a timer.
    const host = `; idle host's 1 ms timer late by up to ${ms(r.latency.hostTimer.max, 1)}${
      kernelThreadNote(r.latency)
    }`;
    add(
      `Latency at 50% of max throughput (${name}): p99 <= 5 ms`,
      `p99 ${ms(m.p99, 2)} (rounds ${
        r.latency.rounds.map((d) => d.p99.toFixed(2)).join(", ")
      })${host}`,
      m.p99 <= 5,
    );
    add(
      `Latency at 50% of max throughput (${name}): p99.9 <= 20 ms`,
      `p99.9 ${ms(m.p999, 2)} (rounds ${
        r.latency.rounds.map((d) => d.p999.toFixed(2)).join(", ")
      })${host}`,
      m.p999 <= 20,
    );
  }
  return out;
}
