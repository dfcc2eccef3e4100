/**
 * One instance of the soak's shared flow (`--instances N`, Deno): a `JobQueue` on a
 * `DenoKvClusterStore` over the KV file all instances share, served by `serveDeno` on its own
 * fixed port of 127.0.0.1: the workers' WebSocket route and the job routes, whose `POST /jobs`
 * answers once the jobs are in the shared backlog (durable: any instance may run them). Its
 * instance id is random, so a restarted process is a new instance and its predecessor's jobs
 * come back by takeover, as on Deno Deploy.
 *
 * It journals what `controller_process.ts` journals (ready with its session, bindings, durable
 * commits, self-restarts, terminal failures) plus its instance id, the takeovers it made and its
 * own fencing. The confirmations it applied are journaled from its commits (its producer is the
 * job queue's own): each confirmation a commit wrote, at the commit's start, so the verifier
 * knows them durable; one applied but not yet written when the instance died is not journaled,
 * and the verifier falls back on when it left its worker.
 *
 * With `--kv-latency` or `--kv-faults` it opens the KV file through a `RemoteKv` (see
 * `remote_kv.ts`) and journals every commit fault it meets (`kv-fault`).
 *
 * When another instance took it over (it was SIGSTOPped past its lease), its controller fails
 * with a `QueueFencedError`: it records that and exits with code 4 (`FENCED_EXIT`), which the
 * orchestrator expects after an instance stop and answers with a restart, as a supervisor would.
 * Any other terminal failure is exit code 3, a crash.
 *
 * @module
 */

import { join } from "node:path";
import process from "node:process";
import { JobQueue } from "../../mod.ts";
import { type ClusterKvLike, DenoKvClusterStore } from "../../deno_kv.ts";
import { serveDeno } from "../../deno.ts";
import type { WorkpullServer } from "../../server.ts";
import { FENCED_EXIT } from "./instance_exit.ts";
import { journalBindings, journalCommits } from "./controller_journal.ts";
import { Journal, wallClock } from "./journal.ts";
import { announce, type ChildBase, childConfig } from "./lifeline.ts";
import { remoteKv, type RemoteKvSettings } from "./remote_kv.ts";

/** The configuration of an instance process. */
export interface InstanceConfig extends ChildBase {
  readonly kvPath: string;
  /** The directory of controller journals (instances journal there too). */
  readonly dir: string;
  readonly port: number;
  readonly secret: string;
  /** The flow's name. */
  readonly name: string;
  /** The instance's slot name (i1, i2, ...). */
  readonly slot: string;
  readonly reconnectGrace: number;
  readonly leaseTtl: number;
  /** `--kv-latency`, `--kv-faults`: reach the KV file through a `RemoteKv` (`remote_kv.ts`). */
  readonly remoteKv?: RemoteKvSettings;
}

const modulesLoaded = wallClock();
const config = childConfig<InstanceConfig>();
const pid = process.pid;
const journal = new Journal(join(config.dir, `${pid}.jsonl`));

const local = await Deno.openKv(config.kvPath);
const kv = config.remoteKv === undefined ? local : remoteKv(
  local,
  config.remoteKv,
  (fault, commit) => journal.write({ ev: "kv-fault", pid, fault, commit, t: wallClock() }),
);
const kvOpened = wallClock();
const store = new DenoKvClusterStore(kv as unknown as ClusterKvLike, {
  prefix: ["soak", config.name],
  maxBacklog: 100_000_000,
  retention: 30 * 60_000,
  instance: {
    address: `http://127.0.0.1:${config.port}`,
    leaseTtl: config.leaseTtl,
    renewInterval: Math.round(config.leaseTtl / 3),
  },
});

let loaded = 0;
const load = store.load.bind(store);
store.load = async (options) => {
  const result = await load(options);
  loaded = result.state.unconfirmed.length;
  return result;
};

journalCommits(store, journal, pid, store.batchLimits.maxOperations, true);
store.addEventListener("takeover", ({ takeover }) => {
  journal.write({
    ev: "takeover",
    pid,
    of: takeover.instance,
    jobs: takeover.jobs,
    expiredAt: takeover.expiredAt,
    t: wallClock(),
  });
});
store.addEventListener("fenced", () => journal.write({ ev: "fenced", pid, t: wallClock() }));

const queue = new JobQueue({
  name: config.name,
  store,
  controller: { reconnectGrace: config.reconnectGrace },
});
const controller = queue.controller;
journalBindings(controller, journal, pid);
controller.addEventListener("delivery-failed", (event) => {
  const error = event.error as Error | undefined;
  journal.write({ ev: "failed", pid, stage: event.stage, error: String(error), t: wallClock() });
  if (error?.name === "QueueFencedError") {
    console.error(`soak instance ${config.slot}: taken over by another instance (${event.stage})`);
    process.exit(FENCED_EXIT);
  }
  console.error(`soak instance ${config.slot}: terminal failure at ${event.stage}:`, error);
  process.exit(3);
});

const started = queue.start();
started.catch(() => {}); // awaited below; a failure is reported there
const server = await listen();
const listening = wallClock();
try {
  await started;
} catch (error) {
  journal.write({ ev: "failed", pid, stage: "load", error: String(error), t: wallClock() });
  console.error(`soak instance ${config.slot}: could not load:`, error);
  process.exit(3);
}
journal.write({
  ev: "ready",
  pid,
  session: controller.session,
  name: config.slot,
  instance: store.instance,
  loaded,
  modulesLoaded,
  kvOpened,
  listening,
  t: wallClock(),
});
announce({ ready: true, pid, session: controller.session, instance: store.instance });

/** Listen on the slot's fixed port; the previous incarnation's socket may take a moment to go. */
async function listen(): Promise<WorkpullServer> {
  for (let attempt = 1;; attempt++) {
    try {
      return await serveDeno({
        queue,
        auth: { secret: config.secret },
        hostname: "127.0.0.1",
        port: config.port,
        drainOnSignals: false,
      });
    } catch (error) {
      if (!(error instanceof Deno.errors.AddrInUse) || attempt >= 250) throw error;
      await new Promise((resolve) => setTimeout(resolve, 20));
    }
  }
}

process.on("SIGTERM", async () => {
  await server.close();
  await queue.close();
  kv.close();
  process.exit(0);
});
