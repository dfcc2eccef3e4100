/**
 * The bounded drain: after the faults and the producer have stopped, wait until every job the
 * producer got acknowledged has finished on some worker, or until the deadline.
 *
 * It follows the worker journals as they grow (including those of workers started during the
 * drain) and keeps one bit per job number. A drain that runs out of time is reported with the
 * number of acknowledged jobs still unfinished; the soak then fails.
 *
 * @module
 */

import { journals } from "./evidence.ts";
import { JournalTail } from "./journal.ts";
import { jobNumber, type SoakPaths } from "./records.ts";

/** How the drain went. */
export interface DrainResult {
  readonly complete: boolean;
  /** Acknowledged jobs not finished when the drain ended. */
  readonly remaining: number;
  readonly ms: number;
}

/** Wait until every job with `acked[n] === 1` has an `end` line, at most `deadline` ms. */
export async function drain(
  paths: SoakPaths,
  acked: Uint8Array,
  deadline: number,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<DrainResult> {
  const started = performance.now();
  const finished = new Uint8Array(acked.length);
  const tails = new Map<string, JournalTail>();
  let remaining = 0;
  for (let n = 0; n < acked.length; n++) remaining += acked[n];
  let lastReport = started;
  for (;;) {
    for (const file of journals(paths.workers)) {
      let tail = tails.get(file);
      if (!tail) tails.set(file, tail = new JournalTail(file));
      tail.read((record) => {
        if (record.ev !== "end") return;
        const n = jobNumber(record.id as string);
        if (n > 0 && n < acked.length && finished[n] === 0) {
          finished[n] = 1;
          remaining -= acked[n];
        }
      });
    }
    const ms = Math.round(performance.now() - started);
    if (remaining === 0) return { complete: true, remaining, ms };
    if (ms >= deadline || signal.aborted) return { complete: false, remaining, ms };
    if (performance.now() - lastReport >= 5000) {
      lastReport = performance.now();
      log(`drain: ${remaining} acknowledged jobs not finished yet`);
    }
    await new Promise((resolve) => setTimeout(resolve, 200));
  }
}
