/**
 * Incarnation fencing, in bounded memory. Every start of a worker endpoint has a fresh
 * incarnation id. For each worker name the controller remembers the latest incarnation it saw
 * and the incarnations a newer one replaced (tombstones): a replaced incarnation can never bind
 * again, so a zombie process cannot take a binding back from its successor.
 *
 * Names are free to invent (a token for `w` admits `w#1`, `w#2`, … without end), so the history
 * is bounded: it holds at most `maxRemembered` incarnation ids (names' current ones plus
 * tombstones) beyond what live bindings pin. Past that, it forgets the least recently registered
 * names that have **no live binding**, whole; and a name with a live binding keeps only its
 * newest {@linkcode TOMBSTONES_UNDER_PRESSURE} tombstones. What still holds after eviction:
 *
 * - a name with a live binding is never forgotten: its current incarnation stays current, and
 *   its most recently replaced incarnations stay refused, so a zombie of one of its last restarts
 *   can never take the live binding back;
 * - a forgotten name starts afresh: a replaced incarnation of it may bind again, as a fresh
 *   binding (new binding id, sub-flow from 1) that gets only jobs dispatched from then on, and
 *   the name's successor replaces it as soon as it registers (its jobs requeue). Nothing is lost
 *   or held by two live bindings at once; only the refusal of an old zombie is forgotten.
 *
 * Each registration does a bounded amount of eviction work (at most
 * {@linkcode EVICTION_STEPS} names visited), so a flood of fresh names costs constant time each.
 *
 * @module
 */

/** How many replaced incarnations to remember per worker name (oldest forgotten first). */
export const MAX_TOMBSTONES_PER_WORKER = 1024;
/** Tombstones a name with a live binding keeps when the history is over its bound. */
export const TOMBSTONES_UNDER_PRESSURE = 8;
/** Names visited per registration while the history is over its bound. */
export const EVICTION_STEPS = 64;
/** The default bound on remembered incarnation ids. */
export const DEFAULT_MAX_REMEMBERED = 16_384;

/** One name's history, and its place in the recency list (least recently registered first). */
interface WorkerHistory {
  readonly worker: string;
  current: string;
  /** Replaced incarnations, oldest first. */
  replaced: string[] | undefined;
  older: WorkerHistory | undefined;
  newer: WorkerHistory | undefined;
}

/** The verdict on a registering incarnation. */
export type IncarnationVerdict =
  /** The latest known incarnation (or the first ever seen). */
  | { readonly kind: "current" }
  /** A new incarnation: `previous` is now replaced. */
  | { readonly kind: "newer"; readonly previous: string }
  /** A replaced incarnation: drop the registration. */
  | { readonly kind: "stale" };

/** Options of {@linkcode Incarnations}. */
export interface IncarnationsOptions {
  /** Incarnation ids to remember beyond those pinned by live bindings. Default 16,384. */
  readonly maxRemembered?: number;
  /** Whether `worker` has a live binding (such a name is never forgotten). Default: none has. */
  readonly isBound?: (worker: string) => boolean;
}

/**
 * Tracks incarnations per worker name, in bounded memory.
 *
 * @example
 * ```ts
 * import { Incarnations } from "./incarnations.ts";
 * const incarnations = new Incarnations();
 * incarnations.admit("w1", "a");
 * console.assert(incarnations.admit("w1", "b").kind === "newer");
 * console.assert(incarnations.admit("w1", "a").kind === "stale");
 * ```
 */
export class Incarnations {
  readonly #workers = new Map<string, WorkerHistory>();
  /** The recency list: a doubly linked list, so moving and evicting are O(1). */
  #oldest: WorkerHistory | undefined;
  #newest: WorkerHistory | undefined;
  readonly #maxRemembered: number;
  readonly #isBound: (worker: string) => boolean;
  /** Incarnation ids held: one current per name plus every tombstone. */
  #size = 0;

  /** An empty history. */
  constructor(options: IncarnationsOptions = {}) {
    this.#maxRemembered = options.maxRemembered ?? DEFAULT_MAX_REMEMBERED;
    this.#isBound = options.isBound ?? (() => false);
  }

  /** Incarnation ids remembered now (names' current ones plus tombstones). */
  get size(): number {
    return this.#size;
  }

  /** Worker names remembered now. */
  get names(): number {
    return this.#workers.size;
  }

  /** Judge `incarnation` of `worker` and record it when it is admitted. */
  admit(worker: string, incarnation: string): IncarnationVerdict {
    const history = this.#workers.get(worker);
    if (!history) {
      const fresh: WorkerHistory = {
        worker,
        current: incarnation,
        replaced: undefined,
        older: undefined,
        newer: undefined,
      };
      this.#workers.set(worker, fresh);
      this.#append(fresh);
      this.#size += 1;
      this.#evict();
      return { kind: "current" };
    }
    this.#unlink(history);
    this.#append(history);
    if (history.current === incarnation) return { kind: "current" };
    if (history.replaced?.includes(incarnation)) return { kind: "stale" };
    const previous = history.current;
    const replaced = history.replaced ??= [];
    replaced.push(previous);
    if (replaced.length > MAX_TOMBSTONES_PER_WORKER) replaced.shift();
    else this.#size += 1;
    history.current = incarnation;
    this.#evict();
    return { kind: "newer", previous };
  }

  /** Forget, oldest first, until the history is within its bound (a bounded number of steps). */
  #evict(): void {
    for (let steps = 0; steps < EVICTION_STEPS && this.#size > this.#maxRemembered; steps++) {
      const history = this.#oldest!;
      this.#unlink(history);
      if (!this.#isBound(history.worker)) {
        this.#workers.delete(history.worker);
        this.#size -= 1 + (history.replaced?.length ?? 0);
        continue;
      }
      const replaced = history.replaced;
      if (replaced && replaced.length > TOMBSTONES_UNDER_PRESSURE) {
        this.#size -= replaced.length - TOMBSTONES_UNDER_PRESSURE;
        history.replaced = replaced.slice(-TOMBSTONES_UNDER_PRESSURE);
      }
      this.#append(history); // visited: behind the names not looked at yet
    }
  }

  #append(history: WorkerHistory): void {
    history.older = this.#newest;
    history.newer = undefined;
    if (this.#newest) this.#newest.newer = history;
    else this.#oldest = history;
    this.#newest = history;
  }

  #unlink(history: WorkerHistory): void {
    if (history.older) history.older.newer = history.newer;
    else this.#oldest = history.newer;
    if (history.newer) history.newer.older = history.older;
    else this.#newest = history.older;
    history.older = history.newer = undefined;
  }
}
