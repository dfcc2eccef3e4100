/**
 * A simulated remote Deno KV: a local KV handle (`Deno.openKv(path)`, or `openKv` from npm
 * `@deno/kv`) behind the round trips of a hosted one, with faults on cue. On Deno Deploy a
 * commit costs about 10 ms and a read about 5 ms within a region; a store that is fast on a
 * local SQLite file can be slow there, and only a benchmark or a test that pays those round trips
 * shows it. {@linkcode RemoteKv} wraps the handle and offers the same structural API the stores
 * use (`getMany`, `get`, `list`, `atomic` with `check`/`set`/`delete`/`sum`/`commit`, `watch`,
 * `close`), so a store takes it in place of the handle.
 *
 * **Round trips.** Every call is a round trip of its own, delayed by real timers (`setTimeout`),
 * so calls in flight at once overlap: ten concurrent commits take about one commit latency,
 * ten sequential ones ten. A round trip is modelled as half the latency out, the backend acting
 * at one instant, half the latency back: a commit is applied to the backend after half its
 * latency (only then can another reader see it) and answers after the other half; a read
 * (`getMany`, `get`, one batch of a `list`) takes its snapshot in the middle the same way. A
 * list fetches its entries lazily, one batch of `batchSize` entries a round trip (the backend
 * is asked again when a batch is used up, as Deno's list does); an event of a `watch` stream
 * arrives one read latency after the backend emitted it, in order. With a latency of 0 no timer
 * is set at all, so a wrapper at 0 costs next to nothing and only counts.
 *
 * **Ordering.** A commit lands before it answers, so a caller that awaits one commit before it
 * issues the next sees them land in that order. Commits issued concurrently may land in any
 * order, as on a remote KV: with `jitter` their timers fire in any order, and even without it
 * the backend may apply the commits it is handed at once in another order (npm `@deno/kv` does).
 *
 * **Faults** are decided per commit, when `commit()` is called, by a hook or by probabilities:
 * - `"lost-answer"`: the commit is applied, then the call rejects as a broken connection would,
 *   so the caller cannot know that it landed (the outcome-unknown case every store must handle);
 * - `"locked"`: the call rejects with `TypeError("database is locked")` and nothing is applied
 *   (what SQLite answers when another process holds the file: retriable);
 * - `"slow"`: the round trip takes `slowFactor` (default 10) times as long.
 *
 * **Counters** for benchmarks and tests: `commits` (calls of `commit()`, whatever their fate),
 * `checks` and `mutations` (what those commits carried: sets, deletes and sums), `reads`
 * (`getMany` and `get` calls plus list batches); `reset()` zeroes them.
 *
 * Nothing here needs a Deno type: the handle is structural, so npm `@deno/kv` on Node and Bun
 * fits as well.
 *
 * @module
 */

import { durationOption, functionOption, integerOption, optionsObject } from "../core/options.ts";
import type { KvCheckLike, KvEntryLike, KvKey } from "../queue/deno_kv/port.ts";

/** What can go wrong with one commit (see the module's story). */
export type RemoteKvFault = "lost-answer" | "locked" | "slow";

/** What a fault hook is told about the commit it decides. */
export interface RemoteKvCommitInfo {
  /** This commit's number: 1 for the first `commit()` call since the wrapper was made or reset. */
  readonly commit: number;
  /** The checks the commit carries. */
  readonly checks: number;
  /** The mutations the commit carries (sets, deletes, sums). */
  readonly mutations: number;
}

/** Decides the fault of one commit; `undefined` lets it go through. */
export type RemoteKvFaultHook = (commit: RemoteKvCommitInfo) => RemoteKvFault | undefined;

/** The probability of each fault per commit (0..1 each, at most 1 together). */
export interface RemoteKvFaultRates {
  /** The commit is applied but its answer is lost. */
  readonly lostAnswer?: number;
  /** The commit is refused with `database is locked`, nothing applied. */
  readonly locked?: number;
  /** The commit is slowed by `slowFactor`. */
  readonly slow?: number;
}

