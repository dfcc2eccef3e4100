/**
 * The soak's processes and their lifecycles: one controller (or, with `--instances N`, N
 * instances of one flow), the workers and one producer, each started, killed and restarted by
 * the orchestrator, and always reaped.
 *
 * - Every spawn and every exit goes to the orchestrator's journal (`spawn`, `exit`), with the
 *   time: the verifier maps pids to workers and measures restarts from them.
 * - A kill is followed at once by a restart of the same role, on the same configuration: the
 *   controller (or an instance) on the same KV file and port, a worker under the same name (a
 *   new incarnation), the producer on its own journal.
 * - A process that exits without being told to is a **crash**: it is recorded (the soak fails on
 *   any) and restarted, as a supervisor would. One exception: an instance that was SIGSTOPped
 *   exits with `FENCED_EXIT` once it finds another instance took it over; that is expected, and
 *   it is restarted.
 * - A stopped worker or instance (SIGSTOP) has its SIGCONT scheduled; `resumeAll` sends it early.
 * - `shutdown` ends everything (workers first, so that no job is handed out again, then the
 *   controller and the producer) and waits until every process is reaped.
 *
 * @module
 */

import { Child, type ChildExit, type ChildSpec } from "./child.ts";
import { FENCED_EXIT } from "./instance_exit.ts";
import { type Journal, wallClock } from "./journal.ts";
import type { WorkerProxy } from "./proxy.ts";
import { incarnationSeed, type RemoteKvSettings } from "./remote_kv.ts";
import type { Runtime, SoakPaths, SoakRecord } from "./records.ts";

/** One worker process slot. */
export interface WorkerSlot {
  readonly name: string;
  readonly runtime: Runtime;
  readonly concurrency: number;
  readonly token: string;
  readonly proxy: WorkerProxy;
  child: Child | undefined;
  /** The pending SIGCONT of a stopped worker. */
  resume: ReturnType<typeof setTimeout> | undefined;
  /** True while a SIGTERMed worker drains (until it exited and was started again). */
  draining?: boolean;
}

/** How long a SIGTERMed worker may take to drain and exit before it is SIGKILLed, ms. */
const TERM_DEADLINE_MS = 45_000;

/** The controller, or one instance of the shared flow, on its fixed port. */
export interface ControllerSlot {
  /** "controller", or the instance's name (i1, i2, ...). */
  readonly name: string;
  readonly port: number;
  child: Child | undefined;
  /** The pid of the process that announced it is ready. */
  readyPid: number | undefined;
  /** The pending SIGCONT of a stopped instance. */
  resume: ReturnType<typeof setTimeout> | undefined;
}

/** What the cluster needs to start its processes. */
export interface ClusterSettings {
  readonly paths: SoakPaths;
  /** The repository root (the children's working directory). */
  readonly root: string;
  readonly deno: string;
  readonly bun: string;
  readonly journal: Journal;
  readonly flow: string;
  /** With several instances: their lease TTL, ms (undefined: one controller). */
  readonly leaseTtl: number | undefined;
  /**
   * With several instances and `--kv-latency`/`--kv-faults`: the instances' `RemoteKv` (each
   * incarnation's fault draws get their own seed from `seed`).
   */
  readonly remoteKv?: Omit<RemoteKvSettings, "seed">;
  readonly secret: string;
  readonly clientToken: string;
  readonly grace: number;
  readonly rate: number;
  readonly seed: number;
  /** Epoch ms after which every child exits by itself. */
  readonly deadline: number;
  /** Progress lines for the operator. */
  readonly log: (line: string) => void;
}

const module = (name: string) => new URL(`./${name}`, import.meta.url).pathname;

/** The soak's processes. */
export class Cluster {
  readonly workers: ReadonlyMap<string, WorkerSlot>;
  /** The controller, or the instances of the shared flow. */
  readonly controllers: ReadonlyMap<string, ControllerSlot>;
  producer: Child | undefined;
  #closing = false;
  /** Every process not reaped yet, whatever its slot. */
  readonly #live = new Set<Child>();
  /** Instances that were SIGSTOPped: their fenced exit is expected. */
  readonly #stoppedInstances = new Set<number>();
  /** Processes started so far per controller slot (numbers each incarnation). */
  readonly #incarnations = new Map<string, number>();
  readonly #settings: ClusterSettings;

  constructor(
    settings: ClusterSettings,
    controllers: readonly ControllerSlot[],
    workers: readonly WorkerSlot[],
  ) {
    this.#settings = settings;
    this.controllers = new Map(controllers.map((slot) => [slot.name, slot]));
    this.workers = new Map(workers.map((slot) => [slot.name, slot]));
  }

