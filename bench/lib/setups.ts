/**
 * The two systems the network scenarios compare, each as a long-lived setup that can run a
 * batch of jobs repeatedly: the workpull server (in this process) with worker processes, and
 * the raw WebSocket baseline server (in this process) with raw client processes. Setups stay
 * up across rounds so that rounds of the two can alternate; each closes its processes (killed
 * and reaped) and its server.
 *
 * @module
 */

import process from "node:process";
import { BufferedProducer, JobQueue, MemoryJobStore, WorkPullingController } from "../../mod.ts";
import type { WorkPullingControllerOptions } from "../../mod.ts";
import type { WorkpullServer } from "../../server.ts";
import { type Child, spawnChild, withTimeout } from "./proc.ts";
import { now, repoPath, type Runtime, runtime, scriptCommand, until } from "./runtime.ts";
import { type RawServer, rawServer, serveJobQueue, serveWorkpull, workerToken } from "./servers.ts";
import type { WorkerConfig } from "../scenarios/worker_process.ts";

/**
 * Jobs per `submitMany` call of a throughput run: a producer with many jobs at hand hands them
 * over in batches (the producer's default `maxBatch`), as `JobQueue.addMany` and `POST /jobs` do.
 */
export const SUBMIT_BATCH = 1000;

/**
 * `submitMany` calls a throughput run keeps waiting at once: it awaits each batch's receipts
 * before it submits another, as a producer streaming a large source does (the BullMQ peer awaits
 * each `addBulk`, the NATS peer bounds the publishes awaiting their PubAck). Four batches keep
 * thousands of jobs ready beyond the workers' windows.
 */
export const SUBMIT_IN_FLIGHT = 4;

/**
 * Jobs a measuring tool runs through a system before it measures: workpull on Deno kept speeding
 * up until about 1,000,000 jobs (see `WARMUP_RUNS` in `scenarios/throughput.ts`).
 */
export const WARMUP_JOBS = 1_000_000;

/**
 * Run every one of `setups` unmeasured until each has moved {@linkcode WARMUP_JOBS} jobs, `jobs`
 * a run, taking turns as measured rounds do.
 */
export async function warmUp(setups: readonly Setup[], jobs: number): Promise<void> {
  if (!(jobs >= 1)) throw new RangeError(`a warm-up run needs at least 1 job, got ${jobs}`);
  for (let done = 0; done < WARMUP_JOBS; done += jobs) {
    for (const setup of setups) await setup.run(jobs);
  }
}

/**
 * Submit the jobs `{"n":0}`…`{"n":count-1}` with `submitMany`, {@linkcode SUBMIT_BATCH} a call
 * and `inFlight` calls waiting at a time (as many as there are batches: every call at once);
 * resolves when every job is stored.
 */
export async function submitStreaming(
  producer: BufferedProducer<{ n: number }>,
  count: number,
  inFlight = SUBMIT_IN_FLIGHT,
): Promise<void> {
  let next = 0;
  const feed = async () => {
    while (next < count) {
      const first = next;
      next = Math.min(count, next + SUBMIT_BATCH);
      const payloads = [];
      for (let n = first; n < next; n++) payloads.push({ n });
      await producer.submitMany(payloads);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, feed));
}

/** `queue.addMany` as {@linkcode submitStreaming} calls `submitMany`; resolves when all are added. */
export async function addStreaming(
  queue: JobQueue,
  count: number,
  inFlight = SUBMIT_IN_FLIGHT,
): Promise<void> {
  let next = 0;
  const feed = async () => {
    while (next < count) {
      const first = next;
      next = Math.min(count, next + SUBMIT_BATCH);
      const jobs = [];
      for (let n = first; n < next; n++) jobs.push({ payload: { n } });
      await queue.addMany(jobs);
    }
  };
  await Promise.all(Array.from({ length: inFlight }, feed));
}

/**
 * Spawn `topology.processes` workpull worker processes named `<prefix><i>`, each with
 * `topology.perProcess` endpoints and a worker token of its own; all or none (a failure kills the
 * ones that started).
 */
