/**
 * The workpull Hono app: one controller served over HTTP and WebSockets, runtime-agnostic (the
 * runtime's WebSocket upgrade is passed in; see `deno.ts` and `bun.ts`).
 *
 * Routes, relative to wherever the app is mounted:
 *
 * | route | what | credential |
 * |---|---|---|
 * | `GET /workers` | WebSocket upgrade for worker endpoints (subprotocol `workpull.v1`) | worker token |
 * | `POST /jobs` | submit one job `{ payload, messageId? }` or a batch `{ jobs: [...] }` | client token |
 * | `GET /stats` | JSON snapshot: workers, pending, totals | client token |
 *
 * Every request is authenticated before anything else happens; a refused one gets 401 and
 * changes nothing. `POST /jobs` answers once the jobs are *accepted* into the controller's pool
 * (with a durable queue: once they survive a crash), so an acknowledged job cannot be lost.
 *
 * @module
 */

import { type Context, Hono, type MiddlewareHandler } from "hono";
import { bodyLimit } from "hono/body-limit";
import type { WSEvents } from "hono/ws";
import * as v from "valibot";
import type { LinkIdentity, WorkPullingController } from "../controller/controller.ts";
import { utf8Length } from "../controller/durable_lane.ts";
import { durationOption, integerOption, optionsObject } from "../core/options.ts";
import type { BufferedProducer } from "../producer/buffered_producer.ts";
import { MAX_ID_LENGTH, SUBPROTOCOL } from "../protocol/schemas.ts";
import {
  type AuthFailureReason,
  type AuthOptions,
  createAuthenticator,
  offeredProtocols,
  type Route,
} from "./auth.ts";
import { type NetEventListener, report } from "./net_event.ts";
import { socketEvents } from "./socket_link.ts";

/**
 * A runtime's WebSocket upgrade: `upgradeWebSocket` from `hono/deno` or `hono/bun`, or
 * `denoUpgrader()` / `bunUpgrader()`. Typed as any function so that Hono's own types stay out
 * of workpull's public API; {@linkcode createWorkpullApp} checks it is a function.
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
  /** The controller to serve. The app never starts or closes it. */
  readonly controller: WorkPullingController;
  /** The runtime's WebSocket upgrade (see `denoUpgrader` and `bunUpgrader`). */
  readonly upgradeWebSocket: WebSocketUpgrader;
  /** How requests are authenticated: `{ secret }` for signed tokens, or `{ authorize }`. */
  readonly auth: AuthOptions;
  /** The controller's `BufferedProducer`: enables `POST /jobs`. */
  readonly producer?: BufferedProducer<unknown>;
  /** Largest frame accepted from a worker, UTF-8 bytes. Default 65,536 (1 KiB..16 MiB). */
  readonly maxFrameBytes?: number;
  /**
   * A connection whose outbound buffer passes this is closed (4000), bytes. Default 8 MiB. Keep
   * it above the controller's `maxInFlightBytes` (default 4 MiB), which bounds what one worker
   * holds unconfirmed, so only a worker that stops reading reaches it.
   */
  readonly maxBufferedBytes?: number;
  /** Largest `POST /jobs` body, bytes. Default 8 MiB. */
  readonly maxBodyBytes?: number;
  /** Most jobs in one `POST /jobs`. Default 1000 (1..10,000). */
  readonly maxJobsPerRequest?: number;
  /**
   * How long `POST /jobs` waits for its jobs to be accepted (they wait for worker demand)
   * before answering 503; the jobs stay queued. Default 30,000 ms.
   */
  readonly submitTimeout?: number;
  /** Receives reports of refused requests, oversized frames and backpressure closes. */
  readonly onEvent?: NetEventListener;
}

