/**
 * The workpull Hono app: one controller served over HTTP and WebSockets, runtime-agnostic (the
 * runtime's WebSocket upgrade is passed in; see `deno.ts` and `bun.ts`).
 *
 * Routes, relative to wherever the app is mounted:
 *
 * | route | what | credential |
 * |---|---|---|
 * | `GET /workers` | WebSocket upgrade for worker endpoints (subprotocol `workpull.v1`) | worker token |
 * | `GET /stats` | JSON snapshot: workers, pending, totals (and the backlog of a job queue) | client token |
 * | `POST /jobs`, `GET` and `DELETE /jobs/:id`, `/dead-letters...`, `POST /pause`, `POST /resume` | a job queue's routes (`job_routes.ts`) | client token |
 * | `GET /` and `GET /events` | the live dashboard and its event stream (`src/dashboard/`) | client token (the stream) |
 * | `GET /metrics` | Prometheus metrics (`src/metrics/`) | client token, or none when public |
 *
 * Served with a `queue` (a `JobQueue`), `POST /jobs` answers as soon as the jobs are in its store
 * (with a durable store, once they survive a crash), whether or not a worker is online. Served
 * with a plain controller and its `BufferedProducer` instead, `POST /jobs` answers once the jobs
 * are *accepted* into the controller's pool (they wait for worker demand).
 *
 * Every request is admitted (connection limits, 503), its `Origin` checked when an allow-list is
 * set (403), and authenticated (401) before anything else happens; a refused one changes
 * nothing. Bodies are read with every limit checked before the work it protects
 * (`json_body.ts`).
 *
 * The limits and their defaults are in {@linkcode WorkpullAppOptions}; `docs/SECURITY.md` says
 * what each one protects against.
 *
 * @module
 */

import { type Context, Hono, type MiddlewareHandler } from "hono";
import type { WSEvents } from "hono/ws";
import * as v from "valibot";
import type { LinkIdentity, WorkPullingController } from "../controller/controller.ts";
import { utf8Length } from "../core/utf8.ts";
import { durationOption, integerOption, optionsObject } from "../core/options.ts";
import { type Logger, loggerOption } from "../core/logger.ts";
import type { BufferedProducer } from "../producer/buffered_producer.ts";
import { MAX_ID_LENGTH, SUBPROTOCOL } from "../protocol/schemas.ts";
import { Admission, type AdmissionRefusal, type Lease } from "./admission.ts";
import {
  type AuthFailureReason,
  type AuthOptions,
  createAuthenticator,
  offeredProtocols,
  originAllowed,
  type Route,
} from "./auth.ts";
import { bodyRefused, readJsonBody } from "./json_body.ts";
import { addJobRoutes } from "./job_routes.ts";
import type { JobQueue } from "../backlog/job_queue.ts";
import { resolveEdgeLimits } from "./limits.ts";
import { loggedListener, type NetEventListener, report } from "./net_event.ts";
import { RefusalLog } from "./refusal_log.ts";
import { socketEvents } from "./socket_link.ts";
import { OutboundBudget } from "./outbound_budget.ts";
import { runtimeFromUserAgent } from "./user_agent.ts";
import { addDashboardRoutes } from "../dashboard/routes.ts";
import { type DashboardOptions, resolveDashboardOptions } from "../dashboard/options.ts";
import { FlowMetrics } from "../metrics/flow_metrics.ts";
import {
  addMetricsRoute,
  type MetricsOptions,
  resolveMetricsOptions,
} from "../metrics/metrics_route.ts";

/**
 * A runtime's WebSocket upgrade: `denoUpgrader()` / `bunUpgrader()`, or `upgradeWebSocket` from
 * `hono/bun` (or `hono/deno`, which refuses clients writing `workpull.v1,<token>`). Typed as any
 * function so that Hono's own types stay out of workpull's public API;
 * {@linkcode createWorkpullApp} checks it is a function.
 */
export type WebSocketUpgrader = (...args: never[]) => unknown;

/** What a `WebSocketUpgrader` really is: Hono's middleware factory. */
type HonoUpgrader = (
  createEvents: (c: Context) => WSEvents | Promise<WSEvents>,
) => MiddlewareHandler;

