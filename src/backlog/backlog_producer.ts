/**
 * The backlog-fed producer: the controller's producer endpoint in a job queue. It answers each
 * grant (`RequestNext`) with due jobs taken from the job store, so the spec's producer contract,
 * pool-aware credit and the durable lane are unchanged: the controller still asks for work only
 * when workers can take it, and the backlog is where jobs wait meanwhile.
 *
 * It keeps the contract's promises like `BufferedProducer` does:
 * - a grant that finds no due job stays open; the store's `ready` signal answers it later;
 * - a retried grant (same session and token) gets the identical `Produced`;
 * - the jobs of an answer stay with the producer until accepted: a grant from a new session (the
 *   controller restarted) offers them again first, under the same MessageIDs, so the store's
 *   first-write-wins starts each try once.
 *
 * Paused (`pause()`), it takes nothing from the store and leaves grants open: no new try starts,
 * while the jobs already at workers run on. `resume()` answers the open grant.
 *
 * @module
 */

import { defaultLogger, type Logger } from "../core/logger.ts";
import type { Writable } from "../core/writable.ts";
import type { ProducerEndpoint, ProducerPort } from "../controller/producer_contract.ts";
import { JsonText } from "../protocol/json_text.ts";
import type { Accepted, ProducedJob, RequestNext, Stored } from "../protocol/schemas.ts";
import type { JobStore, ReadyJob } from "./job_store.ts";

interface Answer {
  readonly session: string;
  readonly token: string;
  readonly jobs: readonly ReadyJob[];
  readonly message: { session: string; token: string; jobs: ProducedJob[] };
}

/**
 * The producer endpoint of a `JobQueue`: grants are answered from a {@linkcode JobStore}.
 *
 * @example Used by JobQueue; standalone it needs a store and a controller
 * ```ts
 * import { BacklogProducer } from "./backlog_producer.ts";
 * import { MemoryJobStore } from "./memory_job_store.ts";
 * import { WorkPullingController } from "../controller/controller.ts";
 *
 * const store = new MemoryJobStore();
 * const producer = new BacklogProducer(store);
 * const controller = new WorkPullingController({ name: "jobs", producer, queue: store, outcomes: true });
 * await controller.start();
 * await controller.close();
 * ```
 */
export class BacklogProducer implements ProducerEndpoint {
  readonly #store: JobStore;
  readonly #logger: Logger;
  #port: ProducerPort | undefined;
  #session = "";
  #grant: RequestNext | undefined;
  #taking = false;
  /** Jobs taken from the store but not (or no longer) in an answer: offered first. */
  #carried: ReadyJob[] = [];
  #answered: Answer | undefined;
  #stored: Answer | undefined;
  #closed = false;
  #paused = false;

  /** Creates the producer over `store`. */
  constructor(store: JobStore, logger: Logger = defaultLogger) {
    this.#store = store;
    this.#logger = logger;
  }

  /** Due jobs may be available: answer an open grant. */
  ready(): void {
    this.#answer();
  }

  /** Take nothing more from the store until {@linkcode BacklogProducer.resume}. */
  pause(): void {
    this.#paused = true;
  }

  /** Answer grants again. */
  resume(): void {
    if (!this.#paused) return;
    this.#paused = false;
    this.#answer();
  }

  /** Stop answering grants. */
  close(): void {
    this.#closed = true;
    this.#grant = undefined;
  }

  /** Called by the controller. */
  attach(port: ProducerPort): void {
    this.#port = port;
  }

  /** Called by the controller with a grant. */
  onRequestNext(request: RequestNext): void {
    const answered = this.#answered;
    if (answered && answered.session === request.session && answered.token === request.token) {
      this.#port!.produced(answered.message); // a retried grant: the identical answer
      return;
    }
    // What the controller has not accepted is offered again first, in order: the stored batch
    // if the session changed (the controller restarted), and an answer that was never stored.
    const unfinished = [
      ...(request.session !== this.#session ? this.#stored?.jobs ?? [] : []),
      ...(answered?.jobs ?? []),
    ];
    this.#carried = [...unfinished, ...this.#carried];
    this.#session = request.session;
    this.#answered = undefined;
    this.#stored = undefined; // the previous grant of this session completed: it was accepted
    this.#grant = request;
    this.#answer();
  }

  /** Called by the controller when jobs are stored. */
  onStored(stored: Stored): void {
    const answered = this.#answered;
    if (answered && answered.session === stored.session && answered.token === stored.token) {
      this.#stored = answered;
      this.#answered = undefined;
    }
    this.#port!.storedAck({ session: stored.session, token: stored.token });
  }

  /** Called by the controller when the stored jobs entered the pool. */
  onAccepted(accepted: Accepted): void {
    const stored = this.#stored;
    if (stored && stored.session === accepted.session && stored.token === accepted.token) {
      this.#stored = undefined;
    }
  }

  #answer(): void {
    const grant = this.#grant;
    if (!grant || this.#closed || this.#paused || this.#taking) return;
    if (this.#carried.length > 0) {
      const jobs = this.#carried.splice(0, grant.maxJobs);
      return this.#produce(grant, jobs);
    }
    const now = this.#store.takeNow?.(grant.maxJobs);
    if (now) {
      // Answered in this turn: none is due, and the grant stays open until the store is ready.
      if (now.length > 0) this.#produce(grant, now);
      return;
    }
    this.#taking = true;
    this.#store.take(grant.maxJobs).then(
      (jobs) => {
        this.#taking = false;
        if (jobs.length === 0) return; // the grant stays open until the store is ready again
        if (this.#grant !== grant) {
          // The grant changed while the store answered (the controller restarted): keep them.
          this.#carried.push(...jobs);
          return this.#answer();
        }
        this.#produce(grant, jobs);
      },
      (error) => {
        this.#taking = false;
        this.#logger.error("the job store failed to hand out jobs", error);
      },
    );
  }

  #produce(grant: RequestNext, jobs: readonly ReadyJob[]): void {
    const message = {
      session: grant.session,
      token: grant.token,
      jobs: jobs.map((job) => {
        const produced: Writable<ProducedJob> = {
          messageId: job.messageId,
          payload: JsonText.fromStored(job.payload),
          attempt: job.attempt,
          timeout: job.timeout,
        };
        if (job.lost) produced.lost = job.lost;
        return produced;
      }),
    };
    this.#grant = undefined;
    this.#answered = { session: grant.session, token: grant.token, jobs, message };
    this.#port!.produced(message);
  }
}
