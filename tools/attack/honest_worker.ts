/**
 * The honest worker of the attack soak: `connectWorker` with a fresh short-lived token from a
 * function (so it renews across expiry closes), jobs that take `jobMs` each, reporting how many
 * jobs it processed and how many frames it sent, one JSON object a line every `reportEvery` ms.
 * Beside it, an honest HTTP client: a `GET /stats` every `probeEvery` ms, whose round trips
 * (ms) go out with each report (`probes`, `[sent at, ms]` pairs), for the latency percentiles.
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
  /** Probe `GET /stats` this often, ms (0: never). */
  readonly probeEvery?: number;
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

let probes: [number, number][] = [];
const statsUrl = new URL("stats", config.url.replace(/^ws/, "http").replace(/workers$/, ""));
const clientToken = await signToken(config.secret, { producer: "jobs", expiresIn: 3_600_000 });
let probing = false;
const prober = config.probeEvery
  ? setInterval(async () => {
    if (probing) return; // one at a time: a slow answer shows as one long round trip
    probing = true;
    const sent = Date.now();
    try {
      const response = await fetch(statsUrl, {
        headers: { authorization: `Bearer ${clientToken}` },
        signal: AbortSignal.timeout(10_000),
      });
      await response.arrayBuffer();
      probes.push([sent, Date.now() - sent]);
    } catch {
      probes.push([sent, 10_000]);
    } finally {
      probing = false;
    }
  }, config.probeEvery)
  : undefined;

const timer = setInterval(() => {
  out({
    ev: "progress",
    processed: worker.processed,
    framesSent,
    connected: worker.connected,
    disconnects,
    probes,
  });
  probes = [];
}, config.reportEvery);

process.on("SIGTERM", () => {
  clearInterval(timer);
  clearInterval(prober);
  worker.close().then(() => process.exit(0));
});
out({ ev: "started" });