/** Options of {@linkcode RemoteKv}. */
export interface RemoteKvOptions {
  /** The round trip of a commit, ms (0..60,000). Default 10. */
  readonly commitLatency?: number;
  /** The round trip of a read (`getMany`, `get`, a list batch, a watch event), ms. Default 5. */
  readonly readLatency?: number;
  /** Each round trip is longer or shorter by up to this many ms, uniformly. Default 0. */
  readonly jitter?: number;
  /** The randomness of jitter and fault rates; pass a seeded one to repeat a run. Default `Math.random`. */
  readonly random?: () => number;
  /** Which commits fail, and how: a hook, or probabilities. Default none. */
  readonly faults?: RemoteKvFaultHook | RemoteKvFaultRates;
  /** How many times longer a `"slow"` commit takes (an integer, 1..1,000). Default 10. */
  readonly slowFactor?: number;
}

/** A selector of {@linkcode RemoteKv.list}: a prefix (optionally bounded), or a range. */
export type RemoteKvListSelector =
  | { readonly prefix: KvKey; readonly start?: KvKey; readonly end?: KvKey }
  | { readonly start: KvKey; readonly end: KvKey };

/** Options of {@linkcode RemoteKv.list}, passed on to the backend as they are. */
export interface RemoteKvListOptions {
  /** At most this many entries. */
  readonly limit?: number;
  /** Entries a round trip. Default `limit` if set (at most 500), else 100, as on Deno. */
  readonly batchSize?: number;
  /** In reverse key order. */
  readonly reverse?: boolean;
  /** Where a previous list stopped. */
  readonly cursor?: string;
  /** "strong" or "eventual" (a local backend is always strong). */
  readonly consistency?: "strong" | "eventual";
}

/** The atomic operation of the handle a {@linkcode RemoteKv} wraps. */
export interface RemoteKvBackendAtomic {
  /** Adds versionstamp checks. */
  check(...checks: KvCheckLike[]): unknown;
  /** Adds a set. */
  set(key: KvKey, value: unknown, options?: { readonly expireIn?: number }): unknown;
  /** Adds a delete. */
  delete(key: KvKey): unknown;
  /** Adds a sum of a `KvU64`. */
  sum(key: KvKey, n: bigint): unknown;
  /** Commits. */
  commit(): Promise<{ readonly ok: true; readonly versionstamp: string } | { readonly ok: false }>;
}

/** The handle a {@linkcode RemoteKv} wraps: `Deno.Kv`, or npm `@deno/kv`'s `Kv`. */
export interface RemoteKvBackend {
  /** Reads up to 10 keys consistently. */
  getMany(keys: readonly KvKey[]): Promise<readonly KvEntryLike[]>;
  /** Reads one key (optional: `getMany` serves when absent). */
  get?(key: KvKey): Promise<KvEntryLike>;
  /** Lists keys in order. */
  list(selector: RemoteKvListSelector, options?: RemoteKvListOptions): AsyncIterable<KvEntryLike>;
  /** Starts an atomic commit. */
  atomic(): RemoteKvBackendAtomic;
  /** Streams the entries of `keys` whenever one changes (optional). */
  watch?(
    keys: readonly KvKey[],
    options?: { readonly raw?: boolean },
  ): ReadableStream<readonly KvEntryLike[]>;
  /** Closes the handle. */
  close?(): void;
}

/** What a commit answers: `{ ok: false }` when a check failed (nothing was written). */
type CommitResult = { readonly ok: true; readonly versionstamp: string } | { readonly ok: false };

const OWNER = "RemoteKv";
/** Deno's list batch when none is given (and its largest for a strong read). */
const DEFAULT_BATCH = 100;
const MAX_BATCH = 500;

/** Resolve after `ms` ms; at once (no timer) for 0. */
function pause(ms: number): Promise<void> | undefined {
  return ms > 0 ? new Promise((resolve) => setTimeout(resolve, ms)) : undefined;
}

