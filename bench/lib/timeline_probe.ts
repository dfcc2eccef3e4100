/**
 * The frames of a worker process on the shared clock, for `bench/tools/timeline.ts`. Imported
 * first by a worker process (`bench/scenarios/worker_process.ts`,
 * `bench/scenarios/batched_raw_client.ts`) when `WORKPULL_BENCH_TIMELINE` is set, it replaces the
 * global `WebSocket` with a subclass that records, per socket, each `jobs` frame arriving (`in`,
 * before the client's own listener runs) and each frame sent (`out`) into a
 * {@linkcode FrameRecorder}.
 *
 * Commands on stdin: `{"cmd":"timeline","from":ms,"span":ms}` arms the window (the tool's clock,
 * `now()` of `runtime.ts`); `{"cmd":"timeline-take"}` reports `{"ev":"timeline","events":[…]}`.
 *
 * @module
 */

import process from "node:process";
import { onCommand } from "./commands.ts";
import { FrameRecorder } from "./timeline.ts";

const recorder = new FrameRecorder(`worker ${process.pid}`);
let sockets = 0;

const Native = globalThis.WebSocket;

class RecordedWebSocket extends Native {
  readonly #socket = sockets++;

  constructor(url: string | URL, protocols?: string | string[]) {
    super(url, protocols);
    this.addEventListener("message", (event) => {
      const data = (event as MessageEvent).data;
      if (typeof data !== "string" || !data.startsWith('{"type":"jobs"')) return;
      recorder.record(this.#socket, "in", data.length);
    });
  }

  override send(data: string | ArrayBufferLike | Blob | ArrayBufferView): void {
    recorder.record(this.#socket, "out", typeof data === "string" ? data.length : 0);
    super.send(data);
  }
}

globalThis.WebSocket = RecordedWebSocket as typeof WebSocket;

onCommand((command) => {
  if (command.cmd === "timeline") recorder.arm(command.from as number, command.span as number);
  if (command.cmd !== "timeline-take") return;
  process.stdout.write(`${JSON.stringify({ ev: "timeline", events: recorder.take() })}\n`);
});
