/**
 * What serving the app on a runtime takes and returns; shared by `serveDeno` and `serveBun`.
 *
 * @module
 */

import { Hono } from "hono";
import { booleanOption, durationOption, integerOption } from "../core/options.ts";
import { drainOnShutdown } from "./shutdown.ts";
import { RefusalLog } from "./refusal_log.ts";
import { loggerOption } from "../core/logger.ts";
import { closeDashboardStreams } from "../dashboard/routes.ts";
import type { WorkpullApp, WorkpullAppOptions } from "./app.ts";

/** One more app served on the same port (another flow), under its own base path. */
export interface MountedAppOptions extends Omit<WorkpullAppOptions, "upgradeWebSocket"> {
  /** Where to mount it, for example "/flows/thumbnails". */
  readonly basePath: string;
}

/** Options of `serveDeno` and `serveBun`: the app's options plus where to listen. */
export interface ServeOptions extends Omit<WorkpullAppOptions, "upgradeWebSocket"> {
  /** TCP port; 0 picks a free one (read it from `server.port`). Default 0. */
  readonly port?: number;
  /** Interface to listen on. Default "127.0.0.1" (loopback only: opt in to "0.0.0.0"). */
  readonly hostname?: string;
  /** Where to mount the app, for example "/workpull". Default "/". */
  readonly basePath?: string;
  /**
   * The runtime pings a WebSocket that has been quiet this long and closes it if the ping is
   * not answered (a dead peer the worker protocol's own silence check has not caught yet), ms.
   * Rounded up to whole seconds. Default 30,000 (1,000..960,000).
   */
  readonly idleTimeout?: number;
  /**
   * On SIGTERM or SIGINT (where the runtime has signals), drain the controller (no new work,
   * confirmations written, up to 10 s), close the server and exit. Default true.
   */
  readonly drainOnSignals?: boolean;
  /**
   * Bun closes an HTTP connection idle this long between requests, or waiting this long for an
   * answer, ms, rounded up to whole seconds (Bun's `idleTimeout`, checked every few seconds). A
   * connection that never completes a request is closed by Bun after about 10 s regardless.
   * Deno.serve has neither timeout (see `docs/SECURITY.md`); on Deno this option is ignored.
   * Default 10,000 (1,000..255,000).
   */
  readonly httpIdleTimeout?: number;
  /**
   * A TCP connection whose first request head has not arrived this long after it was accepted
   * is dropped, ms (`serveDeno`, `serveNode`; Bun closes such connections itself after about
   * 10 s). Default 10,000 (100..300,000).
   */
  readonly headTimeout?: number;
  /**
   * Connections waiting for their first request head at most (`serveDeno`, `serveNode`): past
   * it a new connection is dropped at once, so heads trickled or never sent cannot hold every
   * descriptor. Connections already serving are not affected. Default 512 (1..1,000,000).
   */
  readonly maxPendingHeads?: number;
  /**
   * More workpull apps served on the same port, each under its own `basePath`: several flows
   * (each its own queue or controller and credentials) on one server. They share the listening
   * options; on a signal every one drains. Default: none.
   */
  readonly apps?: readonly MountedAppOptions[];
}

/** A running server. */
export interface WorkpullServer {
  /** The workpull app (mounted at `basePath` inside the served app). */
  readonly app: WorkpullApp;
  /** The base URL, for example `http://127.0.0.1:8000/workpull/`. */
  readonly url: URL;
  /** The WebSocket URL workers connect to, for example `ws://127.0.0.1:8000/workpull/workers`. */
  readonly workersUrl: URL;
  /** The port listened on. */
  readonly port: number;
  /** Stop listening and close every connection. The controller is left as it is. */
  close(): Promise<void>;
  /** Same as `close()`. */
  [Symbol.asyncDispose](): Promise<void>;
}

/** Validated listening options. */
export interface ListenOptions {
  readonly port: number;
  readonly hostname: string;
  readonly basePath: string;
  /** In whole seconds. */
  readonly idleTimeoutSeconds: number;
  readonly drainOnSignals: boolean;
  /** In whole seconds. */
  readonly httpIdleTimeoutSeconds: number;
  /** ms. */
  readonly headTimeout: number;
  readonly maxPendingHeads: number;
}

/** Validate an idle timeout in ms (default 30 s) and round it up to whole seconds. */
export function idleSeconds(owner: string, idleTimeout: number | undefined): number {
  return Math.ceil(durationOption(owner, "idleTimeout", idleTimeout, 30_000, 1000, 960_000) / 1000);
}

/** Validate the listening part of {@linkcode ServeOptions}. */
export function listenOptions(owner: string, options: ServeOptions): ListenOptions {
  const basePath = options.basePath ?? "/";
  if (typeof basePath !== "string" || !basePath.startsWith("/")) {
    throw new TypeError(`Cannot create ${owner}: option "basePath" must start with "/"`);
  }
  return {
    port: integerOption(owner, "port", options.port, 0, 0, 65_535),
    hostname: options.hostname ?? "127.0.0.1",
    basePath: basePath.replace(/\/+$/, ""),
    idleTimeoutSeconds: idleSeconds(owner, options.idleTimeout),
    drainOnSignals: booleanOption(owner, "drainOnSignals", options.drainOnSignals, true),
    httpIdleTimeoutSeconds: Math.ceil(
      durationOption(owner, "httpIdleTimeout", options.httpIdleTimeout, 10_000, 1000, 255_000) /
        1000,
    ),
    headTimeout: durationOption(owner, "headTimeout", options.headTimeout, 10_000, 100, 300_000),
    maxPendingHeads: integerOption(
      owner,
      "maxPendingHeads",
      options.maxPendingHeads,
      512,
      1,
      1_000_000,
    ),
  };
}