/**
 * A local KV handle behind the latency of a remote one, with commit faults on cue and counters
 * of its round trips (see the module's story). The handle stays the caller's; `close()` closes
 * it.
 *
 * @example Ten concurrent commits take about one round trip, and are counted
 * ```ts
 * import { RemoteKv } from "../../testing.ts";
 *
 * const local = await Deno.openKv(":memory:");
 * const kv = new RemoteKv(local, { commitLatency: 10, readLatency: 5 });
 * const results = await Promise.all(
 *   Array.from({ length: 10 }, (_, i) => kv.atomic().set(["job", i], i).commit()),
 * );
 * console.assert(results.every((result) => result.ok));
 * console.assert(kv.commits === 10 && kv.mutations === 10);
 * const [entry] = await kv.getMany([["job", 3]]);
 * console.assert(entry.value === 3 && kv.reads === 1);
 * kv.close();
 * ```
 *
 * @example A commit whose answer is lost has landed all the same
 * ```ts
 * import { RemoteKv } from "../../testing.ts";
 *
 * const local = await Deno.openKv(":memory:");
 * const kv = new RemoteKv(local, {
 *   commitLatency: 0,
 *   readLatency: 0,
 *   faults: ({ commit }) => (commit === 1 ? "lost-answer" : undefined),
 * });
 * const answer = await kv.atomic().set(["a"], 1).commit().catch((error) => error);
 * console.assert(answer instanceof Error);
 * console.assert((await kv.get(["a"])).value === 1);
 * kv.close();
 * ```
 */
export class RemoteKv {
  readonly #backend: RemoteKvBackend;
  readonly #commitLatency: number;
  readonly #readLatency: number;
  readonly #jitter: number;
  readonly #random: () => number;
  readonly #fault: RemoteKvFaultHook | undefined;
  readonly #slowFactor: number;
  #commits = 0;
  #reads = 0;
  #mutations = 0;
  #checks = 0;

