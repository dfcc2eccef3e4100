/**
 * The seeded fault schedule: every 1–5 s one fault, until the load phase ends.
 *
 * | kind | what happens |
 * |---|---|
 * | `worker-kill` | SIGKILL a worker process, reap it, start it again under the same name |
 * | `worker-term` | SIGTERM a worker process: it drains (its running jobs, often a long one of 5–20 s, finish and are confirmed) and exits; then start it again under the same name. Nothing excuses a duplicate of it |
 * | `worker-stop` | SIGSTOP a worker process for 3–12 s, then SIGCONT |
 * | `controller-kill` | SIGKILL the controller, reap it, restart it on the same KV file and port |
 * | `tcp-cut` | drop every TCP connection of one worker at its proxy |
 * | `producer-kill` | SIGKILL the producer, reap it, start it again (it resumes from its journal) |
 * | `instance-kill` | (`--instances N`) SIGKILL an instance, reap it, start a new instance on its port |
 * | `instance-stop` | (`--instances N`) SIGSTOP an instance for 1–4 s past its lease, then SIGCONT |
 *
 * Kinds are drawn from a shuffled bag (two of each worker and controller kind, one producer kill
 * per bag; with instances, two instance kills and one instance stop instead of the controller
 * kills), so every kind shows up even in a short soak. A kind that cannot apply right now stays
 * in the bag and the next one is taken: the controller is killed only once its current
 * incarnation is ready (so that each restart gets to deliver), an instance only while every
 * instance is ready and none is stopped (so a survivor is always there to take over), and a
 * stopped worker is not stopped again. Each fault is written to the orchestrator's journal just
 * before its signal or cut, with the time.
 *
 * @module
 */

import type { Cluster, ControllerSlot, WorkerSlot } from "./cluster.ts";
import { type Journal, wallClock } from "./journal.ts";
import { between, prng } from "./random.ts";
import type { FaultKind, FaultRecord } from "./records.ts";

const BAG: readonly FaultKind[] = [
  "worker-kill",
  "worker-kill",
  "worker-term",
  "worker-term",
  "worker-stop",
  "worker-stop",
  "controller-kill",
  "controller-kill",
  "tcp-cut",
  "tcp-cut",
  "producer-kill",
];

/** The bag with several instances (`--instances N`). */
const SHARED_BAG: readonly FaultKind[] = [
  "worker-kill",
  "worker-kill",
  "worker-term",
  "worker-term",
  "worker-stop",
  "worker-stop",
  "instance-kill",
  "instance-kill",
  "instance-stop",
  "tcp-cut",
  "tcp-cut",
  "producer-kill",
];

/** The seeded choices: when, which kind, which target, how long. */
export class FaultPlan {
  readonly #random: () => number;
  readonly #lease: number | undefined;
  #bag: FaultKind[] = [];

  /** A plan for one controller, or for instances whose lease is `lease` ms. */
  constructor(seed: number, lease?: number) {
    this.#random = prng(seed ^ 0x0fa017);
    this.#lease = lease;
  }