const MessageId = v.pipe(
  v.string(),
  v.minLength(1),
  v.maxLength(MAX_ID_LENGTH),
  v.check((s) => s.trim() !== "", "must not be blank"),
);
const SubmitJob = v.strictObject({ payload: v.unknown(), messageId: v.optional(MessageId) });
type SubmitJob = v.InferOutput<typeof SubmitJob>;

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
  const { controller, producer, upgradeWebSocket, onEvent } = options;
  if (typeof controller?.attach !== "function" || typeof controller.stats !== "function") {
    throw new TypeError(
      `Cannot create ${OWNER}: option "controller" must be a WorkPullingController`,
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
  const authenticate = createAuthenticator(options.auth, controller.name);
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

  /** Who each authenticated request is, for the upgrade that follows (private to this app). */
  const identities = new WeakMap<Request, LinkIdentity>();
  const guard = (route: Route): MiddlewareHandler => async (c, next) => {
    const outcome = await authenticate(c.req.raw, route);
    if (!outcome.ok) return unauthorized(c, route, outcome.reason);
    identities.set(c.req.raw, outcome.identity);
    await next();
  };
  const unauthorized = (c: Context, route: Route, reason: AuthFailureReason) => {
    report(onEvent, { kind: "unauthorized", route, reason });
    c.header("WWW-Authenticate", 'Bearer realm="workpull"');
    c.header("Cache-Control", "no-store");
    return c.json({ error: "unauthorized", reason }, 401);
  };

  const app = new Hono();

  app.get(
    "/workers",
    async (c, next) => {
      if (c.req.header("upgrade")?.toLowerCase() !== "websocket") {
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
    (upgradeWebSocket as unknown as HonoUpgrader)((c) => {
      const identity = identities.get(c.req.raw);
      if (!identity) throw new Error("the upgrade was not authenticated"); // unreachable
      return socketEvents((link) => controller.attach(link, identity), {
        maxFrameBytes,
        maxBufferedBytes,
        worker: identity.worker,
        onEvent,
      });
    }),
    (c) => c.json({ error: "upgrade-failed" }, 426, { Upgrade: "websocket" }),
  );

  app.get("/stats", guard("stats"), (c) => {
    c.header("Cache-Control", "no-store");
    return c.json({ ...controller.stats(), buffered: producer?.buffered ?? 0 });
  });

  if (producer) {
    app.post(
      "/jobs",
      guard("jobs"),
      bodyLimit({
        maxSize: maxBodyBytes,
        onError: (c) => c.json({ error: "body-too-large", limit: maxBodyBytes }, 413),
      }),
      async (c) => {
        let body: unknown;
        try {
          body = await c.req.json();
        } catch {
          return c.json({ error: "malformed-json" }, 400);
        }
        const batch = typeof body === "object" && body !== null && "jobs" in body;
        const parsed = batch
          ? v.safeParse(
            v.strictObject({
              jobs: v.pipe(v.array(SubmitJob), v.minLength(1), v.maxLength(maxJobs)),
            }),
            body,
          )
          : v.safeParse(SubmitJob, body);
        if (!parsed.success) {
          const issue = parsed.issues[0];
          const path = issue.path?.map((item) => String(item.key)).join(".") || "body";
          return c.json({ error: "invalid-body", detail: `${path}: ${issue.message}` }, 400);
        }
        const jobs: SubmitJob[] = "jobs" in parsed.output ? parsed.output.jobs : [parsed.output];
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
    console.error("workpull: an HTTP handler failed", error);
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
  const all = Promise.all(jobs.map(async (job, i) => {
    const receipt = await producer.submit(job.payload, { messageId: ids[i] });
    await receipt.accepted;
    return { messageId: receipt.messageId, seq: receipt.seq };
  })).then(
    (receipts): SubmitResult => ({ kind: "accepted", receipts }),
    (error): SubmitResult => ({ kind: "failed", error }),
  );
  let timer: ReturnType<typeof setTimeout> | undefined;
  const expired = new Promise<SubmitResult>((resolve) => {
    timer = setTimeout(() => resolve({ kind: "timeout" }), timeout);
  });
  return Promise.race([all, expired]).finally(() => clearTimeout(timer));
}