  /** Wraps `backend`; throws an error naming a bad option. */
  constructor(backend: RemoteKvBackend, options: RemoteKvOptions = {}) {
    if (
      typeof backend !== "object" || backend === null ||
      typeof backend.getMany !== "function" || typeof backend.list !== "function" ||
      typeof backend.atomic !== "function"
    ) {
      throw new TypeError(
        `Cannot create ${OWNER}: backend must be a Deno.Kv (getMany, list, atomic)`,
      );
    }
    optionsObject(OWNER, options);
    this.#backend = backend;
    this.#commitLatency = durationOption(
      OWNER,
      "commitLatency",
      options.commitLatency,
      10,
      0,
      60_000,
    );
    this.#readLatency = durationOption(OWNER, "readLatency", options.readLatency, 5, 0, 60_000);
    this.#jitter = durationOption(OWNER, "jitter", options.jitter, 0, 0, 60_000);
    this.#random = functionOption(OWNER, "random", options.random, false) ?? Math.random;
    this.#slowFactor = integerOption(OWNER, "slowFactor", options.slowFactor, 10, 1, 1_000);
    this.#fault = faultHook(options.faults, this.#random);
  }

  /** Calls of `commit()` since the wrapper was made or reset, whatever their outcome. */
  get commits(): number {
    return this.#commits;
  }

  /** Round trips of reads: `getMany` and `get` calls, plus one per list batch. */
  get reads(): number {
    return this.#reads;
  }

  /** Mutations (sets, deletes, sums) carried by the commits counted in `commits`. */
  get mutations(): number {
    return this.#mutations;
  }

  /** Checks carried by the commits counted in `commits`. */
  get checks(): number {
    return this.#checks;
  }

  /** Zero every counter (commit numbers seen by a fault hook start again at 1). */
  reset(): void {
    this.#commits = 0;
    this.#reads = 0;
    this.#mutations = 0;
    this.#checks = 0;
  }

  /** Reads up to 10 keys consistently, in one read round trip. */
  async getMany(keys: readonly KvKey[]): Promise<readonly KvEntryLike[]> {
    this.#reads += 1;
    const half = this.#latency(this.#readLatency) / 2;
    await pause(half);
    const entries = await this.#backend.getMany(keys);
    await pause(half);
    return entries;
  }

  /** Reads one key, in one read round trip. */
  async get(key: KvKey): Promise<KvEntryLike> {
    this.#reads += 1;
    const half = this.#latency(this.#readLatency) / 2;
    await pause(half);
    const backend = this.#backend;
    const entry = backend.get ? await backend.get(key) : (await backend.getMany([key]))[0];
    await pause(half);
    return entry;
  }

  /**
   * Lists keys in order, fetched lazily: one read round trip for each batch of `batchSize`
   * entries (and one more that finds the end after a full batch, unless `limit` was reached).
   */
  list(
    selector: RemoteKvListSelector,
    options: RemoteKvListOptions = {},
  ): AsyncIterable<KvEntryLike> {
    return this.#list(selector, options);
  }

  async *#list(
    selector: RemoteKvListSelector,
    options: RemoteKvListOptions,
  ): AsyncGenerator<KvEntryLike> {
    const limit = options.limit;
    const batch = Math.max(1, options.batchSize ?? Math.min(limit ?? DEFAULT_BATCH, MAX_BATCH));
    const entries = this.#backend.list(selector, options)[Symbol.asyncIterator]();
    let done = false;
    try {
      for (let index = 0; limit === undefined || index < limit; index++) {
        const fetch = index % batch === 0;
        let half = 0;
        if (fetch) {
          this.#reads += 1;
          half = this.#latency(this.#readLatency) / 2;
          await pause(half);
        }
        const next = await entries.next();
        if (fetch) await pause(half);
        if (next.done) {
          done = true;
          return;
        }
        yield next.value;
      }
    } finally {
      if (!done) await entries.return?.();
    }
  }

  /** Starts an atomic commit (its `commit()` is one commit round trip). */
  atomic(): RemoteKvAtomic {
    return new RemoteKvAtomic(
      this.#backend.atomic(),
      (atomic, checks, mutations) => this.#commit(atomic, checks, mutations),
    );
  }

  /**
   * Streams the entries of `keys` whenever one changes, as the backend does, each event one read
   * latency later (in order). Throws a TypeError when the backend has no `watch`. Canceling the
   * stream cancels the backend's.
   */
  watch(
    keys: readonly KvKey[],
    options?: { readonly raw?: boolean },
  ): ReadableStream<readonly KvEntryLike[]> {
    if (typeof this.#backend.watch !== "function") {
      throw new TypeError("Cannot watch: the wrapped KV has no watch()");
    }
    const source = this.#backend.watch(keys, options).getReader();
    const queue: { readonly at: number; readonly deliver: () => void }[] = [];
    let timer: ReturnType<typeof setTimeout> | undefined;
    let cancelled = false;
    let last = 0;
    const flush = () => {
      timer = undefined;
      while (queue.length > 0 && queue[0].at <= performance.now()) queue.shift()!.deliver();
      arm();
    };
    const arm = () => {
      if (timer !== undefined || queue.length === 0 || cancelled) return;
      timer = setTimeout(flush, Math.max(0, queue[0].at - performance.now()));
    };
    const later = (deliver: () => void) => {
      // Never before an earlier event: with jitter a later one could otherwise overtake it.
      last = Math.max(last, performance.now() + this.#latency(this.#readLatency));
      queue.push({ at: last, deliver });
      arm();
    };
    return new ReadableStream<readonly KvEntryLike[]>({
      start(controller) {
        void (async () => {
          try {
            for (;;) {
              const { done, value } = await source.read();
              if (cancelled) return;
              if (done) return later(() => controller.close());
              later(() => controller.enqueue(value));
            }
          } catch (error) {
            if (!cancelled) later(() => controller.error(error));
          }
        })();
      },
      cancel(reason) {
        cancelled = true;
        clearTimeout(timer);
        queue.length = 0;
        return source.cancel(reason);
      },
    });
  }

  /** Closes the wrapped handle. */
  close(): void {
    this.#backend.close?.();
  }

  /** Closes the wrapped handle (`using kv = new RemoteKv(…)`). */
  [Symbol.dispose](): void {
    this.close();
  }

  /** One commit round trip: half the latency, the backend commits (or not), the other half. */
  async #commit(
    atomic: RemoteKvBackendAtomic,
    checks: number,
    mutations: number,
  ): Promise<CommitResult> {
    this.#commits += 1;
    this.#checks += checks;
    this.#mutations += mutations;
    const fault = this.#fault?.({ commit: this.#commits, checks, mutations });
    const latency = this.#latency(this.#commitLatency) * (fault === "slow" ? this.#slowFactor : 1);
    const half = latency / 2;
    await pause(half);
    if (fault === "locked") {
      await pause(half);
      throw new TypeError("database is locked");
    }
    let result: CommitResult;
    try {
      result = await atomic.commit();
    } finally {
      await pause(half);
    }
    if (fault === "lost-answer") {
      throw new Error(
        "Cannot read the commit's answer: the connection was lost (simulated by RemoteKv)",
      );
    }
    return result;
  }

  /** `base` with jitter, never below 0. */
  #latency(base: number): number {
    if (this.#jitter === 0) return base;
    return Math.max(0, base + (this.#random() * 2 - 1) * this.#jitter);
  }
}

/**
 * An atomic operation of a {@linkcode RemoteKv}: the backend's, whose `commit()` pays the commit
 * round trip and may meet a fault. Made by {@linkcode RemoteKv.atomic}.
 *
 * @example
 * ```ts
 * import { RemoteKv } from "../../testing.ts";
 *
 * const kv = new RemoteKv(await Deno.openKv(":memory:"), { commitLatency: 0 });
 * const result = await kv.atomic()
 *   .check({ key: ["a"], versionstamp: null })
 *   .set(["a"], 1)
 *   .sum(["n"], 1n)
 *   .commit();
 * console.assert(result.ok && kv.checks === 1 && kv.mutations === 2);
 * kv.close();
 * ```
 */
export class RemoteKvAtomic {
  readonly #atomic: RemoteKvBackendAtomic;
  readonly #commit: (
    atomic: RemoteKvBackendAtomic,
    checks: number,
    mutations: number,
  ) => Promise<CommitResult>;
  #checks = 0;
  #mutations = 0;

  /** Wraps `atomic`; `commit` is the wrapper's round trip. */
  constructor(
    atomic: RemoteKvBackendAtomic,
    commit: (
      atomic: RemoteKvBackendAtomic,
      checks: number,
      mutations: number,
    ) => Promise<CommitResult>,
  ) {
    this.#atomic = atomic;
    this.#commit = commit;
  }

  /** Adds versionstamp checks (null: the key must not exist). */
  check(...checks: KvCheckLike[]): this {
    this.#checks += checks.length;
    this.#atomic.check(...checks);
    return this;
  }

  /** Adds a set; `expireIn` (ms) lets KV delete the key some time after. */
  set(key: KvKey, value: unknown, options?: { readonly expireIn?: number }): this {
    this.#mutations += 1;
    if (options === undefined) this.#atomic.set(key, value);
    else this.#atomic.set(key, value, options);
    return this;
  }

  /** Adds a delete. */
  delete(key: KvKey): this {
    this.#mutations += 1;
    this.#atomic.delete(key);
    return this;
  }

  /** Adds a `sum` of a `KvU64` (wrapping at 2^64). */
  sum(key: KvKey, n: bigint): this {
    this.#mutations += 1;
    this.#atomic.sum(key, n);
    return this;
  }

  /** Commits after half the round trip, answers after the other half; may meet a fault. */
  commit(): Promise<
    { readonly ok: true; readonly versionstamp: string } | { readonly ok: false }
  > {
    return this.#commit(this.#atomic, this.#checks, this.#mutations);
  }
}

