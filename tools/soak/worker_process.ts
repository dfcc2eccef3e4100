/**
 * A soak worker process, on Deno or on Bun: `connectWorker` from `client.ts` with one or more
 * endpoints, connected through the orchestrator's TCP proxy, whose handler records every run.
 *
 * The handler takes 1..20 ms (seeded per MessageID) and appends a `start` line when it begins and
 * an `end` line when it finishes to this process's journal, synchronously, so a SIGKILL loses
 * nothing that was written. It also records each endpoint's connections, disconnections and
 * bindings: the verifier uses them to tell a job that ran before its worker could know of a
 * fault from one that ran after its binding ended.
 *
 * A thin `WebSocket` subclass reads each endpoint's traffic (it changes nothing):
 * - the `register` frame names the socket's endpoint, and each `jobs` frame says which MessageID
 *   arrived at which sequence. `connectWorker` gives every endpoint the same handler and a
 *   `Delivery` does not name its endpoint: the handler looks its delivery up by MessageID and
 *   sequence, and remembers the answer for the delivery's `signal`, which is the endpoint's own;
 * - every `ack` and `request` is recorded (`sent`, with its cumulative confirmation) when it is
 *   handed to the socket: when a finished job's confirmation left the worker, if it did;
 * - an `unbound` or `reset` frame is recorded (`told`): the controller telling the endpoint that
 *   its binding ended while the link stays up.
 *
 * It also records its event-loop stalls (`stall`: a 5 ms tick that came at least 3 ms late).
 *
 * @module
 */

import { join } from "node:path";
import process from "node:process";
import { connectWorker, type Delivery } from "../../client.ts";
import { Journal, wallClock } from "./journal.ts";
import { announce, type ChildBase, childConfig } from "./lifeline.ts";
import { handlerDelay } from "./random.ts";
import { type Runtime, STALL_MIN_LATE_MS, STALL_TICK_MS } from "./records.ts";

/** The configuration of a worker process. */
export interface WorkerConfig extends ChildBase {
  /** The proxy's workers URL for this worker. */
  readonly url: string;
  readonly token: string;
  readonly producer: string;
  readonly name: string;
  readonly concurrency: number;
  readonly seed: number;
  /** The directory of worker journals. */
  readonly dir: string;
}

const config = childConfig<WorkerConfig>();
const runtime: Runtime = "Deno" in globalThis ? "deno" : "bun";
const pid = process.pid;
const journal = new Journal(join(config.dir, `${config.name}.${pid}.jsonl`));

/** Which endpoint received MessageID `id` at sequence `seq` (`${id} ${seq}`), from the wire. */
const arrivals = new Map<string, string>();
const ARRIVALS_KEPT = 100_000;
/** The endpoint behind each delivery signal. */
const endpointOfSignal = new WeakMap<AbortSignal, string>();

/** A `WebSocket` that reads which endpoint it carries and which jobs arrive on it. */
class TappedWebSocket extends WebSocket {
  #endpoint: string | undefined;

