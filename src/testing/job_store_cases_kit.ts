/**
 * The pieces every job store conformance case is built from, in the order a case meets them.
 *
 * 1. **The fixture.** A factory opens one flow's stores for every case (`open({ instances,
 *    settings })`): one store, or several instances sharing the flow, each taking the case's
 *    settings (`maxBacklog`, `retention`, lifecycle defaults). A fixture may add a clock the suite
 *    moves (due times, backoff and retention without sleeping), a way to reopen the storage as a
 *    restarted process would, the lease TTL of a shared flow, and the differences its store
 *    documents.
 * 2. **Capabilities.** What the fixture offers decides which cases can run; a case that needs an
 *    absent one is skipped, naming it.
 * 3. **The case.** A `{ name, requires, run }` record whose `run()` opens a fresh fixture, loads
 *    every store (as a job queue's controller does at start), checks one rule and closes the
 *    fixture, rejecting with `Conformance rule violated: <rule>` when the store breaks it.
 * 4. **The context.** A case body drives its stores as a job queue does: `take` hands due jobs
 *    out, a try starts with a commit that stores them (and accepts those the store did not mark
 *    accepted), its outcome rides on the confirmation, and on a shared flow a lease round
 *    (`renew()`, when the store has it) refreshes `counts()` and takes lapsed instances over. The
 *    context keeps each store's epoch and append cursor, and checks each store answer the way the
 *    controller's durable lane does.
 *
 * It uses no runtime-specific API.
 *
 * @module
 */

import {
  type BacklogCounts,
  BacklogFullError,
  type JobStore,
  type NewJob,
  type ReadyJob,
} from "../backlog/job_store.ts";
import type { StoreSettingsOptions } from "../backlog/store_settings.ts";
import { type JobOptions, type JobPlan, planJob } from "../lifecycle/job_options.ts";
import type { JobOutcome } from "../lifecycle/job_record.ts";
import type { LoadResult, QueueEpoch, StoreResult } from "../queue/work_queue.ts";
import {
  ConformanceSkipError,
  equal as kitEqual,
  type Expected,
  payloadOf,
  rejects as kitRejects,
} from "./conformance_kit.ts";

// ---------------------------------------------------------------------------------------------
// 1. The fixture

/** A clock the suite moves: due times, backoff and retention pass without sleeping. */
export interface ConformanceClock {
  /** Move time forward by `ms`; the stores' `clock.now()` reads the new time. */
  advance(ms: number): void | Promise<void>;
}

/**
 * A behaviour a store documents as its own where the contract leaves room for it. A case whose
 * rule the difference relaxes is skipped for that store, naming the difference.
 *
 * - `"no-retained-jobs"`: `retainedJobs` is not applied (finished jobs go with the `retention`
 *   only; a shared flow's count would be per process).
 * - `"approximate-fifo"`: within a priority, jobs due at the same time are not always handed out
 *   in submission order (a shared flow's instances spread their claims).
 */
export type JobStoreDifference = "no-retained-jobs" | "approximate-fifo";

/** What a case asks the factory for. */
export interface JobStoreOpenOptions {
  /** How many store instances of the one flow to open (1: a single store). */
  readonly instances: number;
  /** The settings every instance takes (the case's; the factory may add its own options). */
  readonly settings: StoreSettingsOptions;
}

/** One flow's stores under test, on storage of their own, opened fresh for every case. */
export interface JobStoreFixture {
  /** The instances of the flow (exactly as many as asked for), not yet loaded. */
  readonly stores: readonly JobStore[];
  /**
   * The clock every store reads (`store.clock`), moved by the suite. Enables the cases about due
   * times, backoff and retention.
   */
  readonly clock?: ConformanceClock;
  /**
   * A shared flow's lease TTL, ms: an instance that has not renewed for longer is taken over on
   * another instance's next lease round (`renew()`). Enables the takeover cases.
   */
  readonly leaseTtl?: number;
  /** Behaviours the store documents where the contract leaves room (see the type). */
  readonly differences?: readonly JobStoreDifference[];
  /**
   * Opens a new store object on the storage of `stores[0]`, as that process restarted would (same
   * options, same clock); the fixture closes it in {@linkcode JobStoreFixture.close}. Enables the
   * durability cases.
   */
  reopen?(): Promise<JobStore> | JobStore;
  /** Closes every store and releases what the fixture opened (handles, files). */
  close(): Promise<void> | void;
}

