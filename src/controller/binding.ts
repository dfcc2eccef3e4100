/**
 * One worker's sub-flow as the controller sees it: a contiguous sequence space, a demand
 * window and the list of unconfirmed jobs.
 *
 * Invariants (the controller's half of the sub-flow):
 * - `unconfirmed` holds exactly the jobs with sequences `(confirmedSeq, currentSeq]`, in order,
 *   so the job with sequence `s` sits at index `s - confirmedSeq - 1`;
 * - nothing above `demandUpTo` is ever sent;
 * - `sentSeq` is the highest sequence already written to the link; a resend rewinds it.
 *
 * @module
 */

import { Deque } from "../core/deque.ts";
import { hashId } from "../core/id_table.ts";
import type { JobOutcome } from "../lifecycle/job_record.ts";

/** A job the controller holds: its identity, store sequence and JSON payload text. */
export interface Job {
  readonly messageId: string;
  /** The MessageID's `hashId`, computed once for every table the job passes through. */
  readonly hash: number;
  readonly storeSeq: number;
  readonly payload: string;
  /** Which try this is, when the producer or queue knows (job queues). */
  readonly attempt?: number;
  /** How long the try may take, ms (0 or absent: no limit). */
  readonly timeout?: number;
  /** Times a worker was lost while this job was its oldest unconfirmed one (across tries). */
  lost?: number;
  /**
   * The job may have been running when a worker was lost: the next worker confirms what it
   * finished before starting it (protocol: `confirmFirst`), so that a loss while it runs is
   * charged to it and not to a job that finished just before.
   */
  confirmFirst?: boolean;
  /** Cancelled while at a worker: whatever the worker reports, the try ends as cancelled. */
  cancelled?: boolean;
  /** The MessageID goes into JSON text as it is (see `EncodedJob.plainId`). */
  readonly plainId?: boolean;
}

/**
 * A new {@linkcode Job}. Every job is made here, with every field set, so that all of them share
 * one shape (the engines' property access stays monomorphic on the hot path).
 */
export function newJob(
  messageId: string,
  storeSeq: number,
  payload: string,
  attempt: number | undefined,
  timeout: number | undefined,
  lost = 0,
  hash: number = hashId(messageId),
  plainId = false,
): Job {
  return new JobRecord(messageId, hash, storeSeq, payload, attempt, timeout, lost, plainId);
}

/**
 * A job as the controller holds it: a class, not an object literal. V8 tracks where literals are
 * made, and once a burst (a large `submit()` loop) keeps many jobs alive through a scavenge it
 * makes every later job of that literal in the old generation, where each one, dead within
 * milliseconds, keeps its young MessageID and payload text alive through the next two scavenges:
 * 2 MB copied and promoted per scavenge at a paced 100,000 jobs/s, 7-8 ms pauses instead of 1.5
 * (`bench/tools/paced_gc.ts`). V8 does not track instances of a class that way.
 */
class JobRecord implements Job {
  confirmFirst: boolean;
  cancelled = false;

  constructor(
    readonly messageId: string,
    readonly hash: number,
    readonly storeSeq: number,
    readonly payload: string,
    readonly attempt: number | undefined,
    readonly timeout: number | undefined,
    public lost: number,
    readonly plainId: boolean,
  ) {
    // A job that was running when a worker was lost: see `confirmFirst`.
    this.confirmFirst = lost > 0;
  }
}

/** The link-side state a binding is attached to (owned by the controller). */
export interface BindingLink {
  /** Send a frame to the worker. */
  send(frame: string): void;
}