/** The fault hook of the `faults` option. */
function faultHook(
  faults: RemoteKvOptions["faults"],
  random: () => number,
): RemoteKvFaultHook | undefined {
  if (faults === undefined || typeof faults === "function") return faults;
  if (typeof faults !== "object" || faults === null) {
    throw new TypeError(
      `Cannot create ${OWNER}: option "faults" must be a function or an object of rates, got ${
        String(faults)
      }`,
    );
  }
  const rates: [RemoteKvFault, number][] = [];
  let total = 0;
  for (
    const [name, fault] of [["lostAnswer", "lost-answer"], ["locked", "locked"], [
      "slow",
      "slow",
    ]] as const
  ) {
    const rate = faults[name] ?? 0;
    if (typeof rate !== "number" || !(rate >= 0 && rate <= 1)) {
      throw new RangeError(
        `Cannot create ${OWNER}: option "faults.${name}" must be a probability in 0..1, got ${
          String(rate)
        }`,
      );
    }
    total += rate;
    rates.push([fault, total]);
  }
  if (total > 1) {
    throw new RangeError(
      `Cannot create ${OWNER}: the fault rates must add up to at most 1, got ${total}`,
    );
  }
  if (total === 0) return undefined;
  return () => {
    const draw = random();
    return rates.find(([, upTo]) => draw < upTo)?.[0];
  };
}
