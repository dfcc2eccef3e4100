/**
 * The soak's controller process (Deno): a `WorkPullingController` on a Deno KV file
 * (`DenoKvWorkQueue`), fed by a `BufferedProducer` that `POST /jobs` fills, served by `serveDeno`
 * with a secret on a fixed port, so that a restarted process takes over the same file and port.
 *
 * It records in its journal what the verifier cannot see from the workers:
 * - `ready` with its session (a run's session, from the worker's journal, says which controller
 *   incarnation delivered it: that measures restart → first delivery), and when its modules were
 *   loaded, its KV file opened and its port listening (where a restart's time goes);
 * - every binding that starts or ends, with the reason, and the MessageIDs each ending requeued;
 * - every job whose confirmation it applied (`deliveryConfirmation` is on for this: the
 *   producer is told of each confirmation, and this one writes it down);
 * - every durable commit that succeeded, with its start and end: a confirmation that reached the
 *   controller after the start of the last commit that finished before a SIGKILL was not durable
 *   (`classify.ts` bounds duplicates of kind "unconfirmed at controller kill" with it).
 *
 * A terminal failure (`delivery-failed`) is recorded and ends the process with exit code 3, as a
 * supervisor would see it; the orchestrator counts it as a crash, which fails the soak.
 *
 * @module
 */

import { join } from "node:path";
import process from "node:process";
import { BufferedProducer, type DeliveryConfirmed, WorkPullingController } from "../../mod.ts";
import { DenoKvWorkQueue } from "../../deno_kv.ts";
import { serveDeno } from "../../deno.ts";
import type { WorkpullServer } from "../../server.ts";
import { journalBindings, journalCommits } from "./controller_journal.ts";
import { Journal, wallClock } from "./journal.ts";
import { announce, type ChildBase, childConfig } from "./lifeline.ts";
import { queuePrefix } from "./queued.ts";

/** The configuration of the controller process. */
export interface ControllerConfig extends ChildBase {
  readonly kvPath: string;
  /** The directory of controller journals. */
  readonly dir: string;
  readonly port: number;
  readonly secret: string;
  readonly name: string;
  readonly reconnectGrace: number;
}

// Module bodies run once every import is loaded: this is the end of the process's start-up.
const modulesLoaded = wallClock();
const config = childConfig<ControllerConfig>();
const pid = process.pid;
const journal = new Journal(join(config.dir, `${pid}.jsonl`));

const kv = await Deno.openKv(config.kvPath);
const kvOpened = wallClock();
const queue = new DenoKvWorkQueue(kv, { prefix: queuePrefix(config.name) });

let loaded = 0;
const load = queue.load.bind(queue);
queue.load = async (options) => {
  const result = await load(options);
  loaded = result.state.unconfirmed.length;
  return result;
};

journalCommits(queue, journal, pid, queue.batchLimits.maxOperations);

/** A `BufferedProducer` that records every confirmation the controller applies. */
class JournaledProducer extends BufferedProducer {
  override onDeliveryConfirmed(notice: DeliveryConfirmed): void {
    journal.write({ ev: "confirmed", pid, id: notice.messageId, t: wallClock() });
    super.onDeliveryConfirmed(notice);
  }
}

const producer = new JournaledProducer();
const controller = new WorkPullingController({
  name: config.name,
  producer,
  queue,
  reconnectGrace: config.reconnectGrace,
  deliveryConfirmation: true,
});
journalBindings(controller, journal, pid);
controller.addEventListener("delivery-failed", (event) => {
  journal.write({
    ev: "failed",
    pid,
    stage: event.stage,
    error: String(event.error),
    t: wallClock(),
  });
  console.error(`soak controller: terminal failure at ${event.stage}:`, event.error);
  process.exit(3);
});

// Start first (the state becomes "loading" at once, and registrations are served while the
// queue loads), then listen, then wait for the load.
const started = controller.start();
started.catch(() => {}); // awaited below; a failure is reported there
const server = await listen();
const listening = wallClock();
try {
  await started;
} catch (error) {
  journal.write({ ev: "failed", pid, stage: "load", error: String(error), t: wallClock() });
  console.error("soak controller: could not load the queue:", error);
  process.exit(3);
}
journal.write({
  ev: "ready",
  pid,
  session: controller.session,
  loaded,
  modulesLoaded,
  kvOpened,
  listening,
  t: wallClock(),
});
announce({ ready: true, pid, session: controller.session });

/** Listen on the fixed port; the previous incarnation's socket may take a moment to go. */
async function listen(): Promise<WorkpullServer> {
  for (let attempt = 1;; attempt++) {
    try {
      return await serveDeno({
        controller,
        producer,
        auth: { secret: config.secret },
        hostname: "127.0.0.1",
        port: config.port,
        submitTimeout: 10_000,
      });
    } catch (error) {
      if (!(error instanceof Deno.errors.AddrInUse) || attempt >= 250) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

process.on("SIGTERM", async () => {
  await server.close();
  await controller.close();
  kv.close();
  process.exit(0);
});