async function spawnWorkers(
  topology: Topology,
  prefix: string,
  label: string,
  config: (name: string) => Omit<WorkerConfig, "mode" | "token" | "concurrency">,
  target?: Runtime,
): Promise<Child[]> {
  const workers: Child[] = [];
  const spawned = await Promise.allSettled(
    Array.from({ length: topology.processes }, async (_, i) => {
      const name = `${prefix}${i}`;
      workers[i] = await spawnWorker(`${label} ${name}`, {
        mode: "workpull",
        token: await workerToken(name),
        concurrency: topology.perProcess,
        ...config(name),
      }, target);
    }),
  );
  const failed = spawned.find((outcome) => outcome.status === "rejected");
  if (failed) {
    await Promise.all(workers.filter(Boolean).map((worker) => worker.kill()));
    throw (failed as PromiseRejectedResult).reason;
  }
  return workers;
}

/** Where worker processes write CPU profiles, when profiling. */
export const profileDir: string | undefined = process.env.WORKPULL_BENCH_PROFILE;

/** Spawn one worker process (`bench/scenarios/worker_process.ts`) and wait until it is ready. */
export async function spawnWorker(
  name: string,
  config: WorkerConfig,
  target: Runtime = runtime,
): Promise<Child> {
  const { command, args } = scriptCommand(target, repoPath("bench/scenarios/worker_process.ts"));
  const env: Record<string, string> = { WORKPULL_BENCH: JSON.stringify(config) };
  if (profileDir) env.WORKPULL_BENCH_PROFILE = profileDir;
  const child = spawnChild(name, command, args, { env, stdin: true });
  try {
    await child.next((report) => report.ev === "ready", "ready", 30_000);
  } catch (error) {
    await child.kill();
    throw error;
  }
  return child;
}

/** A system under test that runs batches of jobs. */
export interface Setup {
  readonly label: string;
  /** Run `jobs` jobs; returns jobs per second. */
  run(jobs: number): Promise<number>;
  close(): Promise<void>;
}

/** Layout of the worker side: processes × endpoints (or sockets) per process. */
export interface Topology {
  readonly processes: number;
  readonly perProcess: number;
}

/** "1×4", "4×1". */
export function topologyLabel(topology: Topology): string {
  return `${topology.processes}×${topology.perProcess}`;
}

/** The workpull server with worker processes. */
export class WorkpullSetup implements Setup {
  readonly label: string;
  readonly producer: BufferedProducer<Record<string, unknown>>;
  readonly controller: WorkPullingController;
  readonly server: WorkpullServer;
  readonly workers: Child[];
  readonly #submit: "many" | "each";

  private constructor(
    label: string,
    producer: BufferedProducer<Record<string, unknown>>,
    controller: WorkPullingController,
    server: WorkpullServer,
    workers: Child[],
    submit: "many" | "each",
  ) {
    this.label = label;
    this.producer = producer;
    this.controller = controller;
    this.server = server;
    this.workers = workers;
    this.#submit = submit;
  }

  /** Start a controller and server here and `topology` worker processes. */
  static async start(
    topology: Topology,
    options: {
      window: number;
      handler?: WorkerConfig["handler"];
      controller?: Partial<WorkPullingControllerOptions>;
      maxBatch?: number;
      /** The worker processes' runtime (default: this one). */
      workerRuntime?: Runtime;
      /** How `run` submits: `submitMany` calls (default) or one `submit()` a job. */
      submit?: "many" | "each";
      /** Called with the controller before any worker connects (a tool's probe wraps it). */
      onController?: (controller: WorkPullingController) => void;
      /** The worker processes' `WebSocket`: the runtime's (default) or npm `ws`'s. */
      client?: WorkerConfig["client"];
    },
  ): Promise<WorkpullSetup> {
    const producer = new BufferedProducer<Record<string, unknown>>(
      options.maxBatch ? { maxBatch: options.maxBatch } : {},
    );
    const controller = new WorkPullingController({
      name: "bench",
      producer,
      ...options.controller,
    });
    options.onController?.(controller);
    await controller.start();
    const server = await serveWorkpull(controller, producer);
    let workers: Child[];
    try {
      workers = await spawnWorkers(topology, "w", "workpull worker", (name) => ({
        url: server.workersUrl.href,
        name,
        window: options.window,
        handler: options.handler ?? "noop",
        ...(options.client ? { client: options.client } : {}),
      }), options.workerRuntime);
    } catch (error) {
      await server.close();
      await controller.close();
      throw error;
    }
    return new WorkpullSetup(
      `workpull ${topologyLabel(topology)}`,
      producer,
      controller,
      server,
      workers,
      options.submit ?? "many",
    );
  }

