/**
 * The durable lane: every write to the {@linkcode DurableWorkQueue} goes through it, one backend
 * transaction at a time.
 *
 * A transaction (a "unit") carries the in-flight handshake's Store or Accept together with as
 * many queued confirmations as fit the queue's batch limits: group commit. The handshake comes
 * first, but waiting confirmations keep up to half of a unit's operations, so a producer that
 * always has work cannot starve them. A Store or Accept larger than one unit is split across
 * consecutive units; each is atomic on its own, and a crash between them is healed by
 * first-write-wins when the producer resubmits. Queues without `commit` get the same units
 * applied one operation at a time.
 *
 * Each unit is retried under the policy (attempts, exponential backoff, a per-attempt timeout
 * that aborts the call). Fenced or conflict errors stop at once and are terminal; other errors,
 * once the attempts run out, make the controller restart.
 *
 * The lane's state changes only through its synchronous methods, which the controller calls from
 * its mailbox; {@linkcode DurableLane.execute} is the only asynchronous part and never rejects.
 *
 * @module
 */

import type { Clock } from "../core/clock.ts";
import { Deque } from "../core/deque.ts";
import { IdTable } from "../core/id_table.ts";
import {
  type BatchStoreJob,
  type DurableWorkQueue,
  isTerminalQueueError,
  type QueueBatchLimits,
  QueueConflictError,
  type StoreResult,
} from "../queue/work_queue.ts";
import type { FailureStage } from "./events.ts";
import type { JobOutcome } from "../lifecycle/job_record.ts";
import { utf8Length } from "../core/utf8.ts";

/** Retry policy for durable operations. */
export interface LanePolicy {
  /** Attempts per unit, counting the first (at least 1). */
  readonly attempts: number;
  /** Wait before the second attempt, doubling after each further failure (ms). */
  readonly backoff: number;
  /** Each attempt is aborted after this long (ms). */
  readonly timeout: number;
}

/** One backend transaction. */
export interface LaneUnit {
  readonly epoch: number;
  readonly store?: { readonly firstSeq: number; readonly jobs: readonly BatchStoreJob[] };
  readonly accept?: readonly string[];
  readonly confirm: readonly string[];
  /** How the confirmed tries ended, for those the controller reported an outcome. */
  readonly outcomes?: IdTable<JobOutcome>;
}

/** What {@linkcode DurableLane.execute} reports. */
export type UnitOutcome =
  | { readonly ok: true; readonly stored: readonly StoreResult[] }
  | { readonly ok: false; readonly terminal: boolean; readonly error: unknown };

/** What completing a unit means for the controller. */
export type LaneProgress =
  | { readonly kind: "none" }
  | { readonly kind: "stored"; readonly results: readonly StoreResult[]; readonly cursor: number }
  | { readonly kind: "accepted" }
  | {
    readonly kind: "failed";
    readonly stage: FailureStage;
    readonly terminal: boolean;
    readonly error: unknown;
  };

type HandshakeWork =
  | {
    kind: "store";
    readonly jobs: readonly BatchStoreJob[];
    next: number;
    cursor: number;
    results: StoreResult[];
  }
  | { kind: "accept"; readonly ids: readonly string[]; next: number };

const UNLIMITED: QueueBatchLimits = {
  maxOperations: Number.MAX_SAFE_INTEGER,
  maxBytes: Number.MAX_SAFE_INTEGER,
};

/** The single lane of durable writes for one controller incarnation. */
export class DurableLane {
  /** The writer epoch from the latest load. */
  epoch = 0;
  #handshake: HandshakeWork | undefined;
  readonly #confirms = new Deque<string>();
  /** Each queued confirmation's outcome (undefined: none), in step with `#confirms`. */
  readonly #outcomes = new Deque<JobOutcome | undefined>();
  #running: LaneUnit | undefined;
  readonly #limits: QueueBatchLimits;

