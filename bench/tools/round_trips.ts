/**
 * Where the throughput scenario's time goes between the processes: workpull and the batched raw
 * WebSocket limit side by side, alternating rounds, each round timed from inside its worker
 * processes (`bench/lib/round_trip_probe.ts`). For each, per round: the rate, the round trip (a
 * top-up `request` sent → the next `jobs` frame received) and the hold (a `jobs` frame received
 * → the next `request` sent), as p50 / p90 / p99 in ms; and the CPU time per job of this process
 * (the controller, or the batched server) and of the worker processes together, all threads,
 * beside how busy the whole machine was (Linux `/proc`). At a window of 100 topped up at half, a
 * socket has two frames of 50 on the way, so a socket's rate is at most about 100 jobs per round
 * trip; the CPU figures show which process spends the time the round trips wait for.
 * For workpull it also times the controller's side (wrapping the links it is given): its service
 * time, from a top-up `request` handed to it to the next `jobs` frame it sends on that link (what
 * it does for a request: confirm, take the producer's next batch, dispatch, encode), and the gap
 * between one frame's handling and the next frame's arrival (a gap near zero: frames queued).
 * Both run 1,000,000 jobs (`WARMUP_JOBS`) unmeasured first, alternating: workpull is still
 * speeding up before that. With `--scripted` a third system runs in the same rounds: workpull's
 * worker processes against the scripted controller (`lib/batched_raw.ts` speaking workpull's
 * protocol, with no pool, tables or producer), the rate workpull's worker side and the wire allow
 * with a controller that costs nothing.
 *
 *   deno run -A bench/tools/round_trips.ts [jobs=100000] [rounds=3] [processes=4] [perProcess=1] [--scripted]
 *
 * The runtime is this process's, for the server and the worker processes alike (`bun
 * bench/tools/round_trips.ts …` measures Bun).
 *
 * @module
 */

import process from "node:process";
import { BatchedRawSetup, ScriptedControllerSetup } from "../lib/batched_raw.ts";
import { commandLine, numberArg } from "../lib/cli.ts";
import { machineCpuTicks, MS_PER_TICK, processCpuTicks } from "../lib/machine_load.ts";
import type { Child, Report } from "../lib/proc.ts";
import { runtimeVersion } from "../lib/runtime.ts";
import { type Setup, warmUp, WorkpullSetup } from "../lib/setups.ts";
import type { WorkPullingController } from "../../mod.ts";
import { observeLinks } from "../lib/link_observer.ts";
import { distribution } from "../lib/stats.ts";

const { positionals, values } = commandLine({
  usage:
    "deno run -A bench/tools/round_trips.ts [jobs] [rounds] [processes] [perProcess] [--scripted]",
  summary:
    "Round trips and holds seen by the worker processes, workpull beside the batched raw WebSocket limit.",
  positionals: [
    { name: "jobs", help: "jobs per round (default 100000)" },
    { name: "rounds", help: "rounds of each (default 3)" },
    { name: "processes", help: "worker processes (default 4)" },
    { name: "perProcess", help: "sockets per worker process (default 1)" },
  ],
  flags: {
    scripted: {
      kind: "switch",
      help:
        "also workpull's worker processes against the scripted controller (the batched server speaking workpull's protocol: no controller)",
    },
  },
});
const scriptedToo = values.scripted === true;
const jobs = numberArg("jobs", positionals[0], 100_000);
const rounds = numberArg("rounds", positionals[1], 3);
const topology = {
  processes: numberArg("processes", positionals[2], 4),
  perProcess: numberArg("perProcess", positionals[3], 1),
};
const WINDOW = 100;

process.env.WORKPULL_BENCH_ROUND_TRIPS = "1"; // the worker processes inherit it

/** Every worker process's samples since its last report. */
async function collect(
  children: readonly Child[],
): Promise<{ rtt: number[]; hold: number[]; jobsFrames: number; sent: number }> {
  const reports = await Promise.all(children.map((child) => {
    const report = child.next((r: Report) => r.ev === "round-trips", "round trips", 10_000);
    child.command({ cmd: "round-trips" });
    return report;
  }));
  return {
    rtt: reports.flatMap((report) => report.rtt as number[]),
    hold: reports.flatMap((report) => report.hold as number[]),
    jobsFrames: reports.reduce((sum, report) => sum + (report.jobsFrames as number), 0),
    sent: reports.reduce((sum, report) => sum + (report.sent as number), 0),
  };
}