/** Opens fixtures. */
export interface JobStoreFactory {
  /** Opens `options.instances` fresh, empty stores of one flow with `options.settings`. */
  open(options: JobStoreOpenOptions): Promise<JobStoreFixture> | JobStoreFixture;
}

// ---------------------------------------------------------------------------------------------
// 2. Capabilities

/**
 * An ability a fixture offers; a case needing an absent one is skipped.
 *
 * - `clock`: the fixture's clock; `reopen`: its reopen; `pause`: the stores persist a pause
 *   (`readPaused`, `writePaused`); `takeNow`: the stores answer `takeNow`; `commit`: the stores
 *   group writes in `commit`;
 * - `shared`: two or more instances; `leases`: instances with lease rounds (`renew()`) and a
 *   declared `leaseTtl`;
 * - `retainedJobs`, `fifo`: the rules a declared {@linkcode JobStoreDifference} relaxes hold.
 */
export type JobStoreCapability =
  | "clock"
  | "reopen"
  | "pause"
  | "takeNow"
  | "commit"
  | "shared"
  | "leases"
  | "retainedJobs"
  | "fifo";

/** A store with lease rounds (a shared flow's instance). */
interface LeasedStore {
  renew(): Promise<void>;
}

/** The store's lease round, if it has one. */
function leaseRound(store: JobStore): (() => Promise<void>) | undefined {
  const renew = (store as Partial<LeasedStore>).renew;
  return typeof renew === "function" ? () => renew.call(store) : undefined;
}

/**
 * The capabilities a fixture offers.
 *
 * @example
 * ```ts
 * import { jobStoreCapabilitiesOf } from "./job_store_cases_kit.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 *
 * const caps = jobStoreCapabilitiesOf({ stores: [new MemoryJobStore()], close() {} });
 * console.assert(caps.has("takeNow") && caps.has("fifo") && !caps.has("clock"));
 * ```
 */
export function jobStoreCapabilitiesOf(fixture: JobStoreFixture): Set<JobStoreCapability> {
  const caps = new Set<JobStoreCapability>();
  const [first] = fixture.stores;
  const differences = fixture.differences ?? [];
  if (fixture.clock && typeof fixture.clock.advance === "function") caps.add("clock");
  if (typeof fixture.reopen === "function") caps.add("reopen");
  if (typeof first?.readPaused === "function" && typeof first.writePaused === "function") {
    caps.add("pause");
  }
  if (typeof first?.takeNow === "function") caps.add("takeNow");
  if (typeof first?.commit === "function") caps.add("commit");
  if (fixture.stores.length >= 2) caps.add("shared");
  if (first && leaseRound(first) && typeof fixture.leaseTtl === "number") caps.add("leases");
  if (!differences.includes("no-retained-jobs")) caps.add("retainedJobs");
  if (!differences.includes("approximate-fifo")) caps.add("fifo");
  return caps;
}

// ---------------------------------------------------------------------------------------------
// 3. The case

/** One runner-agnostic job store conformance case. */
export interface JobStoreCase {
  /** The rule, phrased as a behaviour. */
  readonly name: string;
  /** Capabilities the case needs. */
  readonly requires: readonly JobStoreCapability[];
  /**
   * Opens a fixture, loads its stores, checks the rule, closes the fixture. Rejects with an Error
   * whose message starts with `Conformance rule violated: <name>`, or with
   * `ConformanceSkipError` when a required capability is missing.
   */
  run(): Promise<void>;
}

/** How a case is set up. */
export interface CaseSetup {
  /** Capabilities it needs. Default none. */
  readonly requires?: readonly JobStoreCapability[];
  /** The settings its stores take. Default none (the stores' defaults). */
  readonly settings?: StoreSettingsOptions;
}

/** A failed check inside a case. */
class CaseFailure extends Error {}

/**
 * Builds a case on `instances` stores of one flow: opens a fixture per run, skips on missing
 * capabilities, loads every store, closes the fixture and prefixes any failure with the rule.
 *
 * @example
 * ```ts
 * import { check, defineJobStoreCase } from "./job_store_cases_kit.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 *
 * const factory = {
 *   open: ({ settings }: { settings: object }) => ({
 *     stores: [new MemoryJobStore(settings)],
 *     close() {},
 *   }),
 * };
 * const rule = defineJobStoreCase(factory, 1, "an empty store hands out nothing", {}, async (ctx) => {
 *   check((await ctx.take(0, 10)).length === 0, "nothing was enqueued");
 * });
 * await rule.run();
 * ```
 */