  /** Creates a lane over `queue`. */
  constructor(
    readonly queue: DurableWorkQueue,
    readonly policy: LanePolicy,
    readonly clock: Clock,
  ) {
    this.#limits = queue.commit ? queue.batchLimits ?? UNLIMITED : UNLIMITED;
  }

  /** True while a unit is executing. */
  get busy(): boolean {
    return this.#running !== undefined;
  }

  /** Confirmations waiting for a unit. */
  get queuedConfirms(): number {
    return this.#confirms.length;
  }

  /** Forget everything (a new incarnation or a stop); a running unit's outcome will be ignored. */
  reset(epoch: number): void {
    this.epoch = epoch;
    this.#handshake = undefined;
    this.#confirms.clear();
    this.#outcomes.clear();
    this.#running = undefined;
  }

  /** Queue the handshake's Store; new jobs are appended after `cursor`. */
  store(jobs: readonly BatchStoreJob[], cursor: number): void {
    this.#handshake = { kind: "store", jobs, next: 0, cursor, results: [] };
  }

  /** Queue the handshake's Accept. */
  accept(ids: readonly string[]): void {
    this.#handshake = { kind: "accept", ids, next: 0 };
  }

  /** Queue confirmations. */
  confirm(ids: Iterable<string>): void {
    for (const id of ids) {
      this.#confirms.pushBack(id);
      this.#outcomes.pushBack(undefined);
    }
  }

  /** Queue one confirmation with the outcome of its try. */
  confirmWith(id: string, outcome: JobOutcome): void {
    this.#confirms.pushBack(id);
    this.#outcomes.pushBack(outcome);
  }