/**
 * The served app: a Web-standard fetch handler (a Hono app underneath). Serve it with
 * `Deno.serve(app.fetch)` or `Bun.serve`, test it in memory with `app.request(path, init)`, or
 * mount it into an existing Hono app with {@linkcode mountWorkpull}.
 */
export interface WorkpullApp {
  /** Handle one request. */
  fetch(request: Request, env?: unknown, executionContext?: unknown): Response | Promise<Response>;
  /** Handle a request in memory (a path is resolved against `http://localhost`). */
  request(input: string | URL | Request, init?: RequestInit): Response | Promise<Response>;
}

/** An existing Hono app (anything with Hono's `route(path, app)`). */
export interface RouteTarget {
  /** Hono's `app.route`. */
  route(path: string, app: never): unknown;
}

/** Options of {@linkcode createWorkpullApp}. */
export interface WorkpullAppOptions {
  /**
   * The job queue to serve: its controller, `POST /jobs` into its backlog, job status,
   * cancellation and dead letters. The app never starts or closes it.
   */
  readonly queue?: JobQueue;
  /** The controller to serve, without a job queue (the queue's own otherwise). */
  readonly controller?: WorkPullingController;
  /** The runtime's WebSocket upgrade (see `denoUpgrader` and `bunUpgrader`). */
  readonly upgradeWebSocket: WebSocketUpgrader;
  /** How requests are authenticated: `{ secret }` for signed tokens, or `{ authorize }`. */
  readonly auth: AuthOptions;
  /**
   * Without a job queue: the controller's `BufferedProducer`, which enables a `POST /jobs` that
   * answers once the jobs are accepted into the pool.
   */
  readonly producer?: BufferedProducer<unknown>;
  /** Largest frame accepted from a worker, UTF-8 bytes. Default 65,536 (1 KiB..16 MiB). */
  readonly maxFrameBytes?: number;
  /**
   * A connection whose outbound buffer passes this is closed (4000), bytes. Default 8 MiB. Keep
   * it above the controller's `maxInFlightBytes` (default 4 MiB), which bounds what one worker
   * holds unconfirmed, so only a worker that stops reading reaches it.
   */
  readonly maxBufferedBytes?: number;
  /**
   * What all WebSockets together may hold unsent (their outbound backlogs), bytes: past it, the
   * sockets whose peers stopped reading longest are dropped (4000). Default 16 MiB (1 MiB..1 TiB):
   * what sits unsent costs the process several times its size (the frame, its encoded copy,
   * the runtime's write buffer), measured 127 MB of RSS at the peak with 16 MiB, 268 MB with
   * 64 MiB (`docs/SECURITY.md`).
   */
  readonly maxPinnedBytes?: number;
  /** Largest `POST /jobs` body, bytes; checked before it is read. Default 8 MiB. */
  readonly maxBodyBytes?: number;
  /** Most jobs in one `POST /jobs`; counted before the body is parsed. Default 1000 (1..10,000). */
  readonly maxJobsPerRequest?: number;
  /** Deepest nesting of arrays and objects in a `POST /jobs` payload. Default 64 (1..10,000). */
  readonly maxPayloadDepth?: number;
  /**
   * A request body (`POST /jobs`) that has not arrived whole this long after it began to be read
   * is refused with `408 body-timeout` and its connection closed, ms. Default 10,000.
   */
  readonly bodyTimeout?: number;
  /** Connections (HTTP requests being answered and open WebSockets) in total. Default 10,000. */
  readonly maxConnections?: number;
  /** Connections from one client address (see `clientAddress`). Default 1,000. */
  readonly maxConnectionsPerIp?: number;
  /** Open WebSockets per worker credential (a token's `worker`). Default 64 (1..100,000). */
  readonly maxEndpointsPerWorker?: number;
  /**
   * Sustained frames a second one WebSocket may send (a token bucket); a connection past it is
   * closed with 1008. Default 5,000 (1..1,000,000).
   */
  readonly frameRate?: number;
  /** Frames one WebSocket may send at once before `frameRate` applies. Default 5,000. */
  readonly frameBurst?: number;
  /**
   * Frames a second all WebSockets of one worker credential may send together (also the burst);
   * the socket that runs the shared budget dry is closed with 1008. Default 20,000.
   */
  readonly frameRatePerWorker?: number;
  /**
   * After one of its sockets was closed for flooding (or for a frame more than 16 times over
   * `maxFrameBytes`), a worker credential's new sockets are refused (429 `cooling-down`) for this
   * long, ms. Default 5,000.
   */
  readonly floodCooldown?: number;
  /** Close (1008) a WebSocket that has not registered within this long, ms. Default 10,000. */
  readonly registrationTimeout?: number;
  /**
   * Re-run authentication for every open WebSocket this often (a revoked credential or one the
   * `authorize` hook refuses now is closed with 4003), ms; 0 never. Expiry is enforced at its
   * exact time regardless. Default 60,000.
   */
  readonly recheckInterval?: number;
  /**
   * Browser origins allowed to call the app: requests with another `Origin` header get 403
   * (requests without one, from servers and workers outside browsers, pass). Set it when your
   * `authorize` hook trusts cookies. Default: any origin.
   */
  readonly allowedOrigins?: readonly string[] | ((origin: string) => boolean);
  /**
   * The client address of a request, for `maxConnectionsPerIp` (`serveDeno` and `serveBun`
   * supply it; `env` is the runtime's second `fetch` argument). Default: unknown (only the
   * total counts).
   */
  readonly clientAddress?: (request: Request, env: unknown) => string | undefined;
  /**
   * How long `POST /jobs` waits for its jobs to be accepted (they wait for worker demand)
   * before answering 503; the jobs stay queued. Default 30,000 ms.
   */
  readonly submitTimeout?: number;
  /** Receives reports of refused requests, oversized frames and backpressure closes. */
  readonly onEvent?: NetEventListener;
  /**
   * The live dashboard: a page at `/` (or `path`) and its event stream at `GET /events`, which
   * needs a client token. `false` turns both off. Default: on (see `docs/DASHBOARD.md`).
   */
  readonly dashboard?: boolean | DashboardOptions;
  /**
   * `GET /metrics` in the Prometheus text format, with a client token (`{ public: true }`:
   * without one). `false` turns it off. Default: on.
   */
  readonly metrics?: boolean | MetricsOptions;
  /** Where contained failures are reported. Default: `console.error` (see `createLogger`). */
  readonly logger?: Logger;
}

