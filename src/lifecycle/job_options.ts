/**
 * What a job may say about how it runs, and the flow's defaults for what it does not say:
 * when it may start (`delay` or `runAt`), its `priority`, how many `attempts` it gets, how long
 * to wait between them (`backoff`), and how long one attempt may take (`timeout`).
 *
 * Everything is validated where it enters (a submission, an HTTP body, a flow's options) with an
 * error naming the field, so that what reaches the store is always well-formed.
 *
 * @module
 */

import type { Writable } from "../core/writable.ts";

/** Exponential or fixed waits between attempts. */
export type Backoff =
  /** `delay × 2^(retry - 1)`, at most `max`, of which a fraction `jitter` is random. */
  | {
    readonly type: "exponential";
    /** The first wait, ms. */
    readonly delay: number;
    /** The largest wait, ms. Default 3,600,000 (an hour). */
    readonly max?: number;
    /** Fraction of each wait that is random (0..1). Default 0.5. */
    readonly jitter?: number;
  }
  /** The same wait every time. */
  | { readonly type: "fixed"; /** The wait, ms. */ readonly delay: number };

/** Per-job options of a submission. */
export interface JobOptions {
  /** The stable deduplication key; default a random UUID. Reuse it to resubmit a job. */
  readonly messageId?: string;
  /** Do not start before this many ms from now. */
  readonly delay?: number;
  /** Do not start before this time (epoch ms). Exclusive with `delay`. */
  readonly runAt?: number;
  /** Higher runs first; FIFO within a priority. An integer in -1,000..1,000. Default 0. */
  readonly priority?: number;
  /** Total tries before the job is dead (1..1,000). Default: the flow's. */
  readonly attempts?: number;
  /** Waits between tries. Default: the flow's. */
  readonly backoff?: Backoff;
  /** One try may take this long (ms; 0 = no limit). Default: the flow's. */
  readonly timeout?: number;
}

/** A flow's defaults for the lifecycle options a job does not set. */
export interface LifecycleDefaults {
  /** Total tries before a job is dead. Default 3. */
  readonly attempts?: number;
  /** Waits between tries. Default exponential from 1 s to an hour, half of it random. */
  readonly backoff?: Backoff;
  /** One try may take this long, ms (0 = no limit). Default 0. */
  readonly timeout?: number;
  /**
   * How many times a job may be running on a worker that is lost (disconnected, silent, killed)
   * without that counting as a failed try; beyond it each loss counts, so a job that crashes its
   * worker every time ends dead too. Default 2.
   */
  readonly lostLimit?: number;
}

/** Lifecycle defaults with every value filled in. */
export interface ResolvedDefaults {
  /** Total tries before a job is dead. */
  readonly attempts: number;
  /** Waits between tries. */
  readonly backoff: ResolvedBackoff;
  /** One try may take this long, ms (0 = no limit). */
  readonly timeout: number;
  /** Lost workers a job may survive before each loss counts as a failed try. */
  readonly lostLimit: number;
}

/** A validated backoff with every value filled in. */
export type ResolvedBackoff =
  | {
    readonly type: "exponential";
    readonly delay: number;
    readonly max: number;
    readonly jitter: number;
  }
  | { readonly type: "fixed"; readonly delay: number };

/** The largest priority magnitude. */
export const MAX_PRIORITY = 1_000;
/** The most attempts a job may have. */
export const MAX_ATTEMPTS = 1_000;
const DAY = 86_400_000;
const YEAR = 365 * DAY;

/** A field that failed validation: a `RangeError` or `TypeError` whose message names it. */
function invalid(kind: "type" | "range", field: string, rule: string, value: unknown): Error {
  const shown = typeof value === "string"
    ? JSON.stringify(value.slice(0, 40))
    : typeof value === "number" || typeof value === "boolean" || value == null
    ? String(value)
    : typeof value;
  const message = `${field} must be ${rule}, got ${shown}`;
  return kind === "type" ? new TypeError(message) : new RangeError(message);
}

function integer(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== "number") throw invalid("type", field, "an integer", value);
  if (!Number.isSafeInteger(value) || value < min || value > max) {
    throw invalid("range", field, `an integer in ${min}..${max}`, value);
  }
  return value;
}

function duration(field: string, value: unknown, min: number, max: number): number {
  if (typeof value !== "number") throw invalid("type", field, "a number of ms", value);
  if (!Number.isFinite(value) || value < min || value > max) {
    throw invalid("range", field, `a number of ms in ${min}..${max}`, value);
  }
  return Math.round(value);
}

/**
 * Validate a backoff (`field` names it in errors) and fill in its defaults.
 *
 * @example
 * ```ts
 * import { resolveBackoff } from "./job_options.ts";
 * const backoff = resolveBackoff({ type: "exponential", delay: 500 });
 * console.assert(backoff.type === "exponential" && backoff.max === 3_600_000);
 * ```
 */