  /**
   * Submit `jobs` jobs (streamed with {@linkcode submitStreaming}, or all at once with a
   * `submit()` each when the setup submits each); jobs/s from the first submission to the last
   * confirmation (or, with `done`, until it holds: a durable run waits for its last
   * confirmation to be written).
   */
  async run(jobs: number, done?: () => boolean): Promise<number> {
    const base = this.controller.stats().totals.confirmed;
    const target = base + jobs;
    const started = now();
    let submitted: Promise<void> = Promise.resolve();
    if (this.#submit === "each") {
      for (let n = 0; n < jobs; n++) this.producer.submit({ n }).catch(() => {});
    } else {
      submitted = submitStreaming(this.producer, jobs);
    }
    await Promise.all([
      submitted,
      until(
        done ?? (() => this.controller.stats().totals.confirmed >= target),
        `${jobs} confirmations`,
        120_000,
      ),
    ]);
    return jobs / ((now() - started) / 1000);
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((worker) => worker.kill()));
    await withTimeout(this.server.close(), 10_000, "the workpull server to close");
    await this.controller.close();
  }
}

/** The raw WebSocket baseline: its server here, raw client processes. */
export class RawSetup implements Setup {
  readonly label: string;
  readonly #server: RawServer;
  readonly clients: Child[];

  private constructor(label: string, server: RawServer, clients: Child[]) {
    this.label = label;
    this.#server = server;
    this.clients = clients;
  }

  static async start(topology: Topology, window: number): Promise<RawSetup> {
    const server = await rawServer(window);
    const clients: Child[] = [];
    try {
      for (let i = 0; i < topology.processes; i++) {
        clients.push(
          await spawnWorker(`raw client ${i}`, {
            mode: "raw",
            url: `ws://127.0.0.1:${server.port}/`,
            sockets: topology.perProcess,
          }),
        );
      }
      const sockets = topology.processes * topology.perProcess;
      await until(() => server.sockets === sockets, "raw sockets", 10_000);
    } catch (error) {
      await Promise.all(clients.map((client) => client.kill()));
      await server.close();
      throw error;
    }
    return new RawSetup(`raw WebSocket ${topologyLabel(topology)}`, server, clients);
  }

  async run(jobs: number): Promise<number> {
    const started = now();
    await withTimeout(this.#server.run(jobs), 120_000, `${jobs} raw confirmations`);
    return jobs / ((now() - started) / 1000);
  }

  async close(): Promise<void> {
    await Promise.all(this.clients.map((client) => client.kill()));
    await withTimeout(this.#server.close(), 10_000, "the raw server to close");
  }
}

/**
 * workpull as a job queue: a `JobQueue` on a `MemoryJobStore` (each job a record with its state,
 * tries and result; jobs added with `addMany`, streamed as {@linkcode submitStreaming} streams
 * `submitMany`, and taken from its backlog as workers ask) served here, with the same worker
 * processes as {@linkcode WorkpullSetup}, which report every job's outcome (feature `outcomes`).
 */
export class JobQueueSetup implements Setup {
  readonly label: string;
  readonly queue: JobQueue;
  readonly server: WorkpullServer;
  readonly workers: Child[];

  private constructor(label: string, queue: JobQueue, server: WorkpullServer, workers: Child[]) {
    this.label = label;
    this.queue = queue;
    this.server = server;
    this.workers = workers;
  }

  /** Start a job queue and server here and `topology` worker processes. */
  static async start(topology: Topology, options: { window: number }): Promise<JobQueueSetup> {
    const queue = new JobQueue({ name: "bench", store: new MemoryJobStore() });
    await queue.start();
    const server = await serveJobQueue(queue);
    let workers: Child[];
    try {
      workers = await spawnWorkers(topology, "q", "job queue worker", (name) => ({
        url: server.workersUrl.href,
        name,
        window: options.window,
        handler: "noop",
      }));
    } catch (error) {
      await server.close();
      await queue.close();
      throw error;
    }
    return new JobQueueSetup(`job queue ${topologyLabel(topology)}`, queue, server, workers);
  }

  /** Add `jobs` jobs; jobs/s from the first `addMany` until the controller has every outcome. */
  async run(jobs: number): Promise<number> {
    const target = this.queue.controller.stats().totals.confirmed + jobs;
    const started = now();
    await Promise.all([
      addStreaming(this.queue, jobs),
      until(
        () => this.queue.controller.stats().totals.confirmed >= target,
        `${jobs} completions`,
        120_000,
      ),
    ]);
    return jobs / ((now() - started) / 1000);
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((worker) => worker.kill()));
    await withTimeout(this.server.close(), 10_000, "the job queue server to close");
    await this.queue.close();
  }
}