const MessageId = v.pipe(
  v.string(),
  v.minLength(1),
  v.maxLength(MAX_ID_LENGTH),
  v.check((s) => s.trim() !== "", "must not be blank"),
);
const SubmitJob = v.strictObject({ payload: v.unknown(), messageId: v.optional(MessageId) });
type SubmitJob = v.InferOutput<typeof SubmitJob>;
/** `{ payload }` nests in `{ jobs: [ ... ] }`: three levels around the payload at most. */
const ENVELOPE_DEPTH = 3;
/** A frame this many times over `maxFrameBytes` puts its credential in cool-down. */
const GROSSLY_OVERSIZED = 16;

const OWNER = "the workpull app";
/** The default largest frame accepted from a worker, UTF-8 bytes. */
export const DEFAULT_MAX_FRAME_BYTES = 65_536;
const MiB = 1024 * 1024;

/**
 * Create the app serving `controller`. Serve it alone with `serveDeno` or `serveBun`, or
 * add its routes to an existing Hono app with {@linkcode mountWorkpull}.
 *
 * @example Serve it with Deno.serve and test it in memory
 * ```ts
 * import { BufferedProducer, WorkPullingController } from "../../mod.ts";
 * import { createWorkpullApp } from "./app.ts";
 * import { denoUpgrader } from "./deno.ts";
 *
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "emails", producer });
 * await controller.start();
 * const app = createWorkpullApp({
 *   controller,
 *   producer,
 *   upgradeWebSocket: denoUpgrader(),
 *   auth: { secret: "a-secret-of-at-least-32-bytes-length!" },
 * });
 * const response = await app.request("/stats");
 * console.assert(response.status === 401); // no client token
 * // Deno.serve({ port: 8000 }, app.fetch);
 * await controller.close();
 * ```
 */