export function resolveBackoff(value: unknown, field = "backoff"): ResolvedBackoff {
  if (typeof value !== "object" || value === null) {
    throw invalid("type", field, 'an object { type: "exponential" | "fixed", delay }', value);
  }
  const backoff = value as Record<string, unknown>;
  for (const key of Object.keys(backoff)) {
    if (!["type", "delay", "max", "jitter"].includes(key)) {
      throw invalid("type", `${field}.${key}`, "absent (unknown field)", backoff[key]);
    }
  }
  const delay = duration(`${field}.delay`, backoff.delay, 0, DAY);
  if (backoff.type === "fixed") {
    if (backoff.max !== undefined || backoff.jitter !== undefined) {
      throw invalid("type", field, "without max or jitter when fixed", backoff.type);
    }
    return { type: "fixed", delay };
  }
  if (backoff.type !== "exponential") {
    throw invalid("type", `${field}.type`, '"exponential" or "fixed"', backoff.type);
  }
  const max = backoff.max === undefined
    ? 3_600_000
    : duration(`${field}.max`, backoff.max, delay, 30 * DAY);
  const jitter = backoff.jitter ?? 0.5;
  if (typeof jitter !== "number" || !(jitter >= 0 && jitter <= 1)) {
    throw invalid("range", `${field}.jitter`, "a number in 0..1", jitter);
  }
  return { type: "exponential", delay, max, jitter };
}

/**
 * Validate a flow's lifecycle defaults (errors name `owner` and the option).
 *
 * @example
 * ```ts
 * import { resolveDefaults } from "./job_options.ts";
 * console.assert(resolveDefaults({ attempts: 5 }).attempts === 5);
 * console.assert(resolveDefaults({}).backoff.type === "exponential");
 * ```
 */
export function resolveDefaults(defaults: LifecycleDefaults = {}): ResolvedDefaults {
  if (typeof defaults !== "object" || defaults === null) {
    throw new TypeError("lifecycle defaults must be an object");
  }
  return {
    attempts: defaults.attempts === undefined
      ? 3
      : integer("attempts", defaults.attempts, 1, MAX_ATTEMPTS),
    backoff: defaults.backoff === undefined
      ? { type: "exponential", delay: 1000, max: 3_600_000, jitter: 0.5 }
      : resolveBackoff(defaults.backoff),
    timeout: defaults.timeout === undefined ? 0 : duration("timeout", defaults.timeout, 0, DAY),
    lostLimit: defaults.lostLimit === undefined
      ? 2
      : integer("lostLimit", defaults.lostLimit, 0, MAX_ATTEMPTS),
  };
}

/** The lifecycle a job was submitted with: its own options, validated (absent = the flow's). */
export interface JobPlan {
  /** Earliest start, epoch ms. */
  readonly runAt: number;
  /** Whether the submission asked for a later start. */
  readonly delayed: boolean;
  /** -1,000..1,000. */
  readonly priority: number;
  /** The job's own attempts, if it set them. */
  readonly attempts?: number;
  /** The job's own backoff, if it set one. */
  readonly backoff?: ResolvedBackoff;
  /** The job's own timeout, if it set one. */
  readonly timeout?: number;
}

/**
 * Validate a submission's lifecycle options at time `now`; errors name the field (prefixed with
 * `where`, for example `jobs.3.priority`).
 *
 * @example
 * ```ts
 * import { planJob } from "./job_options.ts";
 * const plan = planJob({ delay: 1000, priority: 5 }, 10_000);
 * console.assert(plan.runAt === 11_000 && plan.priority === 5 && plan.delayed);
 * ```
 */
export function planJob(options: JobOptions, now: number, where = ""): JobPlan {
  const field = (name: string) => where ? `${where}.${name}` : name;
  if (options.delay !== undefined && options.runAt !== undefined) {
    throw invalid("type", field("runAt"), "absent when delay is given", options.runAt);
  }
  let runAt = now;
  if (options.delay !== undefined) runAt = now + duration(field("delay"), options.delay, 0, YEAR);
  if (options.runAt !== undefined) {
    runAt = duration(field("runAt"), options.runAt, 0, now + YEAR);
  }
  // Optional fields assigned, not spread from temporary objects: every job is planned here.
  const plan: Writable<JobPlan> = {
    runAt,
    delayed: runAt > now,
    priority: options.priority === undefined
      ? 0
      : integer(field("priority"), options.priority, -MAX_PRIORITY, MAX_PRIORITY),
  };
  if (options.attempts !== undefined) {
    plan.attempts = integer(field("attempts"), options.attempts, 1, MAX_ATTEMPTS);
  }
  if (options.backoff !== undefined) {
    plan.backoff = resolveBackoff(options.backoff, field("backoff"));
  }
  if (options.timeout !== undefined) {
    plan.timeout = duration(field("timeout"), options.timeout, 0, DAY);
  }
  return plan;
}

/**
 * The wait before retry number `retry` (1 for the first retry), drawing jitter from `random`.
 *
 * @example
 * ```ts
 * import { backoffDelay } from "./job_options.ts";
 * const backoff = { type: "exponential", delay: 100, max: 1000, jitter: 0 } as const;
 * console.assert(backoffDelay(backoff, 1, () => 0.5) === 100);
 * console.assert(backoffDelay(backoff, 3, () => 0.5) === 400);
 * console.assert(backoffDelay(backoff, 9, () => 0.5) === 1000);
 * ```
 */
export function backoffDelay(
  backoff: ResolvedBackoff,
  retry: number,
  random: () => number,
): number {
  if (backoff.type === "fixed") return backoff.delay;
  const full = Math.min(backoff.max, backoff.delay * 2 ** Math.max(0, retry - 1));
  return Math.round(full * (1 - backoff.jitter) + full * backoff.jitter * random());
}