const spread = (samples: number[]) => {
  const { p50, p90, p99 } = distribution(samples);
  return `${p50.toFixed(3)} / ${p90.toFixed(3)} / ${p99.toFixed(3)}`;
};

/** CPU time (user and system, every thread) process `pid` has used, ms. */
const cpuMs = (pid: number | "self") => processCpuTicks(pid) * MS_PER_TICK;

async function round(name: string, setup: Setup, children: readonly Child[]): Promise<void> {
  await collect(children); // drop what came before this round
  probe.service = [];
  probe.gaps = [];
  probe.last = 0;
  const workersMs = () => children.reduce((sum, child) => sum + cpuMs(child.pid), 0);
  const server0 = cpuMs("self");
  const workers0 = workersMs();
  const machine0 = machineCpuTicks();
  const rate = await setup.run(jobs);
  const server = (cpuMs("self") - server0) * 1000 / jobs;
  const workers = (workersMs() - workers0) * 1000 / jobs;
  const machine1 = machineCpuTicks();
  const busy = (machine1.busy - machine0.busy) / (machine1.total - machine0.total);
  const { rtt, hold, jobsFrames, sent } = await collect(children);
  const { service, gaps } = probe; // reset when the next round starts
  console.log(
    `  ${name.padEnd(13)} ${Math.round(rate).toLocaleString("en-US").padStart(9)} jobs/s; ` +
      `round trip ${spread(rtt)} ms (${rtt.length}); hold ${spread(hold)} ms; CPU µs/job ` +
      `server ${server.toFixed(2)}, workers ${workers.toFixed(2)}; machine ${
        Math.round(busy * 100)
      } % busy; jobs a frame ${(jobs / jobsFrames).toFixed(1)}, frames sent a job ${
        (sent / jobs).toFixed(3)
      }`,
  );
  if (setup === workpull) {
    const micros = (samples: number[]) => {
      const { p50, p90, p99 } = distribution(samples.map((ms) => ms * 1000));
      return `${p50.toFixed(0)} / ${p90.toFixed(0)} / ${p99.toFixed(0)} µs`;
    };
    console.log(
      `  ${"".padEnd(13)} controller: request → jobs sent ${
        micros(service)
      } (${service.length}); ` +
        `gap before the next frame ${micros(gaps)}`,
    );
  }
}

console.log(
  `round trips on ${runtimeVersion()}, ${topology.processes}×${topology.perProcess}, ` +
    `window ${WINDOW}, ${jobs.toLocaleString("en-US")} jobs a round (p50 / p90 / p99)`,
);
const probe = { service: [] as number[], gaps: [] as number[], last: 0 };
/** Time the controller's handling of each link's frames (see the module's prose). */
function probeController(controller: WorkPullingController): void {
  observeLinks(controller, () => {
    let requestAt = 0;
    return {
      received(frame) {
        const at = performance.now();
        if (probe.last !== 0) probe.gaps.push(at - probe.last);
        if (requestAt === 0 && typeof frame === "string" && frame.startsWith('{"type":"request"')) {
          requestAt = at;
        }
      },
      handled() {
        probe.last = performance.now();
      },
      sent(frame) {
        if (requestAt !== 0 && frame.startsWith('{"type":"jobs"')) {
          probe.service.push(performance.now() - requestAt);
          requestAt = 0;
        }
      },
    };
  });
}

const workpull = await WorkpullSetup.start(topology, {
  window: WINDOW,
  onController: probeController,
});
const batched = await BatchedRawSetup.start(topology, WINDOW).catch(async (error) => {
  await workpull.close();
  throw error;
});
const scripted = scriptedToo
  ? await ScriptedControllerSetup.start(topology, WINDOW).catch(async (error) => {
    await Promise.all([workpull.close(), batched.close()]);
    throw error;
  })
  : undefined;
try {
  await warmUp(scripted ? [batched, workpull, scripted] : [batched, workpull], jobs);
  for (let i = 1; i <= rounds; i++) {
    console.log(`round ${i}/${rounds}`);
    await round("batched raw", batched, batched.clients);
    await round("workpull", workpull, workpull.workers);
    if (scripted) await round("scripted", scripted, scripted.workers);
  }
} finally {
  await Promise.all([workpull.close(), batched.close(), scripted?.close()]);
}
process.exit(0);