export function createWorkpullApp(options: WorkpullAppOptions): WorkpullApp {
  return buildWorkpullHono(options);
}

/**
 * Mount the workpull routes under `path` in an existing Hono app: `GET {path}/workers`,
 * `POST {path}/jobs`, `GET {path}/stats`.
 *
 * @example Beside your own routes
 * ```ts
 * import { Hono } from "hono";
 * import { BufferedProducer, WorkPullingController } from "../../mod.ts";
 * import { mountWorkpull } from "./app.ts";
 * import { denoUpgrader } from "./deno.ts";
 *
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "emails", producer });
 * const app = new Hono().get("/health", (c) => c.text("ok"));
 * mountWorkpull(app, "/flows/emails", {
 *   controller,
 *   producer,
 *   upgradeWebSocket: denoUpgrader(),
 *   auth: { secret: "a-secret-of-at-least-32-bytes-length!" },
 * });
 * console.assert((await app.request("/flows/emails/stats")).status === 401); // no client token
 * ```
 */
export function mountWorkpull(
  target: RouteTarget,
  path: string,
  options: WorkpullAppOptions,
): WorkpullApp {
  if (typeof target?.route !== "function") {
    throw new TypeError(`Cannot mount ${OWNER}: the target must be a Hono app`);
  }
  const app = buildWorkpullHono(options);
  (target as unknown as Hono).route(path, app);
  return app;
}

