/**
 * The worker side of the network benchmarks, one process. Configured by the `WORKPULL_BENCH`
 * environment variable (JSON, {@linkcode WorkerConfig}); reports JSON lines on stdout and takes
 * JSON commands on stdin.
 *
 * - `raw`: the baseline client. `sockets` plain WebSockets; every message is one job
 *   (`{"type":"job","id":…,"payload":…}`), parsed with `JSON.parse`, and answered at once with
 *   one confirmation `{"type":"ack","id":…}`. Nothing else.
 * - `workpull`: `connectWorker` from `client.ts` with `concurrency` endpoints and `window`.
 *   The handler is a no-op (`noop`), records submit→start latency from the payload's `t`
 *   (`latency`), reports each start and sleeps `delayMs` (`report`; `delayMs < 0` never
 *   resolves, a job held mid-flight), or keeps the thread busy for `delayMs` and returns
 *   (`spin`: a synchronous, CPU-bound handler).
 *
 * Reports: `{"ev":"ready"}` once every socket is open (raw) or every endpoint is bound;
 * `{"ev":"start","id":…,"t":…}` per job in `report` mode; on the command `{"cmd":"latency"}`,
 * `{"ev":"latency","histogram":…}` (the samples since the last such command, counted per 10 µs:
 * `lib/latency_histogram.ts`). Times are `performance.timeOrigin + performance.now()`.
 *
 * @module
 */

import process from "node:process";
import { connectWorker } from "../../client.ts";
import { startProfiling, stopProfiling } from "../lib/profile.ts";
import { onCommand } from "../lib/commands.ts";
import { LatencyHistogram } from "../lib/latency_histogram.ts";

/** The configuration in `WORKPULL_BENCH`. */
export interface WorkerConfig {
  readonly mode: "raw" | "workpull";
  readonly url: string;
  /** raw: sockets to open. */
  readonly sockets?: number;
  /** workpull: the worker token, name, endpoints and window. */
  readonly token?: string;
  readonly name?: string;
  readonly concurrency?: number;
  readonly window?: number;
  readonly handler?: "noop" | "latency" | "report" | "spin";
  readonly delayMs?: number;
  /** workpull: the `WebSocket` to connect with: the runtime's (default) or npm `ws`'s. */
  readonly client?: "runtime" | "ws";
  readonly resendInterval?: number;
}

// Timing round trips for bench/tools/round_trips.ts: before any socket is made.
if (process.env.WORKPULL_BENCH_ROUND_TRIPS) await import("../lib/round_trip_probe.ts");
// The frames on a shared clock for bench/tools/timeline.ts: before any socket is made.
if (process.env.WORKPULL_BENCH_TIMELINE) await import("../lib/timeline_probe.ts");

const config: WorkerConfig = JSON.parse(process.env.WORKPULL_BENCH ?? "{}");
const profileDir = process.env.WORKPULL_BENCH_PROFILE;
const now = () => performance.timeOrigin + performance.now();
const out = (line: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(line)}\n`);

if (profileDir) await startProfiling();

const latencies = new LatencyHistogram();

if (config.mode === "raw") {
  let open = 0;
  for (let i = 0; i < (config.sockets ?? 1); i++) {
    const socket = new WebSocket(config.url);
    socket.onopen = () => {
      if (++open === (config.sockets ?? 1)) out({ ev: "ready" });
    };
    socket.onmessage = (event) => {
      const job = JSON.parse(event.data as string);
      if (job.type !== "job") return; // {"type":"heard"}
      socket.send(JSON.stringify({ type: "ack", id: job.id }));
    };
  }
} else {
  const delay = config.delayMs ?? 0;
  const handler = config.handler === "latency"
    ? ({ payload }: { payload: unknown }) => latencies.record(now() - (payload as { t: number }).t)
    : config.handler === "spin"
    ? () => {
      const end = performance.now() + delay;
      while (performance.now() < end) { /* busy, as a CPU-bound handler is */ }
    }
    : config.handler === "report"
    ? ({ messageId }: { messageId: string }) => {
      out({ ev: "start", id: messageId, t: now() });
      if (delay < 0) return new Promise(() => {});
      if (delay > 0) return new Promise((resolve) => setTimeout(resolve, delay));
    }
    : () => {};
  const clientWebSocket = config.client === "ws"
    ? (await import("ws")).WebSocket as unknown as typeof WebSocket
    : undefined;
  const worker = connectWorker({
    url: config.url,
    token: config.token,
    producer: "bench",
    name: config.name ?? "bench",
    concurrency: config.concurrency ?? 1,
    window: config.window ?? 100,
    resendInterval: config.resendInterval,
    WebSocket: process.env.WORKPULL_BENCH_NO_HEARD
      ? withoutHeard(clientWebSocket ?? WebSocket)
      : clientWebSocket,
    handler,
  });
  let bound = 0;
  for (const endpoint of worker.endpoints) {
    endpoint.addEventListener("bound", () => {
      if (++bound === worker.endpoints.length) out({ ev: "ready" });
    });
  }
}

onCommand(async (command) => {
  if (command.cmd === "latency") {
    out({ ev: "latency", histogram: latencies.data() });
    latencies.clear();
  } else if (command.cmd === "profile" && profileDir) {
    const path = await stopProfiling(profileDir, command.name as string);
    out({ ev: "profiled", path });
  }
});

/**
 * `WebSocket` whose registrations do not name feature `heard`, for `tools/burst_confirm.ts
 * --no-heard`: a worker as one written before the feature.
 */
function withoutHeard(Base: typeof WebSocket): typeof WebSocket {
  return class extends Base {
    override send(data: string | ArrayBufferLike | Blob | ArrayBufferView): void {
      if (typeof data === "string" && data.startsWith('{"type":"register"')) {
        const frame = JSON.parse(data);
        frame.features = frame.features?.filter((feature: string) => feature !== "heard");
        data = JSON.stringify(frame);
      }
      super.send(data);
    }
  };
}
