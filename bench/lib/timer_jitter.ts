/**
 * How late the host runs a process that asks to wake up: a 1 ms timer, again and again, on a
 * machine with nothing else of the benchmark running, and how much later than asked each wake-up
 * came (the oversleep). The latency scenario measures it just before it starts its processes and
 * reports it beside its percentiles.
 *
 * Why: the latency targets (p99 ≤ 5 ms, p99.9 ≤ 20 ms) sit within reach of the host's own
 * scheduling. On a virtual machine whose processor is now and then taken away for a few
 * milliseconds — on one host of this project's kind a lone timer loop on an idle machine
 * overslept by up to 14 ms in 5 s — every process stalls at once, the controller with the
 * workers, and a pacer submitting 75 jobs a millisecond leaves about a thousand of them late
 * each time. The oversleep tells such a host from a tail that the load makes: a long tail beside
 * a punctual idle timer comes from how busy the machine is at the paced rate (see
 * `bench/README.md`, "The host stalls").
 *
 * @module
 */

import { type Distribution, distribution, roundedDistribution } from "./stats.ts";

/** The oversleep of a 1 ms timer on the idle host, ms (see the module text). */
export interface TimerJitter extends Distribution {
  readonly seconds: number;
  /** Wake-ups more than 5 ms late. */
  readonly over5ms: number;
}

/** Sleep 1 ms at a time for `seconds` and return how late each wake-up came. */
export async function measureTimerJitter(seconds: number): Promise<TimerJitter> {
  const late: number[] = [];
  const end = performance.now() + seconds * 1000;
  for (let asked = performance.now(); asked < end;) {
    await new Promise((resolve) => setTimeout(resolve, 1));
    const woke = performance.now();
    late.push(Math.max(0, woke - asked - 1));
    asked = woke;
  }
  const over5ms = late.filter((ms) => ms > 5).length;
  return { seconds, ...roundedDistribution(distribution(late)), over5ms };
}