  /** The single controller (or the first instance). */
  get controller(): Child | undefined {
    return [...this.controllers.values()][0]?.child;
  }

  /** True when every controller slot's current process has announced it is ready. */
  get controllerReady(): boolean {
    return [...this.controllers.values()].every((slot) => this.slotReady(slot));
  }

  /** Whether a slot's current process announced it is ready (and is not stopped). */
  slotReady(slot: ControllerSlot): boolean {
    return slot.child !== undefined && slot.readyPid === slot.child.pid &&
      slot.resume === undefined;
  }

  /** Workers not stopped. */
  get runningWorkers(): WorkerSlot[] {
    return [...this.workers.values()].filter((slot) => slot.resume === undefined);
  }

  startController(slot: ControllerSlot): Child {
    const s = this.#settings;
    const shared = s.leaseTtl !== undefined;
    const incarnation = (this.#incarnations.get(slot.name) ?? 0) + 1;
    this.#incarnations.set(slot.name, incarnation);
    const remoteKv: RemoteKvSettings | undefined = shared && s.remoteKv
      ? { ...s.remoteKv, seed: incarnationSeed(s.seed, slot.name, incarnation) }
      : undefined;
    const config = {
      deadline: s.deadline,
      kvPath: s.paths.kv,
      dir: s.paths.controllers,
      port: slot.port,
      secret: s.secret,
      name: s.flow,
      reconnectGrace: s.grace,
      ...(shared ? { slot: slot.name, leaseTtl: s.leaseTtl } : {}),
      ...(remoteKv ? { remoteKv } : {}),
    };
    const file = shared ? "instance_process.ts" : "controller_process.ts";
    slot.child = this.#spawn(
      {
        role: "controller",
        name: slot.name,
        runtime: "deno",
        command: s.deno,
        args: ["run", "-A", "--unstable-kv", "--quiet", module(file)],
        config,
        logs: s.paths.logs,
        onMessage: (message) => {
          if (message.ready === true) slot.readyPid = message.pid as number;
        },
      },
      () => slot.child,
      () => this.startController(slot),
    );
    return slot.child;
  }

