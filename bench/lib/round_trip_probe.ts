/**
 * Round trips as a worker process sees them, for `bench/tools/round_trips.ts`. Imported first by
 * a worker process (`bench/scenarios/worker_process.ts`, `bench/scenarios/batched_raw_client.ts`)
 * when `WORKPULL_BENCH_ROUND_TRIPS` is set, it replaces the global `WebSocket` with a subclass
 * that times, per socket:
 *
 * - the round trip: from a top-up `request` frame sent to the next `jobs` frame received (the
 *   controller's turnaround, both wake-ups and the time the request or the frame waited behind
 *   other work in either process);
 * - the hold: from a `jobs` frame received to the next `request` sent (the worker's own work).
 *
 * On the stdin command `{"cmd":"round-trips"}` it reports the samples taken since the last one as
 * `{"ev":"round-trips","rtt":[ms…],"hold":[ms…]}` and starts afresh. Frames are told apart by
 * their first characters, as both the workpull worker and the baseline client write them.
 *
 * @module
 */

import process from "node:process";
import { onCommand } from "./commands.ts";

let rtt: number[] = [];
let hold: number[] = [];
/** Frames since the last report: jobs frames received, frames sent (requests, acks, others). */
let jobsFrames = 0;
let sent = 0;

const Native = globalThis.WebSocket;

class TimedWebSocket extends Native {
  #requestAt: number | undefined;
  #jobsAt: number | undefined;

  constructor(url: string | URL, protocols?: string | string[]) {
    super(url, protocols);
    this.addEventListener("message", (event) => {
      const data = (event as MessageEvent).data;
      if (typeof data !== "string" || !data.startsWith('{"type":"jobs"')) return;
      const at = performance.now();
      jobsFrames += 1;
      if (this.#requestAt !== undefined) rtt.push(at - this.#requestAt);
      this.#requestAt = undefined;
      this.#jobsAt = at;
    });
  }

  override send(data: string | ArrayBufferLike | Blob | ArrayBufferView): void {
    sent += 1;
    if (typeof data === "string" && data.startsWith('{"type":"request"')) {
      const at = performance.now();
      // A second request before any frame came is still waiting for the first one's answer.
      this.#requestAt ??= at;
      if (this.#jobsAt !== undefined) hold.push(at - this.#jobsAt);
      this.#jobsAt = undefined;
    }
    super.send(data);
  }
}

globalThis.WebSocket = TimedWebSocket as typeof WebSocket;

onCommand((command) => {
  if (command.cmd !== "round-trips") return;
  const report = { ev: "round-trips", rtt, hold, jobsFrames, sent };
  process.stdout.write(`${JSON.stringify(report)}\n`);
  rtt = [];
  hold = [];
  jobsFrames = 0;
  sent = 0;
});
