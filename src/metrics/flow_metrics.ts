/**
 * What one flow's metrics are made of, and where each comes from. One collector per controller
 * (or job queue), shared by `GET /metrics` and the dashboard:
 *
 * - **counters the controller keeps anyway** (`stats().totals`: accepted, dispatched, confirmed,
 *   failed, requeued; stored stands for submitted without a job queue), read when asked;
 * - **counters from events**: a job queue's `job` events give submitted, completed and dead,
 *   the controller's `frame-rejected` events the rejected frames by reason, and the network
 *   edge's reports the frames it refused before the controller saw them (a flood, and on Bun a
 *   frame the runtime cut for its size);
 * - **gauges read when asked**: connected workers, the backlog's counts, whether a job queue is
 *   paused, when each of its schedules runs next, the pool, in flight;
 * - **two histograms**: how long a try waited from when it was due (submitted, or its delay or
 *   backoff over) to when it started (a job queue's `active` event has both times), and how
 *   long a job took at its worker as the controller sees it (its confirmation watcher).
 *
 * Nothing here runs on a timer, and every listener does a few additions: the collector costs
 * the controller close to nothing. Throughput for the dashboard's chart is sampled from the
 * same counters, on these events and whenever the dashboard or a scrape asks.
 *
 * @module
 */

import type { JobQueue, JobQueueStats } from "../backlog/job_queue.ts";
import type { ControllerStats, WorkPullingController } from "../controller/controller.ts";
import type { RejectReason } from "../controller/events.ts";
import type { NetEvent } from "../net/net_event.ts";
import type { MetricFamily, Sample } from "./exposition.ts";
import { Histogram } from "./histogram.ts";
import { RateHistory, type RateSeries } from "./rate_history.ts";

/** The series of the throughput chart. */
export type RateKey = "submitted" | "completed" | "failed";

/** Why a frame was rejected, as the metrics label it: the controller's reasons and the edge's. */
export type RejectedFrameReason = RejectReason | "rate-limited";

const REJECT_REASONS: readonly RejectedFrameReason[] = [
  "too-large",
  "not-text",
  "malformed-json",
  "invalid-frame",
  "wrong-producer",
  "identity-mismatch",
  "stale-incarnation",
  "already-bound",
  "rate-limited",
];
const BACKLOG_STATES = ["waiting", "scheduled", "failed", "active", "dead"] as const;

/** What is observed: a job queue (and its controller), or a controller alone. */
export interface MetricsSource {
  /** The flow's job queue, if it has one. */
  readonly queue?: JobQueue;
  /** The controller (the queue's own when there is a queue). */
  readonly controller: WorkPullingController;
}

const collectors = new WeakMap<object, FlowMetrics>();

/**
 * One flow's metrics.
 *
 * @example A controller's metrics as Prometheus text
 * ```ts
 * import { BufferedProducer, WorkPullingController } from "../../mod.ts";
 * import { renderExposition } from "./exposition.ts";
 * import { FlowMetrics } from "./flow_metrics.ts";
 *
 * const controller = new WorkPullingController({ name: "emails", producer: new BufferedProducer() });
 * const text = renderExposition(FlowMetrics.of({ controller }).families());
 * console.assert(text.includes('workpull_jobs_confirmed_total{flow="emails"} 0'));
 * ```
 */
export class FlowMetrics {
  /** The flow's name. */
  readonly flow: string;
  readonly #queue: JobQueue | undefined;
  readonly #controller: WorkPullingController;
  #submitted = 0;
  #completed = 0;
  #dead = 0;
  readonly #rejected = new Map<RejectedFrameReason, number>();
  readonly #wait = new Histogram();
  readonly #run = new Histogram();
  readonly #history = new RateHistory<RateKey>(["submitted", "completed", "failed"]);

