/**
 * When a repeating job runs: every `every` milliseconds, or at the times of a cron pattern in a
 * time zone. A recurrence answers one question, the first run time strictly after a given time,
 * and answers it the same in every process: `every` counts from the Unix epoch (every 60,000 ms is
 * each whole minute), and cron patterns name wall-clock times. That is what lets several instances
 * of a flow name the same run with the same MessageID.
 *
 * Cron patterns are parsed and evaluated by `croner` (five fields, or six with seconds first;
 * `L`, `W`, `#`, and the nicknames `@daily`, `@hourly`, ...).
 *
 * @module
 */

import { Cron } from "croner";

/** When a schedule runs: a fixed interval, or a cron pattern. */
export type ScheduleWhen =
  /** Every `every` ms, counted from the Unix epoch (60,000: at each whole minute). */
  | { readonly every: number }
  /** At the times of a cron pattern, in `timezone` (an IANA name; default UTC). */
  | { readonly cron: string; readonly timezone?: string };

/** The shortest interval a schedule may have, ms. */
export const MIN_EVERY = 1_000;
/** The longest interval a schedule may have, ms (a year). */
export const MAX_EVERY = 365 * 86_400_000;

/** A validated {@linkcode ScheduleWhen}. */
export interface Recurrence {
  /** The recurrence as given (with the default time zone filled in for a cron pattern). */
  readonly when: ScheduleWhen;
  /** The first run time strictly after `after` (epoch ms), or undefined when there is none. */
  next(after: number): number | undefined;
}

/**
 * Validate `when` (`field` names it in errors): a `TypeError` or `RangeError` that says what is
 * wrong with it.
 *
 * @example
 * ```ts
 * import { recurrence } from "./recurrence.ts";
 * const minutely = recurrence({ every: 60_000 });
 * console.assert(minutely.next(90_000) === 120_000);
 * const nightly = recurrence({ cron: "0 3 * * *", timezone: "Europe/Berlin" });
 * console.assert(nightly.next(Date.UTC(2026, 11, 4, 12)) === Date.UTC(2026, 11, 5, 2));
 * ```
 */
export function recurrence(when: unknown, field = "when"): Recurrence {
  if (typeof when !== "object" || when === null) {
    throw new TypeError(`${field} must be an object with "every" or "cron"`);
  }
  const { every, cron, timezone } = when as Record<string, unknown>;
  for (const key of Object.keys(when)) {
    if (key !== "every" && key !== "cron" && key !== "timezone") {
      throw new TypeError(`${field}.${key} is not an option (every, cron, timezone)`);
    }
  }
  if ((every === undefined) === (cron === undefined)) {
    throw new TypeError(`${field} must have exactly one of "every" and "cron"`);
  }
  if (every !== undefined) {
    if (timezone !== undefined) {
      throw new TypeError(`${field}.timezone goes with "cron" only`);
    }
    if (typeof every !== "number" || !Number.isSafeInteger(every)) {
      throw new TypeError(`${field}.every must be an integer number of ms, got ${String(every)}`);
    }
    if (every < MIN_EVERY || every > MAX_EVERY) {
      throw new RangeError(`${field}.every must be in ${MIN_EVERY}..${MAX_EVERY} ms, got ${every}`);
    }
    return {
      when: Object.freeze({ every }),
      next: (after) => (Math.floor(after / every) + 1) * every,
    };
  }
  if (typeof cron !== "string" || cron.trim() === "" || cron.length > 200) {
    throw new TypeError(`${field}.cron must be a cron pattern of at most 200 characters`);
  }
  if (timezone !== undefined && (typeof timezone !== "string" || timezone === "")) {
    throw new TypeError(`${field}.timezone must be an IANA time zone name, like "Europe/Berlin"`);
  }
  const zone = (timezone as string | undefined) ?? "UTC";
  let pattern: Cron;
  try {
    pattern = new Cron(cron, { timezone: zone });
    pattern.nextRun(new Date(0)); // an unknown time zone shows only when a time is computed
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new RangeError(`${field} is not a valid cron pattern in ${zone}: ${reason}`);
  }
  return {
    when: Object.freeze({ cron, timezone: zone }),
    next: (after) => pattern.nextRun(new Date(after))?.getTime(),
  };
}

/**
 * `when` in words, for a person: `every 60000 ms`, or `cron "0 3 * * *" Europe/Berlin`.
 *
 * @example
 * ```ts
 * import { describeWhen } from "./recurrence.ts";
 * console.assert(describeWhen({ every: 60_000 }) === "every 60000 ms");
 * console.assert(describeWhen({ cron: "0 3 * * *" }) === 'cron "0 3 * * *" UTC');
 * ```
 */
export function describeWhen(when: ScheduleWhen): string {
  return "every" in when
    ? `every ${when.every} ms`
    : `cron ${JSON.stringify(when.cron)} ${when.timezone ?? "UTC"}`;
}
