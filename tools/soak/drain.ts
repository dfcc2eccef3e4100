/**
 * The bounded drain: after the faults and the producer have stopped, wait until every job the
 * producer got acknowledged has finished on some worker, for as long as handlers keep finishing.
 *
 * It follows the worker journals as they grow (including those of workers started during the
 * drain) and keeps one bit per job number. The drain ends incomplete when **no handler has
 * finished anything for `--drain` seconds** (it *stalled*: nothing moves), or after
 * {@linkcode DRAIN_CAP_FACTOR} times that in all (it *ran out*), and is reported with the number of
 * acknowledged jobs still unfinished; the soak then fails. Any run that ends counts as progress,
 * a rerun or an unacknowledged job too: a job the drain waits for may sit behind a long rerun, so
 * counting only its own kind could see two long jobs in a row (40 s) as a stall, while some
 * handler finishing at least every 20 s (the longest job) means the workers are working.
 *
 * Why progress and not one deadline: a worker endpoint runs its window (50 jobs) one at a time,
 * and one job in 1,000 takes 5–20 s. After a controller restart the reloaded backlog starts with
 * the oldest unconfirmed jobs, which are mostly long jobs that faults cut short again and again,
 * and the first endpoints to ask get a whole window of them: a chain of four or five long jobs on
 * one endpoint, a minute or more of work, while every job behind them waits its turn at a live
 * worker. A fixed 60 s drain called those jobs lost although they were running down, one long
 * job every 20 s at worst (seed 8, `--minutes 2 --rate 300`: 60 "lost", every one of them still
 * unconfirmed in the queue at the end; reruns of the same seed drained in 84 and 116 s, one
 * endpoint running seven long jobs in a row). A job that truly stopped moving still fails the
 * drain, one `--drain` after the last run that finished.
 *
 * @module
 */

import { journals } from "./evidence.ts";
import { JournalTail } from "./journal.ts";
import { jobNumber, type SoakPaths } from "./records.ts";

/** The drain never lasts more than this many times its stall bound (`--drain`). */
export const DRAIN_CAP_FACTOR = 10;

/** How the drain went. */
export interface DrainResult {
  readonly complete: boolean;
  /** Acknowledged jobs not finished when the drain ended. */
  readonly remaining: number;
  readonly ms: number;
  /**
   * Why an incomplete drain ended: no run finished for the stall bound, or the
   * drain reached its cap while jobs were still finishing. Absent when complete (and in journals
   * of soaks from before it was recorded).
   */
  readonly ended?: "stalled" | "capped";
  /** The longest time without any run finishing, ms. */
  readonly longestQuietMs?: number;
}

/** What one look at the journals decided. */
export type DrainVerdict =
  | { readonly kind: "waiting" }
  | { readonly kind: "complete" }
  | { readonly kind: "stalled" }
  | { readonly kind: "capped" };

/**
 * The drain's decision, apart from files and timers: fed the time, how many acknowledged jobs are
 * still unfinished and how many runs have ended so far at each look, it says whether to go on.
 */
export class DrainWatch {
  readonly #started: number;
  readonly #stallMs: number;
  readonly #capMs: number;
  #ended = 0;
  #movedAt: number;
  #longestQuietMs = 0;

  /**
   * A drain started at `started` (ms), ending incomplete after `stallMs` without a run ending or
   * after `capMs` in all.
   */
  constructor(started: number, stallMs: number, capMs: number) {
    this.#started = started;
    this.#movedAt = started;
    this.#stallMs = stallMs;
    this.#capMs = capMs;
  }

  /** The longest stretch without a run ending so far, ms. */
  get longestQuietMs(): number {
    return this.#longestQuietMs;
  }

  /**
   * At `now`, `remaining` acknowledged jobs are unfinished and `ended` runs (of any job) have
   * ended since the drain began: go on or stop?
   */
  look(now: number, remaining: number, ended: number): DrainVerdict {
    if (ended > this.#ended) {
      this.#longestQuietMs = Math.max(this.#longestQuietMs, now - this.#movedAt);
      this.#movedAt = now;
      this.#ended = ended;
    }
    if (remaining === 0) return { kind: "complete" };
    const quiet = now - this.#movedAt;
    this.#longestQuietMs = Math.max(this.#longestQuietMs, quiet);
    if (quiet >= this.#stallMs) return { kind: "stalled" };
    if (now - this.#started >= this.#capMs) return { kind: "capped" };
    return { kind: "waiting" };
  }
}

/** The time source and pause of {@linkcode drain} (tests pass simulated ones). */
export interface DrainClock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

const realClock: DrainClock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/**
 * Wait until every job with `acked[n] === 1` has an `end` line; end incomplete once `stallMs`
 * pass without any `end` line, or after {@linkcode DRAIN_CAP_FACTOR} × `stallMs` in all.
 */
export async function drain(
  paths: SoakPaths,
  acked: Uint8Array,
  stallMs: number,
  signal: AbortSignal,
  log: (line: string) => void,
  clock: DrainClock = realClock,
): Promise<DrainResult> {
  const started = clock.now();
  const finished = new Uint8Array(acked.length);
  const tails = new Map<string, JournalTail>();
  let remaining = 0;
  for (let n = 0; n < acked.length; n++) remaining += acked[n];
  const watch = new DrainWatch(started, stallMs, DRAIN_CAP_FACTOR * stallMs);
  let ended = 0;
  let lastReport = started;
  for (;;) {
    for (const file of journals(paths.workers)) {
      let tail = tails.get(file);
      if (!tail) tails.set(file, tail = new JournalTail(file));
      tail.read((record) => {
        if (record.ev !== "end") return;
        ended += 1;
        const n = jobNumber(record.id as string);
        if (n > 0 && n < acked.length && finished[n] === 0) {
          finished[n] = 1;
          remaining -= acked[n];
        }
      });
    }
    const now = clock.now();
    const verdict = watch.look(now, remaining, ended);
    const ms = Math.round(now - started);
    const longestQuietMs = Math.round(watch.longestQuietMs);
    if (verdict.kind === "complete") return { complete: true, remaining, ms, longestQuietMs };
    if (verdict.kind !== "waiting") {
      return { complete: false, remaining, ms, ended: verdict.kind, longestQuietMs };
    }
    if (signal.aborted) return { complete: false, remaining, ms, longestQuietMs };
    if (now - lastReport >= 5000) {
      lastReport = now;
      log(`drain: ${remaining} acknowledged jobs not finished yet`);
    }
    await clock.sleep(200);
  }
}