export function defineJobStoreCase(
  factory: JobStoreFactory,
  instances: number,
  name: string,
  setup: CaseSetup,
  body: (context: JobStoreContext) => Promise<void>,
): JobStoreCase {
  const requires = setup.requires ?? [];
  return {
    name,
    requires,
    async run() {
      const fixture = await factory.open({ instances, settings: setup.settings ?? {} });
      try {
        if (fixture.stores.length !== instances) {
          throw new CaseFailure(
            `the factory opened ${fixture.stores.length} stores; the case asked for ${instances}`,
          );
        }
        const caps = jobStoreCapabilitiesOf(fixture);
        const missing = requires.filter((cap) => !caps.has(cap));
        if (missing.length > 0) {
          throw new ConformanceSkipError(`${name}: the fixture lacks ${missing.join(", ")}`);
        }
        const context = new JobStoreContext(fixture);
        await context.loadAll();
        await body(context);
      } catch (error) {
        if (error instanceof ConformanceSkipError) throw error;
        const detail = error instanceof CaseFailure
          ? error.message
          : `unexpected ${describeError(error)}`;
        throw new Error(`Conformance rule violated: ${name}\n  ${detail}`, { cause: error });
      } finally {
        await fixture.close();
      }
    },
  };
}

/**
 * {@linkcode defineJobStoreCase} bound to one factory and instance count: how each case module
 * writes its rules.
 *
 * @example
 * ```ts
 * import { jobStoreCasesFor } from "./job_store_cases_kit.ts";
 * import { MemoryJobStore } from "../backlog/memory_job_store.ts";
 *
 * const rule = jobStoreCasesFor({
 *   open: ({ settings }) => ({ stores: [new MemoryJobStore(settings)], close() {} }),
 * }, 1);
 * await rule("a store loads", {}, async () => {}).run();
 * ```
 */
export function jobStoreCasesFor(
  factory: JobStoreFactory,
  instances: number,
): (
  name: string,
  setup: CaseSetup,
  body: (context: JobStoreContext) => Promise<void>,
) => JobStoreCase {
  return (name, setup, body) => defineJobStoreCase(factory, instances, name, setup, body);
}

// ---------------------------------------------------------------------------------------------
// 4. The context

/**
 * How a try's writes reach the store: grouped in `commit` (the lane's way when the store has
 * it), or `single` (`store`, `accept`, `confirmMessage` one by one, the lane's way without it).
 */
export type WritePath = "commit" | "single";

/** What a case body drives its stores through (see the module text). */
export class JobStoreContext {
  /** The fixture. */
  readonly fixture: JobStoreFixture;
  /** The instances of the flow. */
  readonly stores: readonly JobStore[];
  readonly #epochs: number[];
  readonly #cursors: number[];
  /** Instances the case stopped: no more lease rounds for them. */
  readonly #stopped = new Set<number>();

  /** Wraps a fixture. */
  constructor(fixture: JobStoreFixture) {
    this.fixture = fixture;
    this.stores = fixture.stores;
    this.#epochs = fixture.stores.map(() => 0);
    this.#cursors = fixture.stores.map(() => 0);
  }

  /** How many instances the flow has. */
  get instances(): number {
    return this.stores.length;
  }

