/**
 * The dashboard's options (the app's `dashboard` option), validated at construction with
 * errors naming the option, and their defaults.
 *
 * @module
 */

import { durationOption, integerOption } from "../core/options.ts";

/**
 * Options of the live dashboard (the app's `dashboard` option).
 *
 * @example The page at /dashboard, a snapshot every 2 s, at most 20 viewers
 * ```ts
 * import { JobQueue, MemoryJobStore } from "../../mod.ts";
 * import { createWorkpullApp } from "../net/app.ts";
 * import { denoUpgrader } from "../net/deno.ts";
 *
 * const queue = new JobQueue({ name: "reports", store: new MemoryJobStore() });
 * const app = createWorkpullApp({
 *   queue,
 *   upgradeWebSocket: denoUpgrader(),
 *   auth: { secret: "a-secret-of-at-least-32-bytes-length!" },
 *   dashboard: { path: "/dashboard", interval: 2_000, maxStreams: 20 },
 * });
 * const page = await app.request("/dashboard");
 * console.assert(page.status === 200); // the page holds no data: it asks for a client token
 * console.assert((await app.request("/events")).status === 401); // the data needs one
 * await page.body?.cancel();
 * await queue.close();
 * ```
 */
export interface DashboardOptions {
  /**
   * Where the page is served, relative to the app (for example `/dashboard`). Its live stream is
   * always `GET /events`. Default `/`.
   */
  readonly path?: string;
  /**
   * How often the live stream sends a snapshot, ms. Stretched while building one takes long (a
   * huge backlog to count), so the dashboard never takes more than a twentieth of the server's
   * time. Default 1,000 (250..60,000).
   */
  readonly interval?: number;
  /** Live streams open at once, in total. Default 100 (1..10,000). */
  readonly maxStreams?: number;
  /** Live streams open at once per client address, and per credential. Default 10 (1..1,000). */
  readonly maxStreamsPerClient?: number;
}

/** The dashboard's options with their defaults. */
export interface ResolvedDashboardOptions {
  readonly path: string;
  readonly interval: number;
  readonly maxStreams: number;
  readonly maxStreamsPerClient: number;
}

/** Paths the app's own routes use: the page cannot take them. */
const TAKEN = ["/workers", "/jobs", "/stats", "/events", "/metrics", "/dead-letters"];
const PATH = /^\/(?:[A-Za-z0-9._~-]+\/?)*$/;

/**
 * Validate the `dashboard` option; undefined when the dashboard is off.
 *
 * @example
 * ```ts
 * import { resolveDashboardOptions } from "./options.ts";
 * console.assert(resolveDashboardOptions("the app", undefined)?.path === "/");
 * console.assert(resolveDashboardOptions("the app", false) === undefined);
 * ```
 */
export function resolveDashboardOptions(
  owner: string,
  value: boolean | DashboardOptions | undefined,
): ResolvedDashboardOptions | undefined {
  if (value === false) return undefined;
  const options: DashboardOptions = value === undefined || value === true ? {} : value;
  if (typeof options !== "object" || options === null) {
    throw new TypeError(
      `Cannot create ${owner}: option "dashboard" must be true, false or an object, got ${typeof value}`,
    );
  }
  const path = options.path ?? "/";
  if (
    typeof path !== "string" || path.length > 200 || !PATH.test(path) ||
    TAKEN.some((taken) => path === taken || path.startsWith(`${taken}/`))
  ) {
    throw new TypeError(
      `Cannot create ${owner}: option "dashboard.path" must be a path such as "/" or "/dashboard", not one of the app's routes (${
        TAKEN.join(", ")
      })`,
    );
  }
  return {
    path: path.length > 1 ? path.replace(/\/+$/, "") : path,
    interval: durationOption(owner, "dashboard.interval", options.interval, 1000, 250, 60_000),
    maxStreams: integerOption(owner, "dashboard.maxStreams", options.maxStreams, 100, 1, 10_000),
    maxStreamsPerClient: integerOption(
      owner,
      "dashboard.maxStreamsPerClient",
      options.maxStreamsPerClient,
      10,
      1,
      1000,
    ),
  };
}