  startWorker(slot: WorkerSlot): Child {
    const s = this.#settings;
    slot.child = this.#spawn(
      {
        role: "worker",
        name: slot.name,
        runtime: slot.runtime,
        command: slot.runtime === "deno" ? s.deno : s.bun,
        args: slot.runtime === "deno"
          ? ["run", "-A", "--quiet", module("worker_process.ts")]
          : [module("worker_process.ts")],
        config: {
          deadline: s.deadline,
          url: `ws://127.0.0.1:${slot.proxy.port}/workers`,
          token: slot.token,
          producer: s.flow,
          name: slot.name,
          concurrency: slot.concurrency,
          seed: s.seed,
          dir: s.paths.workers,
        },
        logs: s.paths.logs,
      },
      () => slot.child,
      () => this.startWorker(slot),
    );
    return slot.child;
  }

  startProducer(): Child {
    const s = this.#settings;
    this.producer = this.#spawn(
      {
        role: "producer",
        name: "producer",
        runtime: "deno",
        command: s.deno,
        args: ["run", "-A", "--quiet", module("producer_process.ts")],
        config: {
          deadline: s.deadline,
          urls: [...this.controllers.values()].map((c) => `http://127.0.0.1:${c.port}/jobs`),
          token: s.clientToken,
          rate: s.rate,
          dir: s.paths.producers,
        },
        logs: s.paths.logs,
      },
      () => this.producer,
      () => this.startProducer(),
    );
    return this.producer;
  }

  /** SIGKILL a controller (or instance), reap it, start a new one on the same file and port. */
  async restartController(slot: ControllerSlot): Promise<void> {
    clearTimeout(slot.resume);
    slot.resume = undefined;
    await slot.child?.kill();
    if (!this.#closing) this.startController(slot);
  }

  /**
   * SIGSTOP an instance for `ms`, then SIGCONT (recorded as `cont`). Past its lease it finds
   * itself taken over and exits (expected); it is then restarted.
   */
  stopController(slot: ControllerSlot, ms: number): void {
    const child = slot.child;
    if (!child) return;
    this.#stoppedInstances.add(child.pid);
    child.signal("SIGSTOP");
    slot.resume = setTimeout(() => this.#resumeController(slot, child), ms);
  }

  /** SIGKILL a worker, reap it, start a new incarnation under the same name. */
  async restartWorker(slot: WorkerSlot): Promise<void> {
    clearTimeout(slot.resume);
    slot.resume = undefined;
    await slot.child?.kill();
    if (!this.#closing) this.startWorker(slot);
  }

  /**
   * SIGTERM a worker: it drains (its running jobs finish and are confirmed) and exits, and is
   * started again under the same name. One still running after {@linkcode TERM_DEADLINE_MS} is
   * SIGKILLed, and the journal says so (`term-timeout`): its jobs run again unexcused.
   */
  termWorker(slot: WorkerSlot): void {
    const child = slot.child;
    if (!child || slot.draining) return;
    slot.draining = true;
    void child.stop(TERM_DEADLINE_MS).then((exit) => {
      if (exit.signal === "SIGKILL") {
        this.#settings.journal.write({ ev: "term-timeout", pid: child.pid, t: wallClock() });
        this.#settings.log(`soak: ${slot.name} (pid ${child.pid}) did not drain; killed`);
      }
      slot.draining = false;
      if (!this.#closing && slot.child === child) this.startWorker(slot);
    });
  }

  /** SIGKILL the producer, reap it, start a new one (it resumes from its journal). */
  async restartProducer(): Promise<void> {
    await this.producer?.kill();
    if (!this.#closing) this.startProducer();
  }

  /** SIGSTOP a worker for `ms`, then SIGCONT (recorded as `cont`). */
  stopWorker(slot: WorkerSlot, ms: number): void {
    const child = slot.child;
    if (!child) return;
    child.signal("SIGSTOP");
    slot.resume = setTimeout(() => this.#resume(slot, child), ms);
  }

  /** SIGCONT every stopped worker and instance now. */
  resumeAll(): void {
    for (const slot of this.workers.values()) {
      if (slot.resume !== undefined && slot.child) {
        clearTimeout(slot.resume);
        this.#resume(slot, slot.child);
      }
    }
    for (const slot of this.controllers.values()) {
      if (slot.resume !== undefined && slot.child) {
        clearTimeout(slot.resume);
        this.#resumeController(slot, slot.child);
      }
    }
  }

  /** SIGTERM the producer: it finishes the requests in flight (bounded) and exits. */
  async stopProducer(): Promise<ChildExit | undefined> {
    return await this.producer?.stop(20_000);
  }

  /** End every process and reap it. Idempotent. */
  async shutdown(): Promise<void> {
    this.#closing = true;
    for (const slot of [...this.workers.values(), ...this.controllers.values()]) {
      clearTimeout(slot.resume);
      slot.resume = undefined;
    }
    const live = [...this.#live];
    const workers = live.filter((child) => child.spec.role === "worker");
    await Promise.allSettled(workers.map((child) => child.kill()));
    const others = live.filter((child) => child.spec.role !== "worker");
    await Promise.allSettled(others.map((child) => child.stop(3000)));
  }

  #resume(slot: WorkerSlot, child: Child): void {
    slot.resume = undefined;
    if (!child.running) return;
    this.#record({ ev: "cont", name: slot.name, pid: child.pid, t: wallClock() });
    child.signal("SIGCONT");
  }

  #resumeController(slot: ControllerSlot, child: Child): void {
    slot.resume = undefined;
    if (!child.running) return;
    this.#record({ ev: "cont", name: slot.name, pid: child.pid, t: wallClock() });
    child.signal("SIGCONT");
  }

  /** Start a process; after a crash, `restart` it unless its slot already holds another. */
  #spawn(
    spec: Omit<ChildSpec, "cwd">,
    current: () => Child | undefined,
    restart: () => void,
  ): Child {
    const child = new Child({ ...spec, cwd: this.#settings.root });
    this.#live.add(child);
    this.#record({
      ev: "spawn",
      role: spec.role,
      name: spec.name,
      runtime: spec.runtime,
      pid: child.pid,
      t: wallClock(),
    });
    child.exited.then((exit) => {
      this.#live.delete(child);
      const fenced = exit.code === FENCED_EXIT && this.#stoppedInstances.has(child.pid);
      const expected = child.ending || this.#closing || fenced;
      this.#record({
        ev: "exit",
        role: spec.role,
        name: spec.name,
        pid: child.pid,
        code: exit.code,
        signal: exit.signal,
        expected,
        t: wallClock(),
      });
      if (fenced && !this.#closing) {
        this.#settings.log(`${spec.name} (pid ${child.pid}) was taken over; restarting it`);
        setTimeout(() => {
          if (!this.#closing && current() === child) restart();
        }, 100);
        return;
      }
      if (expected) return;
      this.#settings.log(
        `crash: ${spec.name} (pid ${child.pid}) exited with ${
          exit.signal ?? exit.code
        }; restarting`,
      );
      setTimeout(() => {
        if (!this.#closing && current() === child) restart();
      }, 100);
    });
    return child;
  }

  #record(record: SoakRecord): void {
    this.#settings.journal.write(record);
  }
}