  /** Instance `i`, counted round the flow: with one store every index is that store. */
  at(i: number): JobStore {
    return this.stores[this.#index(i)];
  }

  /** Instance `i`'s current epoch. */
  epoch(i: number): QueueEpoch {
    return this.#epochs[this.#index(i)];
  }

  /** Instance `i`'s append cursor, as its controller knows it (the last sequence it stored). */
  cursor(i: number): number {
    return this.#cursors[this.#index(i)];
  }

  /** The stores' time (they share one clock). */
  now(): number {
    return this.stores[0].clock.now();
  }

  /** A job's plan submitted now. */
  plan(options: JobOptions = {}): JobPlan {
    return planJob(options, this.now());
  }

  /** A new job `id` submitted now with `options` (its payload names it unless given). */
  job(id: string, options: JobOptions = {}, payload: string = payloadOf(id)): NewJob {
    return { id, payload, plan: this.plan(options) };
  }

  /** The fixture's clock (the case requires `clock`). */
  get clock(): ConformanceClock {
    if (!this.fixture.clock) throw new TypeError("the case needs the clock capability");
    return this.fixture.clock;
  }

  /** Load every instance, then run a lease round on each (as the loads start one). */
  async loadAll(): Promise<void> {
    for (let i = 0; i < this.stores.length; i++) await this.load(i);
    await this.round();
  }

  /** Load instance `i` (a controller's start or restart): a new epoch and its append cursor. */
  async load(i: number): Promise<LoadResult> {
    const k = this.#index(i);
    const result = await this.stores[k].load();
    check(
      Number.isSafeInteger(result.epoch) && result.epoch > this.#epochs[k],
      `load of instance ${k} returned epoch ${result.epoch} after ${this.#epochs[k]}`,
    );
    this.#epochs[k] = result.epoch;
    this.#cursors[k] = result.state.currentSeq;
    this.#stopped.delete(k);
    return result;
  }

  /**
   * A lease round on each instance that has them (`renew()`), all of them unless `only` names
   * some; instances the case stopped are left out.
   */
  async round(only?: readonly number[]): Promise<void> {
    const indexes = only?.map((i) => this.#index(i)) ?? this.stores.map((_, k) => k);
    for (const k of indexes) {
      if (this.#stopped.has(k)) continue;
      await leaseRound(this.stores[k])?.();
    }
  }

  /** Stop lease rounds for instance `i` (a process that hangs: its lease will lapse). */
  stop(i: number): void {
    this.#stopped.add(this.#index(i));
  }

  /** Move the clock by `ms`, then run a lease round on every instance still running. */
  async advance(ms: number): Promise<void> {
    await this.clock.advance(ms);
    await this.round();
  }

  /** Instance `i`'s counts, after a lease round if it has them (a shared flow counts there). */
  async counts(i: number): Promise<BacklogCounts> {
    const store = this.at(i);
    await leaseRound(store)?.();
    return store.counts();
  }

  /** `take(max)` on instance `i`. */
  take(i: number, max: number): Promise<readonly ReadyJob[]> {
    return this.at(i).take(max);
  }

  /**
   * Start tries of `jobs` (taken from instance `i`) as its controller does: one commit stores
   * them at the next sequences, a second accepts those the store did not mark accepted (with no
   * `commit`, or `via` `"single"`: `store` and `accept` one by one). Checks what the lane checks:
   * one result a job, new ones at exactly the next sequence, the payload as taken.
   */
  async start(
    i: number,
    jobs: readonly ReadyJob[],
    via: WritePath = "commit",
  ): Promise<readonly StoreResult[]> {
    const k = this.#index(i);
    const store = this.stores[k];
    const epoch = this.#epochs[k];
    const batch = jobs.map((job) => ({ messageId: job.messageId, payload: job.payload }));
    const grouped = via === "commit" && store.commit !== undefined;
    let stored: readonly StoreResult[];
    if (grouped) {
      const firstSeq = this.#cursors[k] + 1;
      stored = (await store.commit!(epoch, { store: { firstSeq, jobs: batch } })).stored;
    } else {
      const results: StoreResult[] = [];
      let cursor = this.#cursors[k];
      for (const job of batch) {
        const result = await store.store(epoch, { ...job, proposedSeq: cursor + 1 });
        cursor = Math.max(cursor, result.seq);
        results.push(result);
      }
      stored = results;
    }
    check(
      Array.isArray(stored) && stored.length === jobs.length,
      `storing ${jobs.length} jobs returned ${stored?.length} results`,
    );
    stored.forEach((result, n) => {
      const id = jobs[n].messageId;
      if (result.seq > this.#cursors[k]) {
        check(
          result.seq === this.#cursors[k] + 1 && !result.alreadyStored,
          `storing ${id} assigned sequence ${result.seq}; the next sequence is ${
            this.#cursors[k] + 1
          }`,
        );
        this.#cursors[k] = result.seq;
      } else {
        check(result.alreadyStored, `storing ${id} appended at ${result.seq}, behind the cursor`);
      }
      check(result.payload === jobs[n].payload, `storing ${id} returned another payload`);
    });
    const unaccepted = jobs.filter((_, n) => stored[n].accepted !== true).map((j) => j.messageId);
    if (unaccepted.length > 0) {
      if (grouped) await store.commit!(epoch, { accept: unaccepted });
      else for (const id of unaccepted) await store.accept(epoch, id);
    }
    return stored;
  }

  /** Take up to `max` due jobs on instance `i` and start a try of each; returns them. */
  async takeAndStart(i: number, max: number): Promise<readonly ReadyJob[]> {
    const jobs = await this.take(i, max);
    if (jobs.length > 0) await this.start(i, jobs);
    return jobs;
  }

  /**
   * Confirm the try of `id` on instance `i` with its outcome (none: a plain confirmation, which
   * means completed), through `commit` as the lane does when the store has it, or `via`
   * `"single"`: `confirmMessage`.
   */
  async finish(
    i: number,
    id: string,
    outcome?: JobOutcome,
    via: WritePath = "commit",
  ): Promise<void> {
    const k = this.#index(i);
    const store = this.stores[k];
    const epoch = this.#epochs[k];
    if (via === "commit" && store.commit) {
      const outcomes = outcome ? new Map([[id, outcome]]) : undefined;
      await store.commit(epoch, { confirm: [id], ...(outcomes ? { outcomes } : {}) });
    } else {
      await store.confirmMessage(epoch, id, outcome ? { outcome } : {});
    }
  }

  /**
   * Reopen the storage of instance 0 as that process restarted would (the case requires
   * `reopen`): the new store is loaded, and its lease round run if it has them. Instance 0 is
   * then fenced: the case stops its lease rounds.
   */
  async reopen(): Promise<{ store: JobStore; loaded: LoadResult }> {
    const reopen = this.fixture.reopen;
    if (!reopen) throw new TypeError("the case needs the reopen capability");
    const store = await reopen.call(this.fixture);
    const loaded = await store.load();
    this.stop(0);
    await leaseRound(store)?.();
    return { store, loaded };
  }

  /** Take every due job from the instances in `from` (default all running) until none is left. */
  async takeAll(from?: readonly number[]): Promise<Map<string, { at: number; job: ReadyJob }>> {
    const indexes = from?.map((i) => this.#index(i)) ??
      this.stores.map((_, k) => k).filter((k) => !this.#stopped.has(k));
    const taken = new Map<string, { at: number; job: ReadyJob }>();
    for (let sweep = 0; sweep < 20; sweep++) {
      let any = false;
      for (const k of indexes) {
        for (const job of await this.stores[k].take(100)) {
          check(!taken.has(job.messageId), `${job.messageId} was handed out twice`);
          taken.set(job.messageId, { at: k, job });
          any = true;
        }
      }
      if (!any) return taken;
    }
    throw new CaseFailure("take kept handing out jobs after 20 sweeps");
  }

  #index(i: number): number {
    return ((i % this.stores.length) + this.stores.length) % this.stores.length;
  }
}

// ---------------------------------------------------------------------------------------------
// Outcomes and assertions

/** A completed try's outcome, with `result` (any JSON value) when given. */
export function completed(result?: unknown, worker?: string): JobOutcome {
  return {
    kind: "completed",
    ...(result === undefined ? {} : { result: JSON.stringify(result) }),
    ...(worker === undefined ? {} : { worker }),
  };
}

/** A failed try's outcome. */
export function failed(message: string): JobOutcome {
  return { kind: "failed", error: { name: "Error", message } };
}

/** A try that ended cancelled while active. */
export const CANCELLED: JobOutcome = { kind: "cancelled" };

/** Fails the case with `message` unless `condition` holds. */
export function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new CaseFailure(message);
}

/** Fails the case unless `actual` deeply equals `expected` (JSON-like values). */
export function equal(actual: unknown, expected: unknown, what: string): void {
  try {
    kitEqual(actual, expected, what);
  } catch (error) {
    throw new CaseFailure((error as Error).message);
  }
}

/** Awaits a promise that must reject as expected (`"fenced"`, `"full"`, ...); returns the error. */
export async function rejects(
  promise: Promise<unknown>,
  expected: Expected | "full",
  what: string,
): Promise<unknown> {
  try {
    return await kitRejects(promise, expected === "full" ? isBacklogFull : expected, what);
  } catch (error) {
    const message = (error as Error).message;
    const label = expected === "full" ? "BacklogFullError" : "$&";
    throw new CaseFailure(message.replace(/a matching rejection/, label));
  }
}

/** True for {@linkcode BacklogFullError} (by class or by name, for copies of the module). */
export function isBacklogFull(error: unknown): boolean {
  return error instanceof BacklogFullError ||
    (error as Error | undefined)?.name === "BacklogFullError";
}

/** The MessageIDs of `jobs`, in order. */
export function idsOf(jobs: readonly { readonly messageId: string }[]): string[] {
  return jobs.map((job) => job.messageId);
}

/** A short JSON view of a value for failure messages. */
export function show(value: unknown): string {
  try {
    const text = JSON.stringify(value) ?? String(value);
    return text.length > 400 ? `${text.slice(0, 400)}…` : text;
  } catch {
    return String(value);
  }
}

function describeError(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return `a thrown ${show(error)}`;
}
