/**
 * Incarnation fencing. Every start of a worker endpoint has a fresh incarnation id. For each
 * worker name the controller remembers the latest incarnation it saw and every incarnation a
 * newer one replaced: a replaced incarnation can never bind again, so a zombie process cannot
 * take a binding back from its successor.
 *
 * @module
 */

/** How many replaced incarnations to remember per worker name (oldest forgotten first). */
export const MAX_TOMBSTONES_PER_WORKER = 1024;

interface WorkerHistory {
  current: string;
  readonly replaced: Set<string>;
}

/** The verdict on a registering incarnation. */
export type IncarnationVerdict =
  /** The latest known incarnation (or the first ever seen). */
  | { readonly kind: "current" }
  /** A new incarnation: `previous` is now replaced. */
  | { readonly kind: "newer"; readonly previous: string }
  /** A replaced incarnation: drop the registration. */
  | { readonly kind: "stale" };

/**
 * Tracks incarnations per worker name.
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

  /** Judge `incarnation` of `worker` and record it when it is admitted. */
  admit(worker: string, incarnation: string): IncarnationVerdict {
    const history = this.#workers.get(worker);
    if (!history) {
      this.#workers.set(worker, { current: incarnation, replaced: new Set() });
      return { kind: "current" };
    }
    if (history.current === incarnation) return { kind: "current" };
    if (history.replaced.has(incarnation)) return { kind: "stale" };
    const previous = history.current;
    history.replaced.add(previous);
    if (history.replaced.size > MAX_TOMBSTONES_PER_WORKER) {
      history.replaced.delete(history.replaced.values().next().value!);
    }
    history.current = incarnation;
    return { kind: "newer", previous };
  }
}
