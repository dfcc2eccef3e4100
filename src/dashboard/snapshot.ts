/**
 * What the dashboard shows at one moment, as one JSON object: the workers, the counts, the
 * totals, the throughput of the last minutes, recent failures and the oldest dead letters.
 *
 * Built once per tick for every viewer (`live_stream.ts` sends the same text to all). Its size
 * is bounded whatever the flow holds: at most 200 workers (and how many there are), 20
 * failures, 20 dead letters, error messages cut to 300 characters.
 *
 * The only asynchronous part is the dead-letter page (a store call): it gets a second, and the
 * previous page stands in when the store is slower, so a slow store never holds a snapshot.
 *
 * @module
 */

import type { JobQueue, JobQueueStats } from "../backlog/job_queue.ts";
import type { ControllerStats, WorkPullingController } from "../controller/controller.ts";
import type { JobInfo } from "../lifecycle/job_record.ts";
import type { FlowMetrics, FlowTotals, RateKey } from "../metrics/flow_metrics.ts";
import type { RateSeries } from "../metrics/rate_history.ts";
import { type RecentFailure, RecentFailures } from "./recent_failures.ts";
import type { ScheduleInfo } from "../schedule/scheduler.ts";
import { describeWhen } from "../schedule/recurrence.ts";

/** One worker endpoint as the dashboard shows it. */
export interface WorkerView {
  /** The endpoint name. */
  readonly name: string;
  /** What it runs on, when known. */
  readonly runtime?: string;
  /** Whether a link is attached. */
  readonly connected: boolean;
  /** Demand granted beyond its confirmation. */
  readonly window: number;
  /** Jobs at it, unconfirmed. */
  readonly inFlight: number;
  /** Jobs it confirmed. */
  readonly confirmed: number;
  /** When the controller last heard from it, Unix ms (absent while disconnected). */
  readonly lastSeen?: number;
}

/** A dead letter as the dashboard shows it. */
export interface DeadLetterView {
  /** The MessageID. */
  readonly id: string;
  /** Tries it had. */
  readonly attempts: number;
  /** The last try's error. */
  readonly error?: { readonly name: string; readonly message: string };
  /** The worker of its last try. */
  readonly worker?: string;
  /** When it died, Unix ms. */
  readonly finishedAt?: number;
}

/** A schedule as the dashboard shows it. */
export interface ScheduleView {
  /** The schedule's key. */
  readonly key: string;
  /** When it runs, in words: `every 60000 ms`, or `cron "0 3 * * *" Europe/Berlin`. */
  readonly rule: string;
  /** Its next run, Unix ms (absent before the queue started). */
  readonly next?: number;
}

/** The dashboard's data at one moment. */
export interface DashboardSnapshot {
  /** The flow's name. */
  readonly flow: string;
  /** The controller's state. */
  readonly state: string;
  /** Whether the job queue is paused: no new try starts (job queues only). */
  readonly paused?: boolean;
  /** When this was taken, Unix ms. */
  readonly at: number;
  /** Up to 200 worker endpoints, in round-robin order. */
  readonly workers: readonly WorkerView[];
  /** How many worker endpoints there are. */
  readonly workerCount: number;
  /** Jobs by where they are (the backlog's counts only with a job queue). */
  readonly counts: {
    readonly waiting?: number;
    readonly scheduled?: number;
    readonly retrying?: number;
    readonly active?: number;
    readonly dead?: number;
    readonly pending: number;
    readonly inFlight: number;
  };
  /** Counters since the controller (or the collector) started. */
  readonly totals: FlowTotals;
  /** Throughput a second over the last minutes. */
  readonly rate: RateSeries<RateKey>;
  /** Recent failed tries, newest first (job queues only). */
  readonly failures?: readonly RecentFailure[];
  /** The oldest dead letters (job queues only). */
  readonly deadLetters?: readonly DeadLetterView[];
  /** Up to 100 schedules, in the order they were declared (job queues only). */
  readonly schedules?: readonly ScheduleView[];
}

const MAX_WORKERS = 200;
const DEAD_LETTERS = 20;
const MAX_SCHEDULES = 100;
const STORE_WAIT = 1000;

