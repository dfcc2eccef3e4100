/**
 * The throughput scenario's frames on one clock: workpull's controller and the batched raw
 * WebSocket limit's server, each with its worker processes, recorded over a short window of a
 * warm run (`lib/timeline.ts`, `lib/timeline_probe.ts`), to see where a round trip's time goes.
 *
 * For each side it prints the server's turns of the event loop (the frames that arrived together,
 * handled one after the other; what it sends leaves when the turn is over): how many a second,
 * frames a turn, how long the handlers of a turn ran, how long from one turn's end to the next
 * turn's first handler, and the share of the window the handlers ran; then, at p50, a request's
 * service (handled → its jobs frame sent), a turn's end → the next jobs frame arriving at a worker
 * process, and a worker's frame sent → the server's next handler. `--events=N` also prints N
 * events from the middle of each window, one a line (µs from the window's start, process, socket,
 * what, characters).
 *
 *   deno run -A bench/tools/timeline.ts [processes=1] [perProcess=4] [--span=100] [--events=0]
 *
 * The runtime is this process's, for the server and the worker processes alike (`bun
 * bench/tools/timeline.ts …` looks at Bun). Both warm up for 1,000,000 jobs first (`WARMUP_JOBS`).
 *
 * @module
 */

import process from "node:process";
import { BatchedRawSetup } from "../lib/batched_raw.ts";
import { commandLine, numberArg } from "../lib/cli.ts";
import type { Child, Report } from "../lib/proc.ts";
import { now, runtimeVersion } from "../lib/runtime.ts";
import { type Setup, warmUp, WorkpullSetup } from "../lib/setups.ts";
import {
  type FrameEvent,
  FrameRecorder,
  LONG_GAP_MS,
  summarizeTurns,
  type TurnSummary,
} from "../lib/timeline.ts";
import type { WorkPullingController } from "../../mod.ts";
import { observeLinks } from "../lib/link_observer.ts";

const { values, positionals } = commandLine({
  usage: "deno run -A bench/tools/timeline.ts [processes] [perProcess] [--span=MS] [--events=N]",
  summary:
    "The frames of the throughput scenario on one clock: the server's turns, workpull beside the batched raw WebSocket limit.",
  positionals: [
    { name: "processes", help: "worker processes (default 1)" },
    { name: "perProcess", help: "sockets per worker process (default 4)" },
  ],
  flags: {
    span: { kind: "value", value: "MS", help: "the window recorded, ms (default 100)" },
    events: { kind: "value", value: "N", help: "events to print from each window (default 0)" },
  },
});
const topology = {
  processes: numberArg("processes", positionals[0], 1),
  perProcess: numberArg("perProcess", positionals[1], 4),
};
const span = numberArg("--span", values.span, 100);
const printEvents = numberArg("--events", values.events, 0);
const WINDOW = 100;
const ROUND_JOBS = 100_000;
/** The window starts this long after it is armed: every process has its command by then. */
const LEAD_MS = 200;

process.env.WORKPULL_BENCH_TIMELINE = "1"; // the worker processes inherit it

const SERVER = "server";
const workpullFrames = new FrameRecorder(SERVER);
const batchedFrames = new FrameRecorder(SERVER);

/** Record the frames of every link the controller is given. */
function recordController(controller: WorkPullingController): void {
  observeLinks(controller, (socket) => ({
    received: (frame) =>
      workpullFrames.record(socket, "in", typeof frame === "string" ? frame.length : 0),
    handled: () => workpullFrames.record(socket, "done", 0),
    sent: (frame) => workpullFrames.record(socket, "out", frame.length),
  }));
}

/** Run `setup` until a window armed in every process is over; the window's events. */
async function record(
  setup: Setup,
  recorder: FrameRecorder,
  children: readonly Child[],
): Promise<FrameEvent[]> {
  const from = now() + LEAD_MS;
  recorder.arm(from, span);
  for (const child of children) child.command({ cmd: "timeline", from, span });
  while (!recorder.over) await setup.run(ROUND_JOBS);
  const reports = await Promise.all(children.map((child) => {
    const report = child.next((r: Report) => r.ev === "timeline", "timeline", 10_000);
    child.command({ cmd: "timeline-take" });
    return report;
  }));
  return [...recorder.take(), ...reports.flatMap((report) => report.events as FrameEvent[])];
}

const micros = (value: number) => `${value.toFixed(1)} µs`;

function report(name: string, events: FrameEvent[]): void {
  const summary: TurnSummary = summarizeTurns(events, SERVER, span);
  console.log(
    `  ${name.padEnd(12)} ${Math.round(summary.turns / (span / 1000)).toLocaleString("en-US")} ` +
      `turns/s, ${summary.framesPerTurn.toFixed(2)} frames a turn; a turn's handlers ` +
      `${micros(summary.busyMean)} (p50 ${micros(summary.busyP50)}), then ` +
      `${micros(summary.betweenMean)} (p50 ${micros(summary.betweenP50)}, p90 ${
        micros(summary.betweenP90)
      }) to the next turn; handlers ran ${Math.round(summary.busyShare * 100)} % of the window, ` +
      `gaps of ${LONG_GAP_MS * 1000} µs or more ${Math.round(summary.longGapShare * 100)} %`,
  );
  console.log(
    `  ${"".padEnd(12)} p50: a request handled → its jobs frame sent ${
      micros(summary.serviceP50)
    }; a turn's end → a worker's next jobs frame ${
      micros(summary.toWorkerP50)
    }; a worker's frame sent → the server's next handler ${micros(summary.toServerP50)}`,
  );
  if (printEvents <= 0) return;
  const sorted = [...events].sort((a, b) => a.at - b.at);
  const first = Math.max(0, Math.floor(sorted.length / 2 - printEvents / 2));
  const start = sorted[0]?.at ?? 0;
  for (const event of sorted.slice(first, first + printEvents)) {
    console.log(
      `    ${((event.at - start) * 1000).toFixed(1).padStart(9)} ${event.process.padEnd(14)} ` +
        `s${event.socket} ${event.kind.padEnd(4)} ${event.chars}`,
    );
  }
}

console.log(
  `timeline on ${runtimeVersion()}, ${topology.processes}×${topology.perProcess}, window ${WINDOW}, ` +
    `${span} ms recorded of each`,
);
const workpull = await WorkpullSetup.start(topology, {
  window: WINDOW,
  onController: recordController,
});
const batched = await BatchedRawSetup.start(topology, WINDOW, batchedFrames).catch(
  async (error) => {
    await workpull.close();
    throw error;
  },
);
try {
  await warmUp([batched, workpull], ROUND_JOBS);
  report("batched raw", await record(batched, batchedFrames, batched.clients));
  report("workpull", await record(workpull, workpullFrames, workpull.workers));
} finally {
  await Promise.all([workpull.close(), batched.close()]);
}
process.exit(0);
