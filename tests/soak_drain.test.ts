/**
 * The soak's drain on a simulated clock: worker journals grow while the drain sleeps (each sleep
 * advances the clock and appends the `end` lines due by then), so nothing waits for real time.
 *
 * The story behind it (seed 8, `--minutes 2 --rate 300`): the controller was killed 1 s before the
 * load ended; its restart reloaded 350 unconfirmed jobs, oldest first, and the first two endpoints
 * to ask got a window each that began with five long jobs (10-19 s). They ran them one after
 * another, a job finishing every 20 s at worst, for more than 60 s; the drain's fixed 60 s
 * deadline ended it there and the verdict called the 60 jobs still behind them lost, although
 * every one of them was still unconfirmed in the queue. The drain now ends incomplete only when no
 * run has ended for `--drain`, or at ten times that in all. Runs under Deno and Bun (`node:fs`
 * only).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { drain, DRAIN_CAP_FACTOR, type DrainClock, DrainWatch } from "../tools/soak/drain.ts";
import { SoakPaths } from "../tools/soak/records.ts";

/** A clock whose sleeps advance it and append the worker journal lines due by then. */
class Story implements DrainClock {
  readonly paths: SoakPaths;
  #now = 0;
  /** `end` lines still to write: [time ms, job number], in time order. */
  readonly #ends: [number, number][];

  constructor(readonly dir: string, ends: [number, number][]) {
    this.paths = new SoakPaths(dir);
    mkdirSync(this.paths.workers, { recursive: true });
    this.#ends = [...ends].sort((a, b) => a[0] - b[0]);
  }

  now(): number {
    return this.#now;
  }

  sleep(ms: number): Promise<void> {
    this.#now += ms;
    while (this.#ends.length > 0 && this.#ends[0][0] <= this.#now) {
      const [t, n] = this.#ends.shift()!;
      const record = { ev: "end", id: `j${n}`, ep: "w4#3", pid: 204, t };
      appendFileSync(join(this.paths.workers, "w4.204.jsonl"), JSON.stringify(record) + "\n");
    }
    return Promise.resolve();
  }
}

/** acked[n] = 1 for n = 1..count. */
function acked(count: number): Uint8Array {
  const bits = new Uint8Array(count + 1);
  bits.fill(1, 1);
  return bits;
}

async function drained(ends: [number, number][], jobs: number, stallMs: number) {
  const dir = mkdtempSync(join(tmpdir(), "soak-drain-"));
  try {
    const story = new Story(dir, ends);
    const signal = new AbortController().signal;
    return await drain(story.paths, acked(jobs), stallMs, signal, () => {}, story);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

test("a drain waits past --drain while jobs keep finishing: a chain of long jobs ends it complete", async () => {
  // Five long jobs one after another on one endpoint, then the short ones behind them at once.
  const ends: [number, number][] = [[14_500, 1], [26_200, 2], [40_600, 3], [49_900, 4]];
  for (let n = 5; n <= 20; n++) ends.push([69_200 + n, n]);
  const result = await drained(ends, 20, 60_000);
  assert.equal(result.complete, true);
  assert.equal(result.remaining, 0);
  assert.ok(result.ms >= 69_200 && result.ms < 70_000, `ended at ${result.ms} ms`);
  assert.ok(result.longestQuietMs! < 60_000 && result.longestQuietMs! >= 19_000);
});

test("a drain whose jobs stop moving fails one --drain after the last one finished", async () => {
  const result = await drained([[5_000, 1], [12_000, 2]], 5, 60_000);
  assert.equal(result.complete, false);
  assert.equal(result.ended, "stalled");
  assert.equal(result.remaining, 3);
  assert.ok(result.ms >= 72_000 && result.ms < 72_500, `ended at ${result.ms} ms`);
});

test("a drain that keeps finishing jobs ends at its cap, ten times --drain", async () => {
  const ends: [number, number][] = [];
  for (let n = 1; n <= 100; n++) ends.push([n * 1_000, n]);
  const result = await drained(ends, 100, 6_000);
  assert.equal(result.complete, false);
  assert.equal(result.ended, "capped");
  assert.equal(DRAIN_CAP_FACTOR * 6_000, 60_000);
  assert.ok(result.ms >= 60_000 && result.ms < 60_500, `ended at ${result.ms} ms`);
  assert.equal(result.remaining, 40);
});

test("a rerun that ends counts as progress: a job behind two long ones is waited for", async () => {
  // j1 finished before the drain; its long rerun (35 s) and then j2 (30 s) run on one endpoint:
  // 65 s without an acknowledged job finishing, never 60 s without a run ending.
  const ends: [number, number][] = [[0, 1], [35_000, 1], [65_000, 2]];
  const result = await drained(ends, 2, 60_000);
  assert.equal(result.complete, true);
  assert.ok(result.ms >= 65_000 && result.ms < 65_500, `ended at ${result.ms} ms`);
});

test("the drain's decision: quiet time counts from the last run that ended", () => {
  const watch = new DrainWatch(0, 60_000, 600_000);
  assert.equal(watch.look(59_000, 3, 0).kind, "waiting");
  assert.equal(watch.look(59_500, 2, 1).kind, "waiting"); // a run ended: the stall bound restarts
  assert.equal(watch.look(119_000, 2, 1).kind, "waiting");
  assert.equal(watch.look(119_200, 2, 2).kind, "waiting"); // a rerun: nothing left, but moving
  assert.equal(watch.look(179_200, 2, 2).kind, "stalled");
  assert.equal(watch.longestQuietMs, 60_000);
  assert.equal(new DrainWatch(0, 60_000, 600_000).look(10, 0, 1).kind, "complete");
});
