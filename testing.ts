/**
 * Test utilities: a simulated clock for deterministic tests of code built on workpull.
 *
 * @example
 * ```ts
 * import { SimulatedClock } from "./testing.ts";
 * const clock = new SimulatedClock();
 * clock.advance(2000);
 * console.assert(clock.now() === 2000);
 * ```
 *
 * @module
 */

export { settle, SimulatedClock } from "./src/core/clock.ts";
