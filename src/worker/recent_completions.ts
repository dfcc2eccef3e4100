/**
 * The MessageIDs a worker endpoint completed recently, so that a job that comes back after its
 * binding ended (the controller requeued it before the confirmation arrived) is confirmed
 * without running it again.
 *
 * Why not a map updated at every completion: looking a MessageID up hashes it, and the first
 * hash of a string fresh from a jobs frame is the most expensive thing a worker does per job on
 * V8 (well over a microsecond on Deno 2.9, more than decoding and running a no-op job). A job
 * comes back only under a later binding: the controller requeues a job only when the binding
 * that held it ends, and a binding never reuses a sequence. So each completion is only written
 * to a ring of the latest `capacity` MessageIDs, and the set looked up is made from the ring
 * when a new sub-flow is adopted ({@linkcode RecentCompletions.adopt}). Within a sub-flow,
 * lookups see the completions of the earlier ones; a job completed in this sub-flow cannot come
 * back in it. Two completions can, and are added `eager` (found at once): a job of a sub-flow
 * that ended while it ran, and, with feature `outcomes`, any job (a try the controller failed
 * after its timeout is retried and may land on the same binding).
 *
 * @module
 */

/**
 * Recent completions of one worker endpoint.
 *
 * @example
 * ```ts
 * import { RecentCompletions } from "./recent_completions.ts";
 * const completions = new RecentCompletions(2);
 * completions.add("a", false);
 * console.assert(!completions.has("a")); // completed in this sub-flow: it cannot come back here
 * completions.adopt(); // a new sub-flow
 * console.assert(completions.has("a"));
 * completions.add("b", true); // eager (feature outcomes): found at once
 * console.assert(completions.has("b"));
 * ```
 */
export class RecentCompletions {
  /** The latest completions, oldest overwritten first. */
  readonly #ring: (string | undefined)[];
  #next = 0;
  /** What `has` finds: the ring when the current sub-flow was adopted, and eager completions. */
  #lookup = new Set<string>();
  /** Completions since the current sub-flow was adopted, and whether one was eager. */
  #sinceAdopted = 0;
  #eagerSinceAdopted = false;

  /** Remembers the latest `capacity` completions (at least 1). */
  constructor(readonly capacity: number) {
    this.#ring = new Array(Math.max(1, capacity));
  }

  /** `messageId` completed; `eager` makes it found at once (within the current sub-flow too). */
  add(messageId: string, eager: boolean): void {
    const slot = this.#next;
    if (eager) {
      this.#eagerSinceAdopted = true;
      const evicted = this.#ring[slot];
      if (evicted !== undefined) this.#lookup.delete(evicted);
      this.#lookup.add(messageId);
    } else if (++this.#sinceAdopted === this.#ring.length && !this.#eagerSinceAdopted) {
      // Every completion the lookup was made from has left the window: nothing can come back.
      this.#lookup = new Set();
    }
    this.#ring[slot] = messageId;
    this.#next = slot + 1 === this.#ring.length ? 0 : slot + 1;
  }

  /** Whether `messageId` completed before the current sub-flow (or eagerly). */
  has(messageId: string): boolean {
    return this.#lookup.size > 0 && this.#lookup.has(messageId);
  }

  /** A new sub-flow starts: every completion so far can come back in it. */
  adopt(): void {
    const lookup = new Set<string>();
    for (const messageId of this.#ring) if (messageId !== undefined) lookup.add(messageId);
    this.#lookup = lookup;
    this.#sinceAdopted = 0;
    this.#eagerSinceAdopted = false;
  }
}