/** A worker's sub-flow on the controller. */
export class Binding {
  /** Highest sequence assigned. */
  currentSeq = 0;
  /** Every sequence up to this one is confirmed. */
  confirmedSeq = 0;
  /** The worker accepts sequences up to this one. */
  demandUpTo = 0;
  /** Highest sequence written to the link. */
  sentSeq = 0;
  /** Jobs confirmed through this binding (for stats). */
  confirmedCount = 0;
  /** The worker released its jobs (it is draining): the binding takes no new job. */
  draining = false;
  /**
   * When the binding last made progress while holding jobs: when its oldest unconfirmed job was
   * assigned to an empty binding, or when a confirmation last moved (clock ms).
   */
  progressAt = 0;
  /** `(confirmedSeq, currentSeq]`, in order. */
  readonly unconfirmed: Deque<Job> = new Deque();
  /** The outcome of a try this worker completed (shared: it says nothing job-specific). */
  readonly completion: JobOutcome;

  /** Creates a fresh binding (sequence space starting at 1). */
  constructor(
    /** Unique per controller instance; a new id means a new sub-flow. */
    readonly id: string,
    /** The worker endpoint name. */
    readonly worker: string,
    /** The endpoint incarnation. */
    readonly incarnation: string,
    /** The latest registration nonce. */
    public nonce: string,
    /** The worker's declared resend interval (its heartbeat cadence), in ms. */
    public resendInterval: number,
  ) {
    this.completion = Object.freeze({ kind: "completed", worker });
  }

  /** Jobs that may still be assigned before reaching the worker's demand. */
  get freeDemand(): number {
    return this.draining ? 0 : Math.max(0, this.demandUpTo - this.currentSeq);
  }

  /** Assign the next sequence to `job` at time `now`. */
  assign(job: Job, now: number): void {
    if (this.currentSeq === this.confirmedSeq) this.progressAt = now;
    this.currentSeq += 1;
    this.unconfirmed.pushBack(job);
    this.unconfirmedChars += job.payload.length;
  }

  /** Total payload size (UTF-16 units of the JSON text) of the unconfirmed jobs. */
  unconfirmedChars = 0;

  /**
   * Move the cumulative confirmation to `confirmed` and return the jobs it covers, in order.
   * A value at or below the current watermark is a harmless duplicate.
   */
  advance(confirmed: number, now: number): Job[] {
    if (confirmed <= this.confirmedSeq) return [];
    this.progressAt = now;
    const done: Job[] = [];
    while (this.confirmedSeq < confirmed) {
      const job = this.unconfirmed.shift()!;
      this.unconfirmedChars -= job.payload.length;
      done.push(job);
      this.confirmedSeq += 1;
    }
    this.confirmedCount += done.length;
    if (this.sentSeq < this.confirmedSeq) this.sentSeq = this.confirmedSeq;
    return done;
  }

  /** The sequence of an unconfirmed job, or undefined when this binding does not hold it. */
  seqOf(job: Job): number | undefined {
    let index = 0;
    for (const held of this.unconfirmed) {
      if (held === job) return this.confirmedSeq + 1 + index;
      index += 1;
    }
    return undefined;
  }

  /** The unconfirmed job with sequence `seq`. */
  jobAt(seq: number): Job | undefined {
    return this.unconfirmed.at(seq - this.confirmedSeq - 1);
  }

  /**
   * The worker keeps sequences up to `upTo` and hands back the rest: remove and return the jobs
   * above it, in sequence order. The binding is then draining and takes no new job, so a
   * released sequence is never reused for another job while an old frame may still carry it.
   */
  release(upTo: number): Job[] {
    const released: Job[] = [];
    while (this.currentSeq > upTo) {
      const job = this.unconfirmed.pop()!;
      this.unconfirmedChars -= job.payload.length;
      released.push(job);
      this.currentSeq -= 1;
    }
    this.demandUpTo = upTo;
    this.draining = true;
    if (this.sentSeq > upTo) this.sentSeq = upTo;
    return released.reverse();
  }

  /** The oldest unconfirmed job (the one the worker is running, or will run next). */
  head(): Job | undefined {
    return this.unconfirmed.peek();
  }

  /** Remove and return every unconfirmed job, in sequence order. */
  drain(): Job[] {
    const jobs = [...this.unconfirmed];
    this.unconfirmed.clear();
    this.unconfirmedChars = 0;
    return jobs;
  }
}