  /** Build the next unit when idle and there is work; the caller executes it. */
  next(): LaneUnit | undefined {
    if (this.#running) return undefined;
    const maxBytes = this.#limits.maxBytes;
    const budget = { operations: Math.max(1, this.#limits.maxOperations), bytes: maxBytes };
    // A queue without a byte limit: nothing to count. Otherwise each text is charged 3 bytes a
    // UTF-16 unit (UTF-8's most) while that fits, and exactly (utf8Length walks every character)
    // from the first one that may not: most units never need the walk.
    const counted = maxBytes < Number.MAX_SAFE_INTEGER;
    let exact = false;
    const jobs: BatchStoreJob[] = [];
    const ids: string[] = [];
    const confirm: string[] = [];
    const take = (text: string, more: string | undefined, first: boolean) => {
      if (!first && budget.operations < 1) return false;
      if (counted) {
        let bytes = 3 * (text.length + (more?.length ?? 0));
        if (!exact && bytes > budget.bytes) {
          exact = true;
          budget.bytes = maxBytes - exactBytes(jobs, ids, confirm);
        }
        if (exact) bytes = utf8Length(text) + (more === undefined ? 0 : utf8Length(more));
        if (!first && budget.bytes < bytes) return false;
        budget.bytes -= bytes;
      }
      budget.operations -= 1;
      return true;
    };
    let unit: {
      epoch: number;
      store?: LaneUnit["store"];
      accept?: string[];
      confirm: string[];
      outcomes?: IdTable<JobOutcome>;
    } = { epoch: this.epoch, confirm };
    const work = this.#handshake;
    // Waiting confirmations keep up to half of the unit's operations from the handshake: a
    // producer that always has work (a lookahead keeps one) must not starve them, or finished
    // jobs pile up unwritten and run again after a crash.
    const reserved = Math.min(this.#confirms.length, Math.floor(budget.operations / 2));
    const takeForHandshake = (text: string, more: string | undefined, first: boolean) =>
      (first || budget.operations > reserved) && take(text, more, first);
    if (work?.kind === "store") {
      for (let i = work.next; i < work.jobs.length; i++) {
        const job = work.jobs[i];
        if (!takeForHandshake(job.messageId, job.payload, jobs.length === 0)) break;
        jobs.push(job);
      }
      unit.store = { firstSeq: work.cursor + 1, jobs };
    } else if (work?.kind === "accept") {
      for (let i = work.next; i < work.ids.length; i++) {
        if (!takeForHandshake(work.ids[i], undefined, ids.length === 0)) break;
        ids.push(work.ids[i]);
      }
      unit.accept = ids;
    }
    while (this.#confirms.length > 0) {
      const id = this.#confirms.peek()!;
      if (!take(id, undefined, !work && confirm.length === 0)) break;
      confirm.push(this.#confirms.shift()!);
      const outcome = this.#outcomes.shift();
      if (outcome) (unit.outcomes ??= new IdTable(this.#confirms.length + 1)).set(id, outcome);
    }
    if (!unit.store && !unit.accept && confirm.length === 0) return undefined;
    this.#running = unit = Object.freeze(unit);
    return unit;
  }

  /** Run `unit` against the queue under the retry policy. Never rejects. */
  async execute(unit: LaneUnit, stop: AbortSignal): Promise<UnitOutcome> {
    // Every part of a unit is safe to repeat after an attempt whose outcome is unknown (it timed
    // out, or its answer was lost): a repeated store reports the first write, a repeated accept
    // and a confirm of a job already compacted are no-ops.
    const outcome = await runWithRetry(
      (signal) => this.#call(unit, signal),
      this.policy,
      this.clock,
      stop,
    );
    return outcome.ok ? { ok: true, stored: outcome.value } : outcome;
  }

  /** Apply the outcome of the running unit. */
  complete(unit: LaneUnit, outcome: UnitOutcome): LaneProgress {
    if (this.#running !== unit) return { kind: "none" };
    this.#running = undefined;
    const stage: FailureStage = unit.store ? "store" : unit.accept ? "accept" : "confirm";
    if (!outcome.ok) {
      return { kind: "failed", stage, terminal: outcome.terminal, error: outcome.error };
    }
    const work = this.#handshake;
    if (unit.store && work?.kind === "store") {
      const problem = checkStoreResults(unit.store.jobs.length, outcome.stored, work);
      if (problem) return { kind: "failed", stage, terminal: true, error: problem };
      work.next += unit.store.jobs.length;
      if (work.next === work.jobs.length) {
        this.#handshake = undefined;
        return { kind: "stored", results: work.results, cursor: work.cursor };
      }
    }
    if (unit.accept && work?.kind === "accept") {
      work.next += unit.accept.length;
      if (work.next === work.ids.length) {
        this.#handshake = undefined;
        return { kind: "accepted" };
      }
    }
    return { kind: "none" };
  }

  async #call(unit: LaneUnit, signal: AbortSignal): Promise<readonly StoreResult[]> {
    const queue = this.queue;
    if (queue.commit) {
      const result = await queue.commit(unit.epoch, {
        store: unit.store,
        accept: unit.accept,
        confirm: unit.confirm,
        outcomes: unit.outcomes,
      }, { signal });
      return result.stored;
    }
    const stored: StoreResult[] = [];
    if (unit.store) {
      // One operation at a time; a retry after a partial run is idempotent because every
      // already-stored job reports its sequence and moves the local cursor past it.
      let cursor = unit.store.firstSeq - 1;
      for (const job of unit.store.jobs) {
        const result = await queue.store(unit.epoch, { ...job, proposedSeq: cursor + 1 }, {
          signal,
        });
        cursor = Math.max(cursor, result.seq);
        stored.push(result);
      }
    }
    for (const id of unit.accept ?? []) await queue.accept(unit.epoch, id, { signal });
    for (const id of unit.confirm) {
      await queue.confirmMessage(unit.epoch, id, { signal, outcome: unit.outcomes?.get(id) });
    }
    return stored;
  }
}

/** The UTF-8 bytes of a unit's MessageIDs and payloads so far. */
function exactBytes(
  jobs: readonly BatchStoreJob[],
  accepted: readonly string[],
  confirmed: readonly string[],
): number {
  let bytes = 0;
  for (const job of jobs) bytes += utf8Length(job.messageId) + utf8Length(job.payload);
  for (const id of accepted) bytes += utf8Length(id);
  for (const id of confirmed) bytes += utf8Length(id);
  return bytes;
}

/** The outcome of {@linkcode runWithRetry}. */
export type RetryOutcome<T> =
  | { readonly ok: true; readonly value: T }
  | { readonly ok: false; readonly terminal: boolean; readonly error: unknown };

/**
 * Call `operation` until it succeeds, a terminal queue error occurs, the attempts run out or
 * `stop` aborts. Each attempt gets its own signal, aborted after `policy.timeout`. Never rejects.
 */
export async function runWithRetry<T>(
  operation: (signal: AbortSignal) => Promise<T>,
  policy: LanePolicy,
  clock: Clock,
  stop: AbortSignal,
): Promise<RetryOutcome<T>> {
  let lastError: unknown = new Error("stopped before the first attempt");
  for (let attempt = 1; attempt <= policy.attempts && !stop.aborted; attempt++) {
    if (attempt > 1) await interruptible(clock, policy.backoff * 2 ** (attempt - 2), stop);
    if (stop.aborted) break;
    try {
      return { ok: true, value: await attemptWithTimeout(operation, policy.timeout, clock, stop) };
    } catch (error) {
      if (isTerminalQueueError(error)) return { ok: false, terminal: true, error };
      lastError = error;
    }
  }
  return { ok: false, terminal: false, error: lastError };
}

async function attemptWithTimeout<T>(
  operation: (signal: AbortSignal) => Promise<T>,
  timeout: number,
  clock: Clock,
  stop: AbortSignal,
): Promise<T> {
  const abort = new AbortController();
  let timer: { cancel(): void } | undefined;
  let onStop: (() => void) | undefined;
  const expired = new Promise<never>((_, reject) => {
    const fail = (error: Error) => {
      abort.abort(error);
      reject(error);
    };
    timer = clock.setTimeout(() => {
      const error = new Error(`durable operation timed out after ${timeout} ms`);
      error.name = "TimeoutError";
      fail(error);
    }, timeout);
    onStop = () => fail(new Error("durable operation abandoned: the controller stopped"));
    stop.addEventListener("abort", onStop, { once: true });
  });
  try {
    return await Promise.race([operation(abort.signal), expired]);
  } finally {
    timer?.cancel();
    stop.removeEventListener("abort", onStop!);
  }
}

/** Wait `ms` on `clock`, or less if `stop` aborts. */
function interruptible(clock: Clock, ms: number, stop: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const done = () => {
      timer.cancel();
      stop.removeEventListener("abort", done);
      resolve();
    };
    const timer = clock.setTimeout(done, ms);
    stop.addEventListener("abort", done, { once: true });
  });
}

/**
 * The controller does not trust the queue's answers: a new job must land exactly at the next
 * sequence, and a job already stored cannot sit beyond it. Returns an error or undefined, and
 * advances the work's cursor and results.
 */
function checkStoreResults(
  expected: number,
  results: readonly StoreResult[],
  work: { cursor: number; results: StoreResult[] },
): QueueConflictError | undefined {
  if (!Array.isArray(results) || results.length !== expected) {
    return new QueueConflictError(`store returned ${results?.length} results for ${expected} jobs`);
  }
  for (const result of results) {
    const valid = Number.isSafeInteger(result?.seq) && result.seq > 0 &&
      typeof result.payload === "string" && result.payload !== "";
    if (!valid) return new QueueConflictError("store returned a malformed result");
    // A job stored by an earlier attempt whose answer was lost reports the next sequence too.
    if (result.seq > work.cursor) {
      if (result.seq !== work.cursor + 1) {
        return new QueueConflictError(
          `store assigned sequence ${result.seq}; the next sequence is ${work.cursor + 1}`,
        );
      }
      work.cursor = result.seq;
    } else if (!result.alreadyStored) {
      return new QueueConflictError(
        `store appended at ${result.seq}, behind the cursor ${work.cursor}`,
      );
    }
    work.results.push(result);
  }
  return undefined;
}
