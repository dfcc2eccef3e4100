/**
 * The honest worker of the attack soak: `connectWorker` with a fresh short-lived token from a
 * function (so it renews across expiry closes), jobs that take `jobMs` each, reporting how many
 * jobs it processed and how many frames it sent, one JSON object a line every `reportEvery` ms.
 *
 * Configured by the `WORKPULL_HONEST` environment variable (a JSON {@linkcode HonestConfig}).
 * SIGTERM closes it cleanly.
 *
 * @module
 */

import process from "node:process";
import { connectWorker } from "../../client.ts";
import { signToken } from "../../server.ts";

/** What `main.ts` passes in `WORKPULL_HONEST`. */
export interface HonestConfig {
  readonly url: string;
  readonly secret: string;
  readonly name: string;
  readonly concurrency: number;
  readonly window: number;
  readonly jobMs: number;
  readonly tokenLifetime: number;
  readonly reportEvery: number;
}

const config: HonestConfig = JSON.parse(process.env.WORKPULL_HONEST ?? "{}");
const out = (report: Record<string, unknown>) =>
  process.stdout.write(JSON.stringify({ ...report, t: Date.now() }) + "\n");

let framesSent = 0;
let disconnects = 0;
/** The standard WebSocket, counting what the worker sends (the frame rate an honest worker needs). */
class CountingWebSocket extends WebSocket {
  override send(data: string | ArrayBufferLike | Blob | ArrayBufferView): void {
    framesSent += 1;
    super.send(data as string);
  }
}

const worker = connectWorker({
  url: config.url,
  token: () =>
    signToken(config.secret, {
      producer: "jobs",
      worker: config.name,
      expiresIn: config.tokenLifetime,
    }),
  producer: "jobs",
  name: config.name,
  concurrency: config.concurrency,
  window: config.window,
  WebSocket: CountingWebSocket,
  backoff: { initial: 50, max: 1000 },
  handler: () => new Promise((resolve) => setTimeout(resolve, config.jobMs)),
});
worker.addEventListener("disconnected", (event) => {
  disconnects += 1;
  out({ ev: "disconnected", endpoint: event.endpoint, code: event.code, reason: event.reason });
});

const timer = setInterval(() => {
  out({
    ev: "progress",
    processed: worker.processed,
    framesSent,
    connected: worker.connected,
    disconnects,
  });
}, config.reportEvery);

process.on("SIGTERM", () => {
  clearInterval(timer);
  worker.close().then(() => process.exit(0));
});
out({ ev: "started" });
