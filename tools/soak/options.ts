/**
 * The soak's command line: flags, their defaults and ranges, and `--help`.
 *
 * A bad flag is an error naming the flag and what it accepts; nothing starts.
 *
 * @module
 */

import { parseArgs } from "node:util";

/** The soak's settings. */
export interface SoakOptions {
  /** How long jobs are produced and faults injected, minutes. */
  readonly minutes: number;
  /** Jobs per second submitted by the producer. */
  readonly rate: number;
  /** Seeds the fault schedule and the handlers' durations. */
  readonly seed: number;
  /** Worker processes, alternately Deno and Bun. */
  readonly workers: number;
  /**
   * Instances of the flow sharing one KV file (`DenoKvClusterStore`); 1: one controller
   * process on its own `DenoKvWorkQueue`, the classic soak.
   */
  readonly instances: number;
  /** The instances' lease TTL, ms (with `instances` > 1). */
  readonly lease: number;
  /**
   * `--kv-latency COMMIT/READ`: each instance opens the KV file through a `RemoteKv` that adds
   * these round trips, ms (with `instances` > 1 only). Undefined: no `RemoteKv`, unless
   * `kvFaults` asks for one (then 0/0).
   */
  readonly kvLatency: { readonly commit: number; readonly read: number } | undefined;
  /**
   * `--kv-faults RATE`: the probability that one commit of an instance meets a fault, split
   * evenly between lost-answer, locked and slow (with `instances` > 1 only; 0: none).
   */
  readonly kvFaults: number;
  /** Where the journals go; undefined: a temporary directory. */
  readonly out: string | undefined;
  /** Keep the output directory (always kept when `out` is given). */
  readonly keep: boolean;
  /** How long a worker may hold a finished job's confirmation, ms (see "ack-delay"). */
  readonly ackDelay: number;
  /** The controller's `reconnectGrace`, ms. */
  readonly grace: number;
  /**
   * The drain fails once this many seconds pass without any job finishing; it never
   * lasts more than `DRAIN_CAP_FACTOR` (10) times this in all (see `drain.ts`).
   */
  readonly drain: number;
  /** Only verify the journals already in this directory (a kept run). */
  readonly verify: string | undefined;
  readonly help: boolean;
}

/** The help text. */
export const USAGE = `Usage: deno task soak [flags]

A chaos soak of workpull: a controller process on a Deno KV file, worker processes on Deno and
Bun behind TCP proxies, a producer process submitting over POST /jobs, and seeded faults every
1-5 s (worker SIGKILL and restart, worker SIGSTOP for 3-12 s, controller SIGKILL and restart on the
same file and port, TCP cuts, producer SIGKILL and restart). Then it drains and verifies from the
journals: lost jobs (acknowledged, never run, and not in the queue at the end), duplicates by
cause, worst controller restart to first delivery. Exits 1 on a lost job, an avoidable duplicate,
a drain that stalled or a crashed process.

With --instances N (2..8), N instance processes of one flow share the KV file (job queues on a
DenoKvClusterStore), the workers are spread over them and the producer submits to all of them in
turn; instead of controller kills the faults include instance SIGKILLs (a survivor takes the
dead instance's jobs over when its lease lapses; it restarts as a new instance) and instance
SIGSTOPs past the lease (the instance is fenced at its SIGCONT and restarts). With --kv-latency
and --kv-faults (--instances 2 or more only) each instance reaches the KV file through RemoteKv,
a hosted KV's round trips and per-commit faults, seeded from --seed.

Flags:
  --minutes N     how long to produce and inject faults (default 10; fractions allowed)
  --rate N        jobs per second (default 1000)
  --seed N        seed of the fault schedule and handler durations (default: random, printed)
  --workers N     worker processes, alternately Deno and Bun (default 4, at least 4)
  --instances N   instances sharing the flow on one KV file (default 1: one controller)
  --lease MS      the instances' lease TTL (default 3000; renewed every third of it)
  --kv-latency C/R
                  (--instances 2 or more) each instance reaches the KV file through RemoteKv,
                  which adds C ms to each commit and R ms to each read (e.g. 10/5)
  --kv-faults P   (--instances 2 or more) through RemoteKv, each commit meets a fault with
                  probability P (0..1), a third each: lost-answer (it lands, the call rejects),
                  locked ("database is locked", nothing lands), slow (10 times the latency);
                  seeded from --seed (default 0; without --kv-latency the latency is 0/0)
  --out DIR       write the journals and summary.json there (kept)
  --keep          keep the temporary output directory
  --ack-delay MS  how long a worker may hold a finished job's confirmation (default 10)
  --grace MS      the controller's reconnectGrace (default 1000)
  --drain S       the drain fails once S seconds pass without any job finishing
                  (default 60; it lasts at most 10 × S in all)
  --verify DIR    only verify the journals of an earlier run kept in DIR
  --help          this text
`;

