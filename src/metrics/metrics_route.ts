/**
 * `GET /metrics`: the flow's metrics in the Prometheus text format (see `flow_metrics.ts` for
 * what each is, and `docs/DASHBOARD.md` for the names and labels).
 *
 * It needs a client token like the other HTTP routes (the authenticator sees the route as
 * `metrics`, so an `authorize` hook can admit a scraper's credential for it alone); Prometheus
 * sends one with `authorization: { credentials: <token> }` in its scrape config. With
 * `metrics: { public: true }` it is served without a credential, for a scraper on a private
 * network. Rendering reads counters the controller and the collector keep: no store access,
 * no waiting.
 *
 * @module
 */

import type { Hono, MiddlewareHandler } from "hono";
import { booleanOption } from "../core/options.ts";
import { EXPOSITION_CONTENT_TYPE, renderExposition } from "./exposition.ts";
import type { FlowMetrics } from "./flow_metrics.ts";

/**
 * Options of the app's `GET /metrics` (its `metrics` option).
 *
 * @example Metrics a scraper on a private network reads without a credential
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
 *   metrics: { public: true },
 * });
 * const text = await (await app.request("/metrics")).text();
 * console.assert(text.includes('workpull_jobs_submitted_total{flow="reports"} 0'));
 * await queue.close();
 * ```
 */
export interface MetricsOptions {
  /**
   * Serve the metrics without a credential (for a scraper on a private network). Default false:
   * a client token, like the other HTTP routes.
   */
  readonly public?: boolean;
}

/** The `metrics` option, validated: undefined when the route is off. */
export function resolveMetricsOptions(
  owner: string,
  value: boolean | MetricsOptions | undefined,
): Required<MetricsOptions> | undefined {
  if (value === false) return undefined;
  if (value === undefined || value === true) return { public: false };
  if (typeof value !== "object" || value === null) {
    throw new TypeError(
      `Cannot create ${owner}: option "metrics" must be true, false or an object, got ${typeof value}`,
    );
  }
  return { public: booleanOption(owner, "metrics.public", value.public, false) };
}

/** What the route needs from the app. */
export interface MetricsRouteOptions {
  /** The flow's collector. */
  readonly metrics: FlowMetrics;
  /** The app's guard for a route, or undefined to serve without one. */
  readonly guard: MiddlewareHandler | undefined;
}

/** Add `GET /metrics` to `app`. */
export function addMetricsRoute(app: Hono, options: MetricsRouteOptions): void {
  const { metrics, guard } = options;
  const open: MiddlewareHandler = (_c, next) => next();
  app.get("/metrics", guard ?? open, (c) => {
    c.header("Cache-Control", "no-store");
    c.header("Content-Type", EXPOSITION_CONTENT_TYPE);
    return c.body(renderExposition(metrics.families()));
  });
}