/**
 * The `close` of a server: idempotent, and with `drainOnSignals` also run on SIGTERM / SIGINT
 * after draining the controller (then the process exits).
 */
export function closeOnShutdown(
  listen: ListenOptions,
  options: ServeOptions,
  stop: () => Promise<void>,
): () => Promise<void> {
  let closing: Promise<void> | undefined;
  let unregister = () => {};
  const close = () => {
    unregister();
    return closing ??= stop();
  };
  if (listen.drainOnSignals) {
    const logger = loggerOption("the server", options.logger);
    unregister = drainOnShutdown(async (signal) => {
      const started = Date.now();
      logger.info(
        `${signal}: draining: no new tries start; waiting for the running ones to finish and ` +
          "be written (up to 10 s), then closing",
      );
      await Promise.all(
        [options, ...options.apps ?? []].map((app) =>
          app.queue ? app.queue.drain() : app.controller?.drain()
        ),
      );
      await close();
      logger.info(`drained and closed in ${Date.now() - started} ms; exiting`);
    });
  }
  return close;
}

/** The apps a runtime adapter built (its own and the mounted ones), from {@linkcode servedApps}. */
export interface ServedApps {
  /** Build one app and remember it. */
  readonly build: (app: Omit<WorkpullAppOptions, "upgradeWebSocket">) => Hono;
  /** End every built app's dashboard streams: an open stream would hold the server's close. */
  closeDashboardStreams(): void;
}

/**
 * Build every app a runtime adapter serves through `make`, remembering them for shutdown.
 *
 * @example
 * ```ts ignore
 * const apps = servedApps((app) => buildWorkpullHono({ ...app, upgradeWebSocket }));
 * const root = servedRoot("serveDeno", listen, apps.build(options), options, apps.build);
 * // at shutdown:
 * apps.closeDashboardStreams();
 * ```
 */
export function servedApps(
  make: (app: Omit<WorkpullAppOptions, "upgradeWebSocket">) => Hono,
): ServedApps {
  const built: Hono[] = [];
  return {
    build(app) {
      const hono = make(app);
      built.push(hono);
      return hono;
    },
    closeDashboardStreams() {
      for (const served of built) closeDashboardStreams(served);
    },
  };
}

/**
 * What a server serves: `app` at the base path, and each of `options.apps` (built by `build`)
 * at its own. Throws an error naming a bad `apps` entry.
 */
export function servedRoot(
  owner: string,
  listen: ListenOptions,
  app: Hono,
  options: ServeOptions,
  build: (options: MountedAppOptions) => Hono,
  runtimeAddress?: (request: Request, env: unknown) => string | undefined,
): Hono {
  const apps = options.apps ?? [];
  if (!Array.isArray(apps)) {
    throw new TypeError(`Cannot create ${owner}: option "apps" must be an array`);
  }
  const root = apps.length === 0 && !listen.basePath
    ? app
    : new Hono().route(listen.basePath || "/", app);
  // A worker for a flow this server does not serve learns it from a JSON answer (its client asks
  // with a plain GET when the upgrade fails), and whoever runs the server from the log.
  const refusals = new RefusalLog(loggerOption(owner, options.logger));
  const addressOf = options.clientAddress ?? runtimeAddress;
  root.notFound((c) => {
    if (c.req.path.endsWith("/workers")) {
      let address: string | undefined;
      try {
        address = addressOf?.(c.req.raw, c.env) ?? undefined;
      } catch {
        address = undefined;
      }
      refusals.refused(`a worker's upgrade for ${c.req.path}`, "unknown-flow", address);
      return c.json({ error: "unknown-flow", path: c.req.path }, 404);
    }
    return c.json({ error: "no-route", path: c.req.path }, 404);
  });
  if (apps.length === 0) return root;
  const paths = new Set([listen.basePath]);
  apps.forEach((mounted, i) => {
    const path = typeof mounted?.basePath === "string"
      ? mounted.basePath.replace(/\/+$/, "")
      : undefined;
    if (path === undefined || !mounted.basePath.startsWith("/") || paths.has(path)) {
      throw new TypeError(
        `Cannot create ${owner}: option "apps.${i}.basePath" must start with "/" and differ from the others`,
      );
    }
    paths.add(path);
    root.route(path, build(mounted));
  });
  return root;
}

/** The base and WebSocket URLs of a server listening on `hostname:port`. */
export function serverUrls(
  hostname: string,
  port: number,
  basePath: string,
): { url: URL; workersUrl: URL } {
  const host = hostname.includes(":") ? `[${hostname}]` : hostname;
  const url = new URL(`http://${host}:${port}${basePath}/`);
  const workersUrl = new URL("workers", url);
  workersUrl.protocol = "ws:";
  return { url, workersUrl };
}
