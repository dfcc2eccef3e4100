/**
 * The client side of the batched raw WebSocket baseline (`bench/lib/batched_raw.ts`), one
 * process. Configured by `WORKPULL_BENCH` (JSON: `url`, `sockets`, `window`). Each socket grants
 * `window` jobs when it opens; for every jobs frame it takes the jobs in order (a no-op each)
 * and, after each, confirms the way a workpull worker endpoint does: a top-up request
 * `{"type":"request","confirmed":c,"upTo":c+window}` when at most half the window remains
 * granted, otherwise an `{"type":"ack","confirmed":c}` when the frame is used up. Prints
 * `{"ev":"ready"}` once every socket is open.
 *
 * @module
 */

import process from "node:process";

interface Config {
  readonly url: string;
  readonly sockets: number;
  readonly window: number;
}

interface JobsFrame {
  readonly seq: number;
  /** Absent in a `heard` frame. */
  readonly jobs?: readonly { readonly id: string; readonly payload: unknown }[];
}

// Timing round trips for bench/tools/round_trips.ts: before any socket is made.
if (process.env.WORKPULL_BENCH_ROUND_TRIPS) await import("../lib/round_trip_probe.ts");
// The frames on a shared clock for bench/tools/timeline.ts: before any socket is made.
if (process.env.WORKPULL_BENCH_TIMELINE) await import("../lib/timeline_probe.ts");

const config: Config = JSON.parse(process.env.WORKPULL_BENCH ?? "{}");
const window = config.window;
const half = Math.floor(window / 2);
let open = 0;

for (let i = 0; i < config.sockets; i++) {
  const socket = new WebSocket(config.url);
  let confirmed = 0;
  let upTo = 0;
  const request = () => {
    upTo = confirmed + window;
    socket.send(`{"type":"request","confirmed":${confirmed},"upTo":${upTo}}`);
  };
  socket.onopen = () => {
    request();
    if (++open === config.sockets) process.stdout.write(`${JSON.stringify({ ev: "ready" })}\n`);
  };
  socket.onmessage = (event) => {
    const frame: JobsFrame = JSON.parse(event.data as string);
    const jobs = frame.jobs;
    if (jobs === undefined) return; // {"type":"heard"}
    for (let j = 0; j < jobs.length; j++) {
      // The job would be handled here (the handler is a no-op).
      confirmed = frame.seq + j;
      if (upTo - confirmed <= half) request();
      else if (j === jobs.length - 1) {
        socket.send(`{"type":"ack","confirmed":${confirmed}}`);
      }
    }
  };
}
