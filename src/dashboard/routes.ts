/**
 * The dashboard's routes in the app:
 *
 * | route | what | credential |
 * |---|---|---|
 * | `GET <path>` (default `/`) | the page (`page.ts`) | none: it holds no data |
 * | `GET /events` | the live stream of snapshots (`live_stream.ts`) | client token |
 *
 * The page is served at its path with or without a trailing slash (a server's base URL ends
 * with one), and learns the app's own path from the request, so it works wherever the app is
 * mounted. The stream's credential travels in the `Authorization` header (the page reads the
 * stream with `fetch`); the app's guard checks it first, then the stream caps (429).
 *
 * @module
 */

import type { Context, Hono, MiddlewareHandler } from "hono";
import { streamSSE } from "hono/streaming";
import { basePath } from "hono/route";
import type { JobQueue } from "../backlog/job_queue.ts";
import type { WorkPullingController } from "../controller/controller.ts";
import type { FlowMetrics } from "../metrics/flow_metrics.ts";
import { LiveStreams, type StreamClient } from "./live_stream.ts";
import type { ResolvedDashboardOptions } from "./options.ts";
import { dashboardPage, pagePolicy } from "./page.ts";
import { SnapshotSource } from "./snapshot.ts";
import { extractToken } from "../net/auth.ts";

/** What the dashboard needs from the app. */
export interface DashboardRoutesOptions {
  /** The flow's controller. */
  readonly controller: WorkPullingController;
  /** The flow's job queue, if it has one. */
  readonly queue?: JobQueue;
  /** The flow's metrics collector. */
  readonly metrics: FlowMetrics;
  /** The validated `dashboard` option. */
  readonly options: ResolvedDashboardOptions;
  /** The app's guard for the stream (a client token). */
  readonly guard: MiddlewareHandler;
  /** Who an authenticated request is: address, expiry, re-check (the credential is read here). */
  readonly client: (c: Context) => Omit<StreamClient, "credential">;
  /** How often a stream's credential is checked again, ms (0: never). */
  readonly recheckInterval: number;
}

const streamsOf = new WeakMap<object, LiveStreams>();

/** Add the dashboard's routes to `app`. */
export function addDashboardRoutes(app: Hono, options: DashboardRoutesOptions): void {
  const { controller, queue, metrics, guard, client } = options;
  const { path, interval, maxStreams, maxStreamsPerClient } = options.options;
  const source = new SnapshotSource({ controller, queue, metrics });
  const streams = new LiveStreams(source, {
    interval,
    maxStreams,
    maxStreamsPerClient,
    recheckInterval: options.recheckInterval,
  });
  streamsOf.set(app, streams);

  app.get("/events", guard, (c) => {
    // A HEAD answer has no body to stream (and nobody would ever cancel it).
    if (c.req.method === "HEAD") return c.body(null, 200, { "Content-Type": "text/event-stream" });
    const who: StreamClient = { ...client(c), credential: extractToken(c.req.raw) };
    const place = streams.admit(who);
    if (typeof place === "string") {
      c.header("Retry-After", "5");
      return c.json({ error: place }, 429);
    }
    c.header("X-Accel-Buffering", "no"); // a proxy must pass events on as they come
    return streamSSE(c, (stream) => streams.serve(stream, who, place));
  });

  const page = (c: Context, prefix: string) => {
    const nonce = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(16))));
    c.header("Content-Security-Policy", pagePolicy(nonce));
    c.header("Cache-Control", "no-store");
    c.header("X-Content-Type-Options", "nosniff");
    c.header("Referrer-Policy", "no-referrer");
    c.header("X-Frame-Options", "DENY");
    return c.html(dashboardPage({ base: prefix, nonce }));
  };
  const prefixOf = (c: Context) => {
    const mounted = basePath(c);
    return mounted === "/" ? "" : mounted;
  };
  const own = path === "/" ? "" : path;
  app.get(path, (c) => page(c, prefixOf(c)));
  // The same page with a trailing slash (strict routing would answer 404).
  app.get("/*", (c, next) => {
    const prefix = prefixOf(c);
    return c.req.path === `${prefix}${own}/` ? page(c, prefix) : next();
  });
}

/**
 * End the dashboard's live streams of an app (its server is closing: `Deno.serve` waits for
 * open responses to finish). They also end by themselves once the controller is closed.
 */
export function closeDashboardStreams(app: object): void {
  streamsOf.get(app)?.closeAll("closed");
}