/** The Hono app behind {@linkcode createWorkpullApp}; for the runtime adapters. */
export function buildWorkpullHono(options: WorkpullAppOptions): Hono {
  optionsObject(OWNER, options);
  const { queue, producer, upgradeWebSocket } = options;
  const logger = loggerOption(OWNER, options.logger);
  const userOnEvent = loggedListener(options.onEvent, logger);
  if (queue !== undefined && typeof queue?.addMany !== "function") {
    throw new TypeError(`Cannot create ${OWNER}: option "queue" must be a JobQueue`);
  }
  const controller = queue?.controller ?? options.controller;
  if (typeof controller?.attach !== "function" || typeof controller.stats !== "function") {
    throw new TypeError(
      `Cannot create ${OWNER}: option "controller" (or "queue") must be a WorkPullingController`,
    );
  }
  if (queue && producer) {
    throw new TypeError(
      `Cannot create ${OWNER}: options "queue" and "producer" both serve POST /jobs; give one`,
    );
  }
  if (typeof upgradeWebSocket !== "function") {
    throw new TypeError(`Cannot create ${OWNER}: option "upgradeWebSocket" must be a function`);
  }
  if (typeof options.auth !== "object" || options.auth === null) {
    throw new TypeError(
      `Cannot create ${OWNER}: option "auth" must be { secret } or { authorize }`,
    );
  }
  const authenticate = createAuthenticator(options.auth, controller.name, logger);
  const maxFrameBytes = integerOption(
    OWNER,
    "maxFrameBytes",
    options.maxFrameBytes,
    DEFAULT_MAX_FRAME_BYTES,
    1024,
    16 * MiB,
  );
  const maxBufferedBytes = integerOption(
    OWNER,
    "maxBufferedBytes",
    options.maxBufferedBytes,
    8 * MiB,
    64 * 1024,
    1024 * MiB,
  );
  const maxBodyBytes = integerOption(
    OWNER,
    "maxBodyBytes",
    options.maxBodyBytes,
    8 * MiB,
    1024,
    1024 * MiB,
  );
  const maxJobs = integerOption(
    OWNER,
    "maxJobsPerRequest",
    options.maxJobsPerRequest,
    1000,
    1,
    10_000,
  );
  const submitTimeout = durationOption(
    OWNER,
    "submitTimeout",
    options.submitTimeout,
    30_000,
    1,
    3_600_000,
  );
  const limits = resolveEdgeLimits(options);
  const budget = new OutboundBudget(
    integerOption(OWNER, "maxPinnedBytes", options.maxPinnedBytes, 16 << 20, 1 << 20, 2 ** 40),
  );
  const admission = new Admission(limits);
  const dashboard = resolveDashboardOptions(OWNER, options.dashboard);
  const metricsRoute = resolveMetricsOptions(OWNER, options.metrics);
  const metrics = dashboard || metricsRoute ? FlowMetrics.of({ queue, controller }) : undefined;
  const onEvent: NetEventListener | undefined = metrics
    ? (event) => {
      metrics.edgeEvent(event);
      report(userOnEvent, event);
    }
    : userOnEvent;
  const { allowedOrigins, clientAddress } = options;
  if (
    allowedOrigins !== undefined && typeof allowedOrigins !== "function" &&
    !(Array.isArray(allowedOrigins) && allowedOrigins.every((o) => typeof o === "string"))
  ) {
    throw new TypeError(
      `Cannot create ${OWNER}: option "allowedOrigins" must be an array of origins or a function`,
    );
  }
  if (clientAddress !== undefined && typeof clientAddress !== "function") {
    throw new TypeError(`Cannot create ${OWNER}: option "clientAddress" must be a function`);
  }
  const addressOf = (c: Context): string | undefined => {
    try {
      return clientAddress?.(c.req.raw, c.env) ?? undefined;
    } catch {
      return undefined;
    }
  };

  /** Who each authenticated request is, for the upgrade that follows (private to this app). */
  const identities = new WeakMap<Request, LinkIdentity>();
  /** When each authenticated request's credential expires, Unix ms. */
  const expiries = new WeakMap<Request, number>();
  const guard = (route: Route): MiddlewareHandler => async (c, next) => {
    const outcome = await authenticate(c.req.raw, route);
    if (!outcome.ok) return unauthorized(c, route, outcome.reason);
    identities.set(c.req.raw, outcome.identity);
    if (outcome.expiresAt !== undefined) expiries.set(c.req.raw, outcome.expiresAt);
    await next();
  };
  const refusals = new RefusalLog(logger);
  const unauthorized = (c: Context, route: Route, reason: AuthFailureReason) => {
    report(onEvent, { kind: "unauthorized", route, reason });
    refusals.refused(
      route === "workers" ? "a worker's upgrade" : `a ${route} request`,
      reason,
      addressOf(c),
    );
    c.header("WWW-Authenticate", 'Bearer realm="workpull"');
    c.header("Cache-Control", "no-store");
    return c.json({ error: "unauthorized", reason }, 401);
  };

  /** The places a request holds; a WebSocket upgrade hands them to its socket. */
  const leases = new WeakMap<Request, Lease[]>();
  const releaseAll = (held: Lease[]) => {
    for (const lease of held) lease.release();
  };
  const refuseConnection = (
    c: Context,
    reason: AdmissionRefusal,
    address: string | undefined,
    worker: string | undefined,
  ) => {
    report(onEvent, { kind: "connection-refused", reason, address, worker });
    const perWorker = reason === "too-many-endpoints" || reason === "cooling-down";
    const detail = reason === "too-many-endpoints"
      ? `worker ${worker} holds ${limits.maxEndpointsPerWorker} sockets (maxEndpointsPerWorker)`
      : reason === "cooling-down"
      ? `worker ${worker} was closed for flooding; cooling down`
      : reason;
    refusals.refused(worker === undefined ? "a connection" : "a worker's upgrade", detail, address);
    c.header(
      "Retry-After",
      reason === "cooling-down" ? String(Math.ceil(limits.floodCooldown / 1000)) : "1",
    );
    return c.json({ error: reason }, perWorker ? 429 : 503);
  };

  /** Upgrade requests whose socket took over their leases. */
  const upgraded = new WeakSet<Request>();
  /** The frame budget each upgrade shares with its credential's other sockets. */
  const sharedFrames = new WeakMap<Request, () => boolean>();
  const app = new Hono();

  app.use("*", async (c, next) => {
    const address = addressOf(c);
    const lease = admission.connection(address);
    if (typeof lease === "string") return refuseConnection(c, lease, address, undefined);
    const held = [lease];
    leases.set(c.req.raw, held);
    try {
      if (!originAllowed(c.req.raw, allowedOrigins, logger)) {
        report(onEvent, { kind: "forbidden-origin", origin: c.req.header("origin") ?? "" });
        return c.json({ error: "forbidden-origin" }, 403);
      }
      await next();
    } finally {
      // An accepted upgrade keeps its places until its connection is gone (socketEvents' onGone).
      if (c.res.status >= 300 || !upgraded.has(c.req.raw)) releaseAll(held);
    }
  });

  app.get(
    "/workers",
    async (c, next) => {
      if (c.req.header("upgrade")?.toLowerCase() !== "websocket") {
        // A worker whose upgrade failed asks here why, with the same credential: its WebSocket
        // client does not show it the answer. 426 says the credential is good.
        const outcome = await authenticate(c.req.raw, "workers");
        if (!outcome.ok) return unauthorized(c, "workers", outcome.reason);
        return c.json({ error: "upgrade-required" }, 426, { Upgrade: "websocket" });
      }
      const protocols = offeredProtocols(c.req.raw);
      if (protocols.length > 0 && protocols[0] !== SUBPROTOCOL) {
        const detail = `the first subprotocol must be ${SUBPROTOCOL}`;
        report(onEvent, { kind: "bad-upgrade", detail });
        return c.json({ error: "bad-subprotocol", detail }, 400);
      }
      await next();
    },
    guard("workers"),
    async (c, next) => {
      const worker = identities.get(c.req.raw)?.worker;
      if (worker !== undefined) {
        const lease = admission.endpoint(worker);
        if (typeof lease === "string") return refuseConnection(c, lease, addressOf(c), worker);
        leases.get(c.req.raw)?.push(lease);
        sharedFrames.set(c.req.raw, lease.takeFrame);
      }
      await next();
    },
    (upgradeWebSocket as unknown as HonoUpgrader)((c) => {
      const request = c.req.raw;
      const identity = identities.get(request);
      if (!identity) throw new Error("the upgrade was not authenticated"); // unreachable
      const held = leases.get(request) ?? [];
      upgraded.add(request);
      // The upgrade request outlives the upgrade only as a copy (Deno closes the original).
      const original = new Request(request.url, { headers: request.headers });
      const worker = identity.worker;
      return socketEvents((link) => controller.attach(link, identity), {
        maxFrameBytes,
        maxBufferedBytes,
        budget,
        frameRate: limits.frameRate,
        frameBurst: limits.frameBurst,
        takeSharedFrame: sharedFrames.get(request),
        registrationTimeout: limits.registrationTimeout,
        expiresAt: expiries.get(request),
        recheck: limits.recheckInterval > 0
          ? () =>
            authenticate(original, "workers").then((outcome) =>
              outcome.ok && outcome.identity.worker === identity.worker
            )
          : undefined,
        recheckInterval: limits.recheckInterval,
        worker,
        runtime: runtimeFromUserAgent(request.headers.get("user-agent")),
        onEvent: (event) => {
          // A flood, or a frame far over the limit (which Deno buffers whole before the app can
          // refuse it), is no accident: the credential cools down.
          const abusive = event.kind === "rate-limited" ||
            (event.kind === "frame-too-large" && event.bytes !== undefined &&
              event.bytes > GROSSLY_OVERSIZED * maxFrameBytes);
          if (abusive && worker !== undefined) admission.coolDown(worker, limits.floodCooldown);
          report(onEvent, event);
        },
        // The places are given back when the connection is gone, not when the edge closed it:
        // a peer that does not read keeps its socket (and its memory) until the runtime drops it.
        onGone: () => releaseAll(held),
        logger,
      });
    }),
    (c) => c.json({ error: "upgrade-failed" }, 426, { Upgrade: "websocket" }),
  );

  app.get("/stats", guard("stats"), async (c) => {
    c.header("Cache-Control", "no-store");
    if (queue) {
      // A flow shared by several instances also shows every instance (its store's registry).
      const instances = await queue.instances();
      return c.json(instances ? { ...queue.stats(), instances } : queue.stats());
    }
    return c.json({ ...controller.stats(), buffered: producer?.buffered ?? 0 });
  });

  if (queue) {
    addJobRoutes(app, {
      queue,
      guard,
      logger,
      body: {
        maxBytes: maxBodyBytes,
        maxDepth: limits.maxPayloadDepth + ENVELOPE_DEPTH,
        maxItems: maxJobs,
        timeout: limits.bodyTimeout,
      },
    });
  }

  if (metrics && metricsRoute) {
    addMetricsRoute(app, { metrics, guard: metricsRoute.public ? undefined : guard("metrics") });
  }
  if (metrics && dashboard) {
    addDashboardRoutes(app, {
      controller,
      queue,
      metrics,
      options: dashboard,
      guard: guard("stats"),
      recheckInterval: limits.recheckInterval,
      client: (c) => {
        const request = c.req.raw;
        const original = new Request(request.url, { headers: request.headers });
        return {
          address: addressOf(c),
          expiresAt: expiries.get(request),
          recheck: () => authenticate(original, "stats").then((outcome) => outcome.ok),
        };
      },
    });
  }

  if (producer) {
    const Batch = v.strictObject({
      jobs: v.pipe(v.array(SubmitJob), v.minLength(1), v.maxLength(maxJobs)),
    });
    const Body = v.lazy((input) =>
      typeof input === "object" && input !== null && "jobs" in input ? Batch : SubmitJob
    );
    app.post(
      "/jobs",
      guard("jobs"),
      async (c) => {
        const parsed = await readJsonBody(c.req.raw, Body, {
          maxBytes: maxBodyBytes,
          maxDepth: limits.maxPayloadDepth + ENVELOPE_DEPTH,
          countKey: "jobs",
          maxItems: maxJobs,
          timeout: limits.bodyTimeout,
        });
        if (!parsed.ok) return bodyRefused(c, parsed);
        const batch = "jobs" in parsed.value;
        const jobs: SubmitJob[] = "jobs" in parsed.value ? parsed.value.jobs : [parsed.value];
        const tooLarge = jobs.findIndex((job) =>
          utf8Length(JSON.stringify(job.payload)) > controller.maxPayloadBytes
        );
        if (tooLarge >= 0) {
          return c.json({
            error: "payload-too-large",
            index: tooLarge,
            limit: controller.maxPayloadBytes,
          }, 413);
        }
        const ids = jobs.map((job) => job.messageId ?? crypto.randomUUID());
        const result = await submitAll(producer, jobs, ids, submitTimeout);
        if (result.kind === "timeout") {
          c.header("Retry-After", "1");
          return c.json({ error: "not-accepted-yet", messageIds: ids }, 503);
        }
        if (result.kind === "failed") {
          const status = result.error instanceof RangeError
            ? 413
            : result.error instanceof TypeError
            ? 400
            : 503;
          return c.json({ error: "submit-failed", detail: String(result.error) }, status);
        }
        return c.json(batch ? { jobs: result.receipts } : result.receipts[0], 200);
      },
    );
  }

  app.onError((error, c) => {
    logger.error("an HTTP handler failed", error);
    return c.json({ error: "internal" }, 500);
  });
  return app;
}

type SubmitResult =
  | { readonly kind: "accepted"; readonly receipts: { messageId: string; seq: number }[] }
  | { readonly kind: "timeout" }
  | { readonly kind: "failed"; readonly error: unknown };

/**
 * Submit every job and wait until all are accepted into the pool, at most `timeout` ms. Jobs
 * still waiting at the timeout stay queued: a resubmission under the same MessageID joins them.
 */
function submitAll(
  producer: BufferedProducer<unknown>,
  jobs: readonly SubmitJob[],
  ids: readonly string[],
  timeout: number,
): Promise<SubmitResult> {
  const payloads = jobs.map((job) => job.payload);
  const all = producer.submitMany(payloads, { messageIds: ids }).then(async (receipts) => {
    await Promise.all(receipts.map((receipt) => receipt.accepted));
    return receipts.map((receipt) => ({ messageId: receipt.messageId, seq: receipt.seq }));
  }).then(
    (receipts): SubmitResult => ({ kind: "accepted", receipts }),
    (error): SubmitResult => ({ kind: "failed", error }),
  );
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<SubmitResult>((resolve) => {
    timer = setTimeout(() => resolve({ kind: "timeout" }), timeout);
  });
  return Promise.race([all, expired]).finally(() => clearTimeout(timer));
}