  /** The collector of `source`, created (and subscribed) on first use. */
  static of(source: MetricsSource): FlowMetrics {
    const key = source.queue ?? source.controller;
    let collector = collectors.get(key);
    if (!collector) collectors.set(key, collector = new FlowMetrics(source));
    return collector;
  }

  private constructor(source: MetricsSource) {
    this.#queue = source.queue;
    this.#controller = source.queue?.controller ?? source.controller;
    this.flow = this.#controller.name;
    this.#controller.addEventListener("frame-rejected", (event) => {
      this.#reject(event.reason);
    });
    this.#controller.watchConfirmations((_worker, jobs, busyMs) => {
      this.#tick();
      this.#run.observe(busyMs / 1000 / jobs, jobs);
    });
    // A watcher, not a "job" listener: no event object a change of every job.
    this.#queue?.watchJobs((job, previous) => {
      this.#tick();
      if (previous === undefined) this.#submitted += 1;
      if (job.state === "active" && job.startedAt !== undefined && job.runAt !== undefined) {
        this.#wait.observe(Math.max(0, job.startedAt - job.runAt) / 1000);
      } else if (job.state === "completed") this.#completed += 1;
      else if (job.state === "dead" && previous !== "dead") this.#dead += 1;
    });
  }

  /**
   * Count what the network edge refused before the controller saw it: a connection closed for
   * flooding, and (Bun) a frame the runtime cut for its size. A frame the edge measured itself
   * is passed to the controller, which reports it.
   */
  edgeEvent(event: NetEvent): void {
    if (event.kind === "rate-limited") this.#reject("rate-limited");
    else if (event.kind === "frame-too-large" && event.bytes === undefined) {
      this.#reject("too-large");
    }
  }

  /** Throughput, a value a second over the last minutes (sampled now). */
  history(now: number = Date.now()): RateSeries<RateKey> {
    this.#history.sample(now, this.#rates(this.#controller.stats()));
    return this.#history.series(now);
  }

  /** Jobs submitted, completed and dead so far, and the controller's totals. */
  totals(stats: ControllerStats = this.#controller.stats()): FlowTotals {
    const { totals } = stats;
    return {
      submitted: this.#queue ? this.#submitted : totals.stored,
      accepted: totals.accepted,
      dispatched: totals.dispatched,
      confirmed: totals.confirmed,
      completed: this.#queue ? this.#completed : totals.confirmed,
      failed: totals.failed,
      dead: this.#dead,
      requeued: totals.requeued,
    };
  }

  /** Every metric family of the flow, as of now. */
  families(): MetricFamily[] {
    const stats: ControllerStats = this.#queue?.stats() ?? this.#controller.stats();
    const totals = this.totals(stats);
    const flow = { flow: this.flow };
    const one = (value: number): Sample[] => [{ labels: flow, value }];
    const counter = (name: string, help: string, value: number): MetricFamily => ({
      name: `workpull_${name}`,
      help,
      type: "counter",
      samples: one(value),
    });
    const gauge = (name: string, help: string, samples: Sample[]): MetricFamily => ({
      name: `workpull_${name}`,
      help,
      type: "gauge",
      samples,
    });
    const queued = this.#queue !== undefined;
    const backlog = this.#queue
      ? (stats as JobQueueStats).backlog as unknown as Record<string, number>
      : undefined;
    return [
      counter(
        "jobs_submitted_total",
        queued
          ? "Jobs added to the backlog (a MessageID already known does not count)."
          : "Jobs stored for the first time by the controller.",
        totals.submitted,
      ),
      counter("jobs_accepted_total", "Tries accepted into the controller's pool.", totals.accepted),
      counter(
        "jobs_dispatched_total",
        "Deliveries to workers, redeliveries included.",
        totals.dispatched,
      ),
      counter(
        "jobs_confirmed_total",
        "Confirmations from workers (every outcome), repeats after a requeue included.",
        totals.confirmed,
      ),
      ...(queued ? [counter("jobs_completed_total", "Jobs completed.", totals.completed)] : []),
      counter(
        "jobs_failed_total",
        "Tries that failed (reported, timed out, or lost).",
        totals.failed,
      ),
      ...(queued ? [counter("jobs_dead_total", "Jobs that ran out of tries.", totals.dead)] : []),
      counter(
        "jobs_requeued_total",
        "Jobs returned to the pool from ended worker bindings.",
        totals.requeued,
      ),
      {
        name: "workpull_frames_rejected_total",
        help: "Frames and registrations refused, by reason (the binding or connection ends).",
        type: "counter",
        samples: REJECT_REASONS.map((reason) => ({
          labels: { ...flow, reason },
          value: this.#rejected.get(reason) ?? 0,
        })),
      },
      gauge(
        "workers",
        "Worker endpoints connected and bound.",
        one(stats.workers.filter((w) => w.connected).length),
      ),
      gauge(
        "backlog_jobs",
        "Jobs in the backlog by state (failed: waiting out a backoff; active: taken by the controller).",
        backlog
          ? BACKLOG_STATES.map((state) => ({
            labels: { ...flow, state },
            value: backlog[state] ?? 0,
          }))
          : [],
      ),
      ...(queued
        ? [gauge(
          "paused",
          "1 while the job queue is paused (no new try starts), else 0.",
          one((stats as JobQueueStats).paused ? 1 : 0),
        )]
        : []),
      ...(queued
        ? [gauge(
          "schedule_next_run_timestamp_seconds",
          "When each schedule's next run is due, Unix seconds. Long in the past: its run could " +
            "not be stored (the log says why).",
          (stats as JobQueueStats).schedules.filter((s) => s.next !== undefined).map((s) => ({
            labels: { ...flow, schedule: s.key },
            value: s.next! / 1000,
          })),
        )]
        : []),
      gauge("pending_jobs", "Jobs accepted and waiting for worker demand.", one(stats.pending)),
      gauge(
        "in_flight_jobs",
        "Jobs at workers, not confirmed yet.",
        one(stats.workers.reduce((sum, w) => sum + w.inFlight, 0)),
      ),
      {
        name: "workpull_job_wait_seconds",
        help: "From when a try was due (submitted, or its delay or backoff over) to its start.",
        type: "histogram",
        samples: queued ? [{ labels: flow, histogram: this.#wait.snapshot() }] : [],
      },
      {
        name: "workpull_job_run_seconds",
        help: "How long a job took at its worker as the controller sees it (delivery or the " +
          "previous confirmation to its confirmation).",
        type: "histogram",
        samples: [{ labels: flow, histogram: this.#run.snapshot() }],
      },
    ];
  }

  #reject(reason: RejectedFrameReason): void {
    this.#rejected.set(reason, (this.#rejected.get(reason) ?? 0) + 1);
  }

  /** Sample the throughput before an event is counted, at most once a second. */
  #tick(): void {
    const now = Date.now();
    if (this.#history.due(now)) this.#history.sample(now, this.#rates(this.#controller.stats()));
  }

  #rates(stats: ControllerStats): Record<RateKey, number> {
    const { submitted, completed, failed } = this.totals(stats);
    return { submitted, completed, failed };
  }
}

/** A flow's counters (see {@linkcode FlowMetrics.totals}). */
export interface FlowTotals {
  /** Jobs added (to the backlog, or stored by the controller without one). */
  readonly submitted: number;
  /** Tries accepted into the pool. */
  readonly accepted: number;
  /** Deliveries to workers. */
  readonly dispatched: number;
  /** Confirmations. */
  readonly confirmed: number;
  /** Jobs completed (confirmations without a job queue). */
  readonly completed: number;
  /** Tries that failed. */
  readonly failed: number;
  /** Jobs that ran out of tries (job queues). */
  readonly dead: number;
  /** Jobs requeued from ended bindings. */
  readonly requeued: number;
}
