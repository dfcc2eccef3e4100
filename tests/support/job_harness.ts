/**
 * Test support for job queues: a `JobQueue` on a `MemoryJobStore` under a simulated clock, with
 * in-process workers whose handlers the test scripts, and a way to run simulated time.
 */

import {
  connectInProcess,
  type Delivery,
  type InProcessConnection,
  type JobInfo,
  JobQueue,
  type LifecycleDefaults,
  type Logger,
  MemoryJobStore,
  type StoreSettingsOptions,
  WorkerEndpoint,
} from "../../mod.ts";
import { SimulatedClock } from "../../testing.ts";

/** A run of a handler, as the test sees it. */
export interface Run {
  readonly worker: string;
  readonly messageId: string;
  readonly attempt: number;
  readonly at: number;
  readonly signal: AbortSignal;
}

/** A job queue under a simulated clock. */
export class JobSystem {
  readonly clock = new SimulatedClock();
  readonly store: MemoryJobStore;
  readonly queue: JobQueue;
  readonly runs: Run[] = [];
  readonly links = new Map<string, InProcessConnection>();
  readonly workers = new Map<string, WorkerEndpoint<unknown>>();

  constructor(
    options: StoreSettingsOptions & { defaults?: LifecycleDefaults } = {},
    controller: { maxBatch?: number; retryInterval?: number; logger?: Logger } = {},
  ) {
    this.store = new MemoryJobStore({ ...options, clock: this.clock, random: () => 0.5 });
    this.queue = new JobQueue({
      name: "jobs",
      store: this.store,
      controller: { ...controller, clock: this.clock },
    });
  }

  /**
   * Connect a worker whose handler is `handler` (default: resolve at once); every run is
   * recorded in `runs`.
   */
  worker(
    name: string,
    handler: (delivery: Delivery<unknown>) => unknown = () => {},
    window = 10,
  ): WorkerEndpoint<unknown> {
    const worker = new WorkerEndpoint<unknown>({
      producer: "jobs",
      name,
      window,
      clock: this.clock,
      resendInterval: 1000,
      handler: (delivery) => {
        this.runs.push({
          worker: name,
          messageId: delivery.messageId,
          attempt: delivery.attempt,
          at: this.clock.now(),
          signal: delivery.signal,
        });
        return handler(delivery);
      },
    });
    this.workers.set(name, worker);
    this.links.set(name, connectInProcess(this.queue.controller, worker));
    return worker;
  }

  /** Drop a worker's link as a crash would (its handler may still be running). */
  crash(name: string): void {
    this.links.get(name)?.close(1006, "crash");
    this.workers.get(name)?.close();
  }

  /** Let `ms` of simulated time pass in steps, letting everything run. */
  async run(ms: number, step = 10): Promise<void> {
    for (let t = 0; t < ms; t += step) await this.clock.advanceAsync(Math.min(step, ms - t));
    await this.clock.advanceAsync(0);
  }

  /** Run simulated time until `condition` holds (bounded). */
  async until(condition: () => boolean | Promise<boolean>, what: string, limit = 600_000) {
    for (let t = 0; t <= limit; t += 10) {
      if (await condition()) return;
      await this.clock.advanceAsync(10);
    }
    throw new Error(`not within ${limit} ms of simulated time: ${what}`);
  }

  /** The job's state now. */
  async state(id: string): Promise<JobInfo["state"] | undefined> {
    return (await this.queue.get(id))?.state;
  }

  /** MessageIDs run, in order. */
  ran(): string[] {
    return this.runs.map((run) => run.messageId);
  }

  /** Close the workers (a hung handler is aborted at its drain time) and the queue. */
  async close(): Promise<void> {
    const closing = [...this.workers.values()].map((worker) => worker.close());
    await this.clock.advanceAsync(10_000);
    await Promise.all(closing);
    await this.queue.close();
  }
}