/** Parse `args`; throws a `RangeError` or `TypeError` naming a bad flag. */
export function parseOptions(args: readonly string[]): SoakOptions {
  const { values, positionals } = parseArgs({
    args: [...args],
    strict: true,
    allowPositionals: true,
    options: {
      minutes: { type: "string" },
      rate: { type: "string" },
      seed: { type: "string" },
      workers: { type: "string" },
      instances: { type: "string" },
      lease: { type: "string" },
      "kv-latency": { type: "string" },
      "kv-faults": { type: "string" },
      out: { type: "string" },
      keep: { type: "boolean" },
      "ack-delay": { type: "string" },
      grace: { type: "string" },
      drain: { type: "string" },
      verify: { type: "string" },
      help: { type: "boolean", short: "h" },
    },
  });
  if (positionals.length > 0) {
    throw new TypeError(`Cannot start the soak: unexpected argument "${positionals[0]}"`);
  }
  const instances = number("instances", values.instances, 1, 1, 8, true);
  const kvLatency = latency(values["kv-latency"]);
  const kvFaults = number("kv-faults", values["kv-faults"], 0, 0, 1, false);
  for (const flag of ["kv-latency", "kv-faults"] as const) {
    if (values[flag] !== undefined && instances < 2) {
      throw new RangeError(
        `Cannot start the soak: --${flag} needs --instances 2 or more (it wraps the shared ` +
          `instances' KV in RemoteKv), got --instances ${instances}`,
      );
    }
  }
  return {
    minutes: number("minutes", values.minutes, 10, 0.05, 24 * 60, false),
    rate: number("rate", values.rate, 1000, 1, 100_000, true),
    seed: number("seed", values.seed, Math.floor(Math.random() * 2 ** 31), 0, 2 ** 32 - 1, true),
    workers: number("workers", values.workers, 4, 4, 32, true),
    instances,
    lease: number("lease", values.lease, 3000, 1000, 60_000, true),
    kvLatency,
    kvFaults,
    out: values.out,
    keep: values.keep ?? false,
    ackDelay: number("ack-delay", values["ack-delay"], 10, 0, 10_000, false),
    grace: number("grace", values.grace, 1000, 0, 3_600_000, true),
    drain: number("drain", values.drain, 60, 1, 3600, false),
    verify: values.verify,
    help: values.help ?? false,
  };
}

/** `--kv-latency COMMIT/READ`: two round trips in ms, 0..60,000 each. */
function latency(text: string | undefined): SoakOptions["kvLatency"] {
  if (text === undefined) return undefined;
  const parts = text.split("/");
  if (parts.length !== 2) {
    throw new TypeError(
      `Cannot start the soak: --kv-latency must be COMMIT/READ in ms (e.g. 10/5), got "${text}"`,
    );
  }
  return {
    commit: number("kv-latency", parts[0], 0, 0, 60_000, false),
    read: number("kv-latency", parts[1], 0, 0, 60_000, false),
  };
}

function number(
  flag: string,
  text: string | undefined,
  fallback: number,
  min: number,
  max: number,
  integer: boolean,
): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (text.trim() === "" || !Number.isFinite(value) || (integer && !Number.isInteger(value))) {
    throw new TypeError(
      `Cannot start the soak: --${flag} must be ${
        integer ? "an integer" : "a number"
      }, got "${text}"`,
    );
  }
  if (value < min || value > max) {
    throw new RangeError(
      `Cannot start the soak: --${flag} must be in ${min}..${max}, got ${value}`,
    );
  }
  return value;
}
