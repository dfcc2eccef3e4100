/**
 * Time as an injected dependency: the controller and the worker endpoint never read the global
 * clock or timers directly, so tests drive them with {@linkcode SimulatedClock} and every run is
 * deterministic.
 *
 * @module
 */

/** A cancellable timer handle returned by {@linkcode Clock.setTimeout}. */
export interface TimerHandle {
  /** Cancel the timer; calling it twice is harmless. */
  cancel(): void;
}

/** The time source the core uses. */
export interface Clock {
  /** Milliseconds since an arbitrary origin; never decreases. */
  now(): number;
  /** Run `callback` once after `ms` milliseconds. */
  setTimeout(callback: () => void, ms: number): TimerHandle;
}

/**
 * The real clock: `performance.now()` and the global `setTimeout`.
 *
 * @example
 * ```ts
 * import { systemClock } from "./clock.ts";
 * const timer = systemClock.setTimeout(() => {}, 10);
 * timer.cancel();
 * ```
 */
export const systemClock: Clock = {
  now: () => performance.now(),
  setTimeout(callback, ms) {
    const id = setTimeout(callback, ms);
    return { cancel: () => clearTimeout(id) };
  },
};

/**
 * Wall-clock time: `Date.now()` (epoch ms) and the global `setTimeout`. For what is persisted
 * and compared across processes and restarts (a job's due time, its timestamps), where the
 * monotonic {@linkcode systemClock} has no meaning.
 *
 * @example
 * ```ts
 * import { wallClock } from "./clock.ts";
 * console.assert(Math.abs(wallClock.now() - Date.now()) < 1000);
 * ```
 */
export const wallClock: Clock = {
  now: () => Date.now(),
  setTimeout: systemClock.setTimeout,
};

interface SimulatedTimer {
  readonly at: number;
  readonly order: number;
  readonly callback: () => void;
  cancelled: boolean;
}

/**
 * A clock that moves only when told to. Timers due at the same instant fire in the order they
 * were set. Promise continuations do not run inside {@linkcode SimulatedClock.advance}; use
 * {@linkcode SimulatedClock.advanceAsync} when timers and promises interleave.
 *
 * @example Fire a timer without waiting
 * ```ts
 * import { SimulatedClock } from "./clock.ts";
 * const clock = new SimulatedClock();
 * let fired = false;
 * clock.setTimeout(() => (fired = true), 1000);
 * clock.advance(999);
 * console.assert(!fired);
 * clock.advance(1);
 * console.assert(fired);
 * ```
 */
export class SimulatedClock implements Clock {
  #now = 0;
  #order = 0;
  #timers: SimulatedTimer[] = [];

  /** The simulated time in milliseconds. */
  now(): number {
    return this.#now;
  }

  /** Schedule `callback` at `now() + ms`. */
  setTimeout(callback: () => void, ms: number): TimerHandle {
    const timer: SimulatedTimer = {
      at: this.#now + Math.max(0, ms),
      order: this.#order++,
      callback,
      cancelled: false,
    };
    this.#timers.push(timer);
    return { cancel: () => void (timer.cancelled = true) };
  }

  /** Number of timers still scheduled. */
  get pendingTimers(): number {
    return this.#timers.filter((timer) => !timer.cancelled).length;
  }

  /** Move time forward by `ms`, firing every timer that falls due, in time order. */
  advance(ms: number): void {
    const target = this.#now + ms;
    for (let timer = this.#nextDue(target); timer; timer = this.#nextDue(target)) {
      this.#now = timer.at;
      timer.callback();
    }
    this.#now = target;
  }

  /**
   * Like {@linkcode SimulatedClock.advance}, but lets pending promise continuations settle
   * before and after each timer, so asynchronous work started by a timer runs in simulated time.
   */
  async advanceAsync(ms: number): Promise<void> {
    const target = this.#now + ms;
    await settle();
    for (let timer = this.#nextDue(target); timer; timer = this.#nextDue(target)) {
      this.#now = timer.at;
      timer.callback();
      await settle();
    }
    this.#now = target;
    await settle();
  }

  #nextDue(target: number): SimulatedTimer | undefined {
    this.#timers = this.#timers.filter((timer) => !timer.cancelled);
    let next: SimulatedTimer | undefined;
    for (const timer of this.#timers) {
      if (timer.at > target) continue;
      if (!next || timer.at < next.at || (timer.at === next.at && timer.order < next.order)) {
        next = timer;
      }
    }
    if (next) next.cancelled = true;
    return next;
  }
}

/** Let queued promise continuations run (a bounded number of macrotask-free turns). */
export async function settle(turns = 20): Promise<void> {
  for (let i = 0; i < turns; i++) await Promise.resolve();
}
