/**
 * Crash-recovery time: SIGKILL of a controller process, a new process started at once on the
 * same files, and the first redelivery (the handler of a job the dead process had dispatched
 * ran in the new one). The process is `tests/fixtures/durable_controller_process.ts`: a
 * controller on a Deno KV file, the example file-backed producer, three in-process workers.
 *
 * The first process's handlers never finish, so when it dies 3 × `window` accepted jobs are
 * dispatched and unconfirmed (60 by default). Times come from the processes' own clocks
 * (wall-clock ms, sub-ms precision).
 *
 *   deno run -A --unstable-kv bench/crash_recovery.ts [rounds=5] [window=20]
 *   bun bench/crash_recovery.ts [rounds=5] [window=20]
 */

import { join } from "node:path";
import process from "node:process";
import {
  ControllerProcess,
  removeDir,
  results,
  runtime,
  scenarioDir,
} from "../tests/fixtures/durable_support.ts";

const rounds = Number(process.argv[2] ?? 5);
const window = Number(process.argv[3] ?? 20);
const now = () => performance.timeOrigin + performance.now();

interface Sample {
  /** SIGKILL sent → the process reaped. */
  reaped: number;
  /** New process spawned → its queue loaded (runtime start, KV open, load). */
  loaded: number;
  /** Queue loaded → the first reloaded job's handler ran. */
  redelivered: number;
  /** SIGKILL sent → the first redelivery. */
  total: number;
  /** Jobs the reload returned. */
  reloaded: number;
}

async function round(): Promise<Sample> {
  const inFlight = 3 * window;
  const dir = scenarioDir(inFlight + 100);
  const config = { dir, workers: 3, window, maxBatch: 1000 };
  const first = new ControllerProcess({
    ...config,
    events: join(dir, "events-1.jsonl"),
    run: 1,
    handlerDelayMs: 3_600_000,
  });
  let second: ControllerProcess | undefined;
  try {
    const accepted = () => first.of("stored").reduce((n, e) => n + e.jobs.length, 0);
    await first.whileRunning(
      () => accepted() >= inFlight && first.of("accepted").length === first.of("stored").length,
      `${inFlight} jobs dispatched`,
      60_000,
    );
    const killed = now();
    await first.kill();
    const reaped = now();
    second = new ControllerProcess({ ...config, events: join(dir, "events-2.jsonl"), run: 2 });
    const spawned = now();
    const { t: loadedAt, unconfirmed } = await second.until("loaded");
    await second.whileRunning(() => results(dir).length > 0, "the first redelivery");
    const redelivery = results(dir)[0];
    if (!unconfirmed.includes(redelivery.id)) throw new Error("the first job run was not reloaded");
    return {
      reaped: reaped - killed,
      loaded: loadedAt - spawned,
      redelivered: redelivery.t - loadedAt,
      total: redelivery.t - killed,
      reloaded: unconfirmed.length,
    };
  } finally {
    await first.kill();
    await second?.kill();
    removeDir(dir);
  }
}

const samples: Sample[] = [];
for (let i = 0; i < rounds; i++) samples.push(await round());
const median = (pick: (s: Sample) => number) =>
  samples.map(pick).toSorted((a, b) => a - b)[samples.length >> 1];
const ms = (value: number) => `${value.toFixed(1)} ms`;
console.log(`crash recovery on ${runtime}, ${rounds} rounds, medians:`);
console.log(`  SIGKILL → process reaped            ${ms(median((s) => s.reaped))}`);
console.log(`  spawn → queue loaded                ${ms(median((s) => s.loaded))}`);
console.log(`  loaded → first redelivery ran       ${ms(median((s) => s.redelivered))}`);
console.log(`  SIGKILL → first redelivery (total)  ${ms(median((s) => s.total))}`);
console.log(`  jobs reloaded                       ${median((s) => s.reloaded)}`);
console.log(JSON.stringify({ runtime, rounds, samples }));
process.exit(0);
