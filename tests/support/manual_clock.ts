/**
 * A wall clock the test moves, with no timers: a shared flow's lease rounds run when the test
 * says (`store.renew()`), not on their own.
 */

import { type Clock, SimulatedClock } from "../../src/core/clock.ts";

/** Starts at a plausible epoch time; `advance` moves it. */
export class ManualClock implements Clock {
  readonly simulated = new SimulatedClock();
  constructor() {
    this.simulated.advance(1_700_000_000_000);
  }
  now(): number {
    return this.simulated.now();
  }
  setTimeout() {
    return { cancel() {} };
  }
  advance(ms: number): void {
    this.simulated.advance(ms);
  }
}