  /** Milliseconds until the next fault: 1000..5000. */
  nextDelay(): number {
    return between(this.#random, 1000, 5000);
  }

  /**
   * The first kind in the bag that `applicable` allows (the others stay in the bag for later),
   * or undefined when none does.
   */
  nextKind(applicable: (kind: FaultKind) => boolean): FaultKind | undefined {
    if (this.#bag.length === 0) this.#bag = this.#shuffled();
    const index = this.#bag.findIndex(applicable);
    return index < 0 ? undefined : this.#bag.splice(index, 1)[0];
  }

  pick<T>(items: readonly T[]): T {
    return items[Math.floor(this.#random() * items.length)];
  }

  /** How long a worker stays stopped: 3000..12000 ms. */
  stopDuration(): number {
    return between(this.#random, 3000, 12_000);
  }

  /** How long an instance stays stopped: 1–4 s past its lease. */
  instanceStopDuration(): number {
    return (this.#lease ?? 0) + between(this.#random, 1000, 4000);
  }

  #shuffled(): FaultKind[] {
    const bag = [...(this.#lease === undefined ? BAG : SHARED_BAG)];
    for (let i = bag.length - 1; i > 0; i--) {
      const j = Math.floor(this.#random() * (i + 1));
      [bag[i], bag[j]] = [bag[j], bag[i]];
    }
    return bag;
  }
}

/** Inject faults until `until` (epoch ms) or until `signal` aborts. */
export async function injectFaults(
  cluster: Cluster,
  plan: FaultPlan,
  journal: Journal,
  until: number,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<void> {
  const started = wallClock();
  for (;;) {
    const delay = plan.nextDelay();
    if (wallClock() + delay >= until) {
      await sleep(until - wallClock(), signal);
      return;
    }
    await sleep(delay, signal);
    if (signal.aborted) return;
    const kind = plan.nextKind((kind) => applicable(cluster, kind));
    if (kind === undefined) continue;
    const record = await inject(cluster, plan, journal, kind);
    if (record) {
      const at = ((record.t - started) / 1000).toFixed(1);
      const extra = record.ms !== undefined
        ? ` for ${(record.ms / 1000).toFixed(1)} s`
        : record.connections !== undefined
        ? ` (${record.connections} connections)`
        : "";
      log(`fault +${at}s ${record.kind} ${record.target} (pid ${record.pid})${extra}`);
    }
  }
}

function applicable(cluster: Cluster, kind: FaultKind): boolean {
  switch (kind) {
    case "controller-kill":
    case "instance-kill":
    case "instance-stop":
      return cluster.controllerReady;
    case "worker-stop":
      return cluster.runningWorkers.some((slot) => slot.child?.running && !slot.draining);
    case "producer-kill":
      return cluster.producer?.running === true;
    default:
      return [...cluster.workers.values()].some((slot) => slot.child?.running && !slot.draining);
  }
}

async function inject(
  cluster: Cluster,
  plan: FaultPlan,
  journal: Journal,
  kind: FaultKind,
): Promise<FaultRecord | undefined> {
  const record = (target: string, pid: number, extra: Partial<FaultRecord> = {}) => {
    const fault: FaultRecord = { ev: "fault", kind, target, pid, t: wallClock(), ...extra };
    journal.write(fault);
    return fault;
  };
  // A draining worker is left alone: what happens to it is the graceful stop's alone.
  const live = (slots: readonly WorkerSlot[]) =>
    slots.filter((slot) => slot.child?.running && !slot.draining);
  switch (kind) {
    case "worker-kill": {
      const slot = plan.pick(live([...cluster.workers.values()]));
      const fault = record(slot.name, slot.child!.pid);
      await cluster.restartWorker(slot);
      return fault;
    }
    case "worker-term": {
      const slot = plan.pick(live([...cluster.workers.values()]));
      const fault = record(slot.name, slot.child!.pid);
      cluster.termWorker(slot);
      return fault;
    }
    case "worker-stop": {
      const slot = plan.pick(live(cluster.runningWorkers));
      const ms = plan.stopDuration();
      const fault = record(slot.name, slot.child!.pid, { ms });
      cluster.stopWorker(slot, ms);
      return fault;
    }
    case "controller-kill": {
      const slot = [...cluster.controllers.values()][0];
      const fault = record(slot.name, slot.child!.pid);
      await cluster.restartController(slot);
      return fault;
    }
    case "instance-kill": {
      const slot: ControllerSlot = plan.pick([...cluster.controllers.values()]);
      const fault = record(slot.name, slot.child!.pid);
      await cluster.restartController(slot);
      return fault;
    }
    case "instance-stop": {
      const slot: ControllerSlot = plan.pick([...cluster.controllers.values()]);
      const ms = plan.instanceStopDuration();
      const fault = record(slot.name, slot.child!.pid, { ms });
      cluster.stopController(slot, ms);
      return fault;
    }
    case "tcp-cut": {
      const slot = plan.pick(live([...cluster.workers.values()]));
      const t = wallClock();
      const connections = slot.proxy.cut();
      const fault: FaultRecord = {
        ev: "fault",
        kind,
        target: slot.name,
        pid: slot.child!.pid,
        t,
        connections,
      };
      journal.write(fault);
      return fault;
    }
    case "producer-kill": {
      const fault = record("producer", cluster.producer!.pid);
      await cluster.restartProducer();
      return fault;
    }
  }
}

function sleep(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal.aborted || ms <= 0) return resolve();
    const timer = setTimeout(done, ms);
    signal.addEventListener("abort", done, { once: true });
    function done() {
      clearTimeout(timer);
      signal.removeEventListener("abort", done);
      resolve();
    }
  });
}