  constructor(url: string | URL, protocols?: string | string[]) {
    super(url, protocols);
    // Registered before the client's `onmessage`, so it runs first.
    this.addEventListener("message", (event) => {
      const data = (event as MessageEvent).data;
      if (this.#endpoint === undefined || typeof data !== "string") return;
      if (data.startsWith('{"type":"unbound"') || data.startsWith('{"type":"reset"')) {
        // The controller tells the endpoint its binding ended while the link stays up.
        const what = data.startsWith('{"type":"unbound"') ? "unbound" : "reset";
        journal.write({ ev: "told", ep: this.#endpoint, pid, what, t: wallClock() });
        return;
      }
      if (!data.startsWith('{"type":"jobs"')) return;
      const frame = JSON.parse(data) as { seq: number; jobs: { id: string }[] };
      frame.jobs.forEach((job, i) => arrivals.set(`${job.id} ${frame.seq + i}`, this.#endpoint!));
      if (arrivals.size > ARRIVALS_KEPT) {
        let excess = arrivals.size - ARRIVALS_KEPT / 2;
        for (const key of arrivals.keys()) {
          if (excess-- <= 0) break;
          arrivals.delete(key);
        }
      }
    });
  }

  override send(data: string | ArrayBufferLike | Blob | ArrayBufferView): void {
    if (typeof data === "string") {
      if (data.startsWith('{"type":"register"')) {
        this.#endpoint = (JSON.parse(data) as { worker: string }).worker;
      } else if (
        this.#endpoint !== undefined &&
        (data.startsWith('{"type":"ack"') || data.startsWith('{"type":"request"'))
      ) {
        const c = (JSON.parse(data) as { confirmed: number }).confirmed;
        journal.write({ ev: "sent", ep: this.#endpoint, pid, c, t: wallClock() });
      }
    }
    super.send(data);
  }
}

function endpointOf(delivery: Delivery<unknown>): string {
  if (config.concurrency === 1) return config.name;
  const key = `${delivery.messageId} ${delivery.seq}`;
  const arrived = arrivals.get(key);
  arrivals.delete(key);
  const known = endpointOfSignal.get(delivery.signal);
  if (known !== undefined) return known;
  if (arrived === undefined) return `${config.name}#?`;
  endpointOfSignal.set(delivery.signal, arrived);
  return arrived;
}

/** The binding each endpoint holds, from its `bound` events. */
const bindings = new Map<string, string>();

const connection = connectWorker({
  url: config.url,
  token: config.token,
  producer: config.producer,
  name: config.name,
  concurrency: config.concurrency,
  // Long enough for the longest job (`LONG_JOB_MAX_MS`): a graceful stop finishes it.
  drainTimeout: 30_000,
  WebSocket: TappedWebSocket,
  handler: async (delivery) => {
    const id = delivery.messageId;
    const ep = endpointOf(delivery);
    const b = bindings.get(ep) ?? "";
    journal.write({ ev: "start", id, ep, pid, b, s: delivery.seq, t: wallClock() });
    await new Promise((resolve) => setTimeout(resolve, handlerDelay(config.seed, id)));
    journal.write({ ev: "end", id, ep, pid, t: wallClock() });
  },
});

connection.addEventListener("connected", (event) => {
  journal.write({ ev: "connected", ep: event.endpoint, pid, t: wallClock() });
});
connection.addEventListener("disconnected", (event) => {
  journal.write({ ev: "disconnected", ep: event.endpoint, pid, code: event.code, t: wallClock() });
});
for (const endpoint of connection.endpoints) {
  // A client that stops an endpoint for good on a refused registration says so with "refused"
  // (a plain listener: older clients never send it).
  (endpoint as EventTarget).addEventListener("refused", (event) => {
    const error = (event as Event & { error?: unknown }).error;
    journal.write({ ev: "refused", ep: endpoint.name, pid, error: String(error), t: wallClock() });
  });
  endpoint.addEventListener("bound", (event) => {
    bindings.set(endpoint.name, event.binding);
    journal.write({
      ev: "bound",
      ep: endpoint.name,
      pid,
      session: event.session,
      binding: event.binding,
      t: wallClock(),
    });
  });
}

// Event-loop stalls (the machine busy elsewhere, a long collection, a SIGSTOP): a tick that fires
// late records how long this process could not run its timers, so a confirmation sent late for
// that reason is not taken for one held back.
let due = performance.now() + STALL_TICK_MS;
setInterval(() => {
  const now = performance.now();
  const late = now - due;
  if (late >= STALL_MIN_LATE_MS) {
    journal.write({ ev: "stall", pid, ms: Math.round(late * 10) / 10, t: wallClock() });
  }
  due = now + STALL_TICK_MS;
}, STALL_TICK_MS);

journal.write({
  ev: "ready",
  worker: config.name,
  pid,
  runtime,
  concurrency: config.concurrency,
  t: wallClock(),
});
announce({ ready: true, pid });

process.on("SIGTERM", () => {
  connection.close().finally(() => process.exit(0));
});