/**
 * Builds snapshots of one flow.
 *
 * @example
 * ```ts
 * import { BufferedProducer, WorkPullingController } from "../../mod.ts";
 * import { FlowMetrics } from "../metrics/flow_metrics.ts";
 * import { SnapshotSource } from "./snapshot.ts";
 *
 * const controller = new WorkPullingController({ name: "emails", producer: new BufferedProducer() });
 * const source = new SnapshotSource({ controller, metrics: FlowMetrics.of({ controller }) });
 * await source.prepare();
 * console.assert(source.snapshot().flow === "emails");
 * ```
 */
export class SnapshotSource {
  readonly #controller: WorkPullingController;
  readonly #queue: JobQueue | undefined;
  readonly #metrics: FlowMetrics;
  readonly #failures: RecentFailures | undefined;
  #deadLetters: readonly DeadLetterView[] = [];
  #reading: Promise<void> | undefined;

  /** A source for the flow of `metrics` (with its job queue, if any). */
  constructor(
    source: { controller: WorkPullingController; queue?: JobQueue; metrics: FlowMetrics },
  ) {
    this.#queue = source.queue;
    this.#controller = source.queue?.controller ?? source.controller;
    this.#metrics = source.metrics;
    this.#failures = source.queue && RecentFailures.of(source.queue);
  }

  /** Whether the controller is closed for good (the live streams end then). */
  get closed(): boolean {
    return this.#controller.state === "closed";
  }

  /** Refresh what needs the store (the dead letters); waits at most a second. */
  async prepare(): Promise<void> {
    if (this.#queue) await this.#readDeadLetters(this.#queue);
  }

  /** The snapshot now, as JSON text. */
  build(): string {
    return JSON.stringify(this.snapshot());
  }

  /** The snapshot now (with the dead letters of the latest `prepare`). */
  snapshot(): DashboardSnapshot {
    const stats: ControllerStats = this.#queue?.stats() ?? this.#controller.stats();
    const now = Date.now();
    const backlog = this.#queue ? (stats as JobQueueStats).backlog : undefined;
    const all = stats.workers;
    return {
      flow: stats.name,
      state: stats.state,
      ...(this.#queue ? { paused: (stats as JobQueueStats).paused } : {}),
      at: now,
      workers: all.slice(0, MAX_WORKERS).map((w) => ({
        name: w.worker,
        ...(w.runtime === undefined ? {} : { runtime: w.runtime }),
        connected: w.connected,
        window: w.window,
        inFlight: w.inFlight,
        confirmed: w.confirmed,
        ...(w.quietFor === undefined ? {} : { lastSeen: Math.round(now - w.quietFor) }),
      })),
      workerCount: all.length,
      counts: {
        ...(backlog
          ? {
            waiting: backlog.waiting,
            scheduled: backlog.scheduled,
            retrying: backlog.failed,
            active: backlog.active,
            dead: backlog.dead,
          }
          : {}),
        pending: stats.pending,
        inFlight: all.reduce((sum, w) => sum + w.inFlight, 0),
      },
      totals: this.#metrics.totals(stats),
      rate: this.#metrics.history(now),
      ...(this.#failures ? { failures: this.#failures.list() } : {}),
      ...(this.#queue ? { deadLetters: this.#deadLetters } : {}),
      ...(this.#queue
        ? {
          schedules: (stats as JobQueueStats).schedules.slice(0, MAX_SCHEDULES).map(scheduleView),
        }
        : {}),
    };
  }

  /** Refresh the dead-letter page; a store slower than a second keeps the previous page. */
  async #readDeadLetters(queue: JobQueue): Promise<void> {
    this.#reading ??= queue.deadLetters(DEAD_LETTERS).then(
      (page) => {
        this.#deadLetters = page.jobs.map(deadLetterView);
      },
      () => {/* the store failed: keep the previous page */},
    ).finally(() => (this.#reading = undefined));
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#reading,
      new Promise((resolve) => (timer = setTimeout(resolve, STORE_WAIT))),
    ]);
    clearTimeout(timer);
  }
}

function scheduleView(schedule: ScheduleInfo): ScheduleView {
  return {
    key: schedule.key,
    rule: describeWhen(schedule.when),
    ...(schedule.next === undefined ? {} : { next: schedule.next }),
  };
}

function deadLetterView(job: JobInfo): DeadLetterView {
  return {
    id: job.id,
    attempts: job.attempts,
    ...(job.error
      ? { error: { name: job.error.name.slice(0, 100), message: job.error.message.slice(0, 300) } }
      : {}),
    ...(job.worker === undefined ? {} : { worker: job.worker }),
    ...(job.finishedAt === undefined ? {} : { finishedAt: job.finishedAt }),
  };
}
