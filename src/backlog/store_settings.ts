/**
 * The options every job store takes (lifecycle defaults, the backlog bound, the retention of
 * finished jobs), their defaults and their validation.
 *
 * @module
 */

import { durationOption, integerOption, optionsObject } from "../core/options.ts";
import { type LifecycleDefaults, resolveDefaults } from "../lifecycle/job_options.ts";
import type { JobStoreSettings } from "./job_store.ts";

/** The options every job store takes. */
export interface StoreSettingsOptions {
  /** Lifecycle defaults for jobs that do not set their own (attempts, backoff, timeout...). */
  readonly defaults?: LifecycleDefaults;
  /**
   * Most jobs waiting, scheduled or failed at once; beyond it a submission is refused whole
   * (`BacklogFullError`, HTTP 429). Default 100,000 (1..100,000,000).
   */
  readonly maxBacklog?: number;
  /** Completed and cancelled jobs stay visible this long, ms. Default 86,400,000 (a day). */
  readonly retention?: number;
  /** At most this many completed and cancelled jobs stay visible. Default 10,000 (0..1,000,000). */
  readonly retainedJobs?: number;
}

/** Validate the options (errors name `owner` and the option) and fill in the defaults. */
export function resolveStoreSettings(
  owner: string,
  options: StoreSettingsOptions,
): JobStoreSettings {
  optionsObject(owner, options);
  let defaults;
  try {
    defaults = resolveDefaults(options.defaults);
  } catch (error) {
    const detail = error instanceof Error ? error.message : String(error);
    throw new RangeError(`Cannot create ${owner}: option "defaults": ${detail}`);
  }
  return {
    defaults,
    maxBacklog: integerOption(owner, "maxBacklog", options.maxBacklog, 100_000, 1, 100_000_000),
    retention: durationOption(
      owner,
      "retention",
      options.retention,
      86_400_000,
      0,
      365 * 86_400_000,
    ),
    retainedJobs: integerOption(owner, "retainedJobs", options.retainedJobs, 10_000, 0, 1_000_000),
  };
}
