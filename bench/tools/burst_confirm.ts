/**
 * How long a burst takes to be confirmed: `submitMany` of a burst of jobs to one worker endpoint
 * (window 100, a no-op handler, in its own process), timed from the call to the last job's
 * delivery confirmation, after a pause that lets every socket go quiet. Side by side, alternating
 * bursts: the worker process on the runtime's own `WebSocket` and on npm `ws` (which turns
 * Nagle's algorithm off), p50 / p90 / max of each, and the ratio of the p50s.
 *
 * The end of a burst is where Nagle's algorithm hurt before protocol feature `heard`: Deno's
 * client holds a worker's last confirmation behind its top-up request, which the controller has
 * no jobs to answer, until the controller's delayed ACK (40 ms on Linux). `--no-heard` measures a
 * worker that does not name the feature (as one written before it): 45.4 ms at p50 for a burst of
 * 300, against 3.0 with the feature and 3.5 with `ws` (docs/PROTOCOL.md).
 *
 *   deno run -A bench/tools/burst_confirm.ts [--burst=300] [--bursts=30] [--pause=50] [--no-heard]
 *
 * The runtime is this process's, for the controller and the worker processes alike (`bun
 * bench/tools/burst_confirm.ts` looks at Bun).
 *
 * @module
 */

import process from "node:process";
import { commandLine, numberArg } from "../lib/cli.ts";
import { runtimeVersion } from "../lib/runtime.ts";
import { WorkpullSetup } from "../lib/setups.ts";
import { distribution } from "../lib/stats.ts";

const { values } = commandLine({
  usage:
    "deno run -A bench/tools/burst_confirm.ts [--burst=300] [--bursts=30] [--pause=50] [--no-heard]",
  summary:
    "Submission to the last delivery confirmation of a burst, the runtime's WebSocket beside npm ws.",
  positionals: [],
  flags: {
    burst: { kind: "value", value: "N", help: "jobs a burst (default 300)" },
    bursts: { kind: "value", value: "N", help: "measured bursts of each client (default 30)" },
    pause: { kind: "value", value: "MS", help: "the pause before each burst (default 50)" },
    "no-heard": { kind: "switch", help: "the worker does not name feature heard" },
  },
});
const burst = numberArg("--burst", values.burst, 300);
const bursts = numberArg("--bursts", values.bursts, 30);
const pause = numberArg("--pause", values.pause, 50);
const WARMUP = 5;

if (values["no-heard"]) process.env.WORKPULL_BENCH_NO_HEARD = "1"; // the worker processes read it

const clients = ["runtime", "ws"] as const;
const setups = await Promise.all(
  clients.map((client) =>
    WorkpullSetup.start({ processes: 1, perProcess: 1 }, {
      window: 100,
      client,
      controller: { deliveryConfirmation: true },
    })
  ),
);
const times: Record<(typeof clients)[number], number[]> = { runtime: [], ws: [] };
try {
  for (let i = 0; i < WARMUP + bursts; i++) {
    for (const [index, client] of clients.entries()) {
      await new Promise((resolve) => setTimeout(resolve, pause));
      const producer = setups[index].producer;
      const started = performance.now();
      const receipts = await producer.submitMany(Array.from({ length: burst }, (_, n) => ({ n })));
      await Promise.all(receipts.map((receipt) => receipt.confirmed));
      if (i >= WARMUP) times[client].push(performance.now() - started);
    }
  }
} finally {
  await Promise.all(setups.map((setup) => setup.close()));
}
console.log(
  `bursts of ${burst} to one endpoint on ${runtimeVersion()}, ${bursts} each` +
    `${values["no-heard"] ? ", the worker without feature heard" : ""}; ` +
    "submitMany → last delivery confirmation (p50 / p90 / max):",
);
const p50s: number[] = [];
for (const client of clients) {
  const { p50, p90 } = distribution(times[client]);
  p50s.push(p50);
  console.log(
    `  ${client === "ws" ? "npm ws" : "own WebSocket"}`.padEnd(16) +
      `${p50.toFixed(1)} / ${p90.toFixed(1)} / ${Math.max(...times[client]).toFixed(1)} ms`,
  );
}
console.log(`  own WebSocket ÷ npm ws (p50): ${(p50s[0] / p50s[1]).toFixed(2)}`);
process.exit(0);
