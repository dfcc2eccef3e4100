/**
 * The system under attack: a controller served over the network on this process's runtime
 * (`serveDeno` or `serveBun`), fed by a producer that keeps a backlog of jobs ready, reporting
 * on stdout one JSON object a line. Driven by `tools/attack/main.ts`.
 *
 * Configured by the `WORKPULL_ATTACK` environment variable (a JSON {@linkcode ControllerConfig}).
 * Commands arrive on stdin, one JSON object a line: `{"cmd":"gc"}` collects garbage and
 * reports memory, `{"cmd":"drain"}` stops feeding and reports `drained` once every submitted
 * job was confirmed.
 *
 * Reports: `ready` (port), `stats` every `statsEvery` ms (memory, jobs submitted and confirmed,
 * pending, bound workers), `memory` after a `gc`, `drained`, and `net` counts of the edge's
 * refusals.
 *
 * @module
 */

import process from "node:process";
import { createInterface } from "node:readline";
import { BufferedProducer, WorkPullingController } from "../../mod.ts";
import type { NetEvent, ServeOptions, WorkpullServer } from "../../server.ts";

/** What `main.ts` passes in `WORKPULL_ATTACK`. */
export interface ControllerConfig {
  readonly secret: string;
  /** Keep this many jobs waiting (producer buffer plus controller pool). */
  readonly backlog: number;
  /** Characters of padding in each job's payload. */
  readonly payloadPadding: number;
  /** Report every this many ms. */
  readonly statsEvery: number;
  /** Extra server options (limits), JSON-serializable. */
  readonly serve?: Partial<ServeOptions>;
}

const config: ControllerConfig = JSON.parse(process.env.WORKPULL_ATTACK ?? "{}");
const out = (report: Record<string, unknown>) =>
  process.stdout.write(JSON.stringify({ ...report, t: Date.now() }) + "\n");

const producer = new BufferedProducer<unknown>();
const controller = new WorkPullingController({
  name: "jobs",
  producer,
  deliveryConfirmation: true,
});
await controller.start();

const netCounts: Record<string, number> = {};
const onEvent = (event: NetEvent) => {
  const key = "reason" in event ? `${event.kind}:${event.reason}` : event.kind;
  netCounts[key] = (netCounts[key] ?? 0) + 1;
};
const options: ServeOptions = {
  controller,
  producer,
  auth: { secret: config.secret },
  port: 0,
  hostname: "127.0.0.1",
  onEvent,
  ...config.serve,
};
const server: WorkpullServer = "Deno" in globalThis
  ? await (await import("../../deno.ts")).serveDeno(options)
  : (await import("../../bun.ts")).serveBun(options);

let submitted = 0;
let confirmed = 0;
let failed = 0;
let feeding = true;
const padding = "x".repeat(config.payloadPadding);

/** Top the backlog up: jobs not yet dispatched (buffered here or pending in the pool). */
function feed(): void {
  if (!feeding) return;
  const waiting = producer.buffered + controller.stats().pending;
  for (let i = waiting; i < config.backlog; i++) {
    const n = ++submitted;
    producer.submit({ n, padding }, { messageId: `job-${n}` }).then(
      (receipt) => receipt.confirmed!.then(() => void confirmed++),
    ).catch(() => void failed++);
  }
}
const feeder = setInterval(feed, 5);

let lastMemory = { rss: 0, heapUsed: 0 };
/** RSS and heap; the last reading when there is none (Bun reads /proc: out of descriptors, it throws). */
function memory() {
  try {
    const usage = process.memoryUsage();
    lastMemory = { rss: usage.rss, heapUsed: usage.heapUsed };
  } catch {
    // keep the last reading
  }
  return lastMemory;
}

const stats = setInterval(() => {
  const snapshot = controller.stats();
  out({
    ev: "stats",
    ...memory(),
    submitted,
    confirmed,
    failed,
    pending: snapshot.pending,
    workers: snapshot.workers.length,
    inFlight: snapshot.workers.reduce((sum, worker) => sum + worker.inFlight, 0),
    windows: snapshot.workers.reduce((sum, worker) => sum + worker.window, 0),
    net: netCounts,
  });
}, config.statsEvery);

function collectGarbage(): void {
  const bun = (globalThis as { Bun?: { gc(force: boolean): void } }).Bun;
  if (bun) bun.gc(true);
  else (globalThis as { gc?: () => void }).gc?.();
}

const lines = createInterface({ input: process.stdin });
lines.on("line", (line) => {
  let command: { cmd?: string };
  try {
    command = JSON.parse(line);
  } catch {
    return;
  }
  if (command.cmd === "gc") {
    collectGarbage();
    setTimeout(() => {
      collectGarbage();
      out({ ev: "memory", ...memory() });
    }, 50);
  } else if (command.cmd === "drain") {
    feeding = false;
    const check = setInterval(() => {
      if (confirmed + failed >= submitted) {
        clearInterval(check);
        out({ ev: "drained", submitted, confirmed, failed });
      }
    }, 20);
  }
});

const shutdown = async () => {
  clearInterval(feeder);
  clearInterval(stats);
  lines.close();
  await server.close();
  await controller.close();
  process.exit(0);
};
process.on("SIGTERM", () => void shutdown());
out({ ev: "ready", port: server.port, pid: process.pid });
