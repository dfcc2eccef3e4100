/**
 * The worker side of the network benchmarks, run as a subprocess by `net_throughput.ts` and
 * `net_failover.ts`. Configured by the `WORKPULL_BENCH` environment variable (JSON):
 * `{ mode: "raw" | "workpull", url, token?, name?, concurrency?, window?, delayMs? }`.
 * Reports one JSON object a line on stdout: `{"ev":"ready"}`, and in workpull mode with
 * `report: true` `{"ev":"start","id":…,"at":<Date.now()>}` per job.
 */

import process from "node:process";
import { connectWorker } from "../client.ts";

const config = JSON.parse(process.env.WORKPULL_BENCH ?? "{}");
const out = (line: unknown) => process.stdout.write(JSON.stringify(line) + "\n");

if (config.mode === "raw") {
  // Baseline: every message is one job; every job is answered by one confirmation message.
  const socket = new WebSocket(config.url);
  socket.onopen = () => out({ ev: "ready" });
  socket.onmessage = (event) => socket.send(String(event.data).slice(0, 16));
} else {
  const delay = config.delayMs ?? 0;
  const worker = connectWorker({
    url: config.url,
    token: config.token,
    producer: "bench",
    name: config.name ?? "bench",
    concurrency: config.concurrency ?? 1,
    window: config.window ?? 100,
    resendInterval: config.resendInterval,
    handler: delay > 0 || config.report
      ? async ({ messageId }) => {
        if (config.report) out({ ev: "start", id: messageId, at: Date.now() });
        if (delay > 0) await new Promise((resolve) => setTimeout(resolve, delay));
      }
      : () => {},
  });
  let bound = 0;
  for (const endpoint of worker.endpoints) {
    endpoint.addEventListener("bound", () => {
      if (++bound === worker.endpoints.length) out({ ev: "ready" });
    });
  }
}
