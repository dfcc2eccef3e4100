/**
 * `workpull serve`: one job queue per `--flow`, their controllers and their HTTP/WebSocket apps
 * on one port, each flow under `/flows/<flow>/`. Jobs live in a Deno KV file (default
 * `.workpull/workpull.kv`, one key prefix per flow) so they survive a crash or a restart, or in
 * memory with `--memory`. The backlog and lifecycle options are flags, and `--schedule` declares
 * repeating jobs (`schedules.ts`). On SIGTERM or SIGINT the server drains (no new tries, running
 * ones finish and are written) and exits.
 *
 * The first line on standard output is `listening on <url>` (with the real port when `--port 0`
 * picked one); what follows says where workers connect (and each flow's schedules with their
 * next runs), where the dashboard is and how to get tokens.
 *
 * @module
 */

import { mkdirSync } from "node:fs";
import { dirname } from "node:path";
import { JobQueue } from "../backlog/job_queue.ts";
import { DenoKvJobStore } from "../backlog/deno_kv/job_store.ts";
import { MemoryJobStore } from "../backlog/memory_job_store.ts";
import type { StoreSettingsOptions } from "../backlog/store_settings.ts";
import type { Logger } from "../core/logger.ts";
import type { Backoff, LifecycleDefaults } from "../lifecycle/job_options.ts";
import type { MountedAppOptions } from "../net/serve.ts";
import { type CommandSpec, type ParsedArgs, parseDuration, UsageError } from "./args.ts";
import { CliError } from "./exit.ts";
import {
  checkFlow,
  DEFAULT_FLOW,
  logFormatFlag,
  loggerFrom,
  logLevelFlag,
  secretFileFlag,
} from "./flags.ts";
import { type KvFile, openKvFile, programName, runtime, serveHere } from "./runtime.ts";
import { DEFAULT_SECRET_FILE, loadSecret } from "./secret.ts";
import { parseSchedule, type ScheduleArg, scheduleFlag } from "./schedules.ts";
import { describeWhen } from "../schedule/recurrence.ts";

/** Where jobs live by default. */
export const DEFAULT_KV = ".workpull/workpull.kv";

export const serveSpec: CommandSpec = {
  name: "serve",
  summary: "Run a server: job queues for one or more flows, workers pull over WebSockets.",
  description: [
    "Each flow is served under /flows/<flow>/: workers connect to its /workers, clients",
    "submit to its /jobs. Jobs are kept in a Deno KV file, so they survive a crash or a",
    "restart (one server per file: a second one on the same file takes its flows over), or in",
    "memory with --memory. The signing secret is WORKPULL_SECRET, else the secret file,",
    "created once. SIGTERM or Ctrl-C drains: running jobs finish and are written, then it exits.",
  ].join("\n"),
  flags: {
    host: { kind: "string", value: "HOST", help: "interface to listen on (default 127.0.0.1)" },
    port: {
      kind: "integer",
      value: "N",
      min: 0,
      max: 65_535,
      help: "port; 0 picks a free one (default 8000)",
    },
    flow: {
      kind: "string",
      value: "NAME",
      repeatable: true,
      help: `a flow to serve (default ${DEFAULT_FLOW})`,
    },
    kv: { kind: "string", value: "PATH", help: `the Deno KV file (default ${DEFAULT_KV})` },
    memory: { kind: "switch", help: "keep jobs in memory only: gone when the server stops" },
    "secret-file": secretFileFlag,
    "max-backlog": {
      kind: "integer",
      value: "N",
      min: 1,
      max: 100_000_000,
      help: "most jobs waiting, scheduled or failed per flow; more are refused (429) " +
        "(default 100000)",
    },
    attempts: {
      kind: "integer",
      value: "N",
      min: 1,
      max: 1000,
      help: "tries per job before it is a dead letter (default 3)",
    },
    backoff: {
      kind: "string",
      value: "SPEC",
      help: "waits between tries: exponential:FIRST[:MAX] or fixed:WAIT (default " +
        "exponential:1s:1h)",
    },
    timeout: {
      kind: "duration",
      value: "DURATION",
      max: 86_400_000,
      help: "one try may take this long; 0 for no limit (default 0)",
    },
    "lost-limit": {
      kind: "integer",
      value: "N",
      min: 0,
      max: 1000,
      help: "lost workers a job survives before each loss counts as a failed try (default 2)",
    },
    retention: {
      kind: "duration",
      value: "DURATION",
      max: 365 * 86_400_000,
      help: "completed and cancelled jobs stay visible this long (default 1d)",
    },
    "retained-jobs": {
      kind: "integer",
      value: "N",
      min: 0,
      max: 1_000_000,
      help: "at most this many completed and cancelled jobs stay visible (default 10000)",
    },
    schedule: scheduleFlag,
    "log-level": logLevelFlag,
    "log-format": logFormatFlag,
  },
  notes: [
    "Examples:",
    "  serve                                  flow 'jobs' on 127.0.0.1:8000, jobs in .workpull/",
    "  serve --flow emails --flow thumbnails --port 9000",
    "  serve --memory --port 0 --attempts 5 --backoff fixed:10s --timeout 2m",
    `  serve --schedule '{"key":"nightly","cron":"0 3 * * *","payload":{"report":"sales"}}'`,
  ].join("\n"),
};

/** Run `serve`; resolves never (a signal drains and exits). */
export async function runServe(args: ParsedArgs): Promise<number> {
  const flows = args.list("flow").map((flow) => checkFlow(flow));
  if (flows.length === 0) flows.push(DEFAULT_FLOW);
  const twice = flows.find((flow, i) => flows.indexOf(flow) !== i);
  if (twice) throw new UsageError(`--flow ${twice} is given twice`);
  if (args.has("memory") && args.string("kv") !== undefined) {
    throw new UsageError("--kv and --memory exclude each other");
  }
  const schedules = args.list("schedule").map((text) => parseSchedule(text, flows));
  const settings = storeSettings(args);
  checkSchedules(schedules, settings);
  const logger = loggerFrom(args);
  const secretFile = args.string("secret-file", DEFAULT_SECRET_FILE);
  const { secret, source } = loadSecret(secretFile, true)!;
  const hostname = args.string("host", "127.0.0.1");
  const port = args.number("port", 8000);

  const kvPath = args.has("memory") ? undefined : args.string("kv", DEFAULT_KV);
  let kv: KvFile | undefined;
  if (kvPath !== undefined) {
    mkdirSync(dirname(kvPath), { recursive: true });
    kv = await openKvFile(kvPath);
  }
  const queues = flows.map((name) =>
    new JobQueue({
      name,
      store: kv
        ? new DenoKvJobStore(kv, { prefix: ["workpull", name], ...settings })
        : new MemoryJobStore(settings),
      logger,
    })
  );
  const debug = args.string("log-level", "info") === "debug";
  for (const queue of queues) logEvents(queue, logger, debug);
  for (const { flow, key, when, job } of schedules) {
    queues[flows.indexOf(flow)].schedule(key, when, job); // checked above
  }
  await Promise.all(queues.map((queue) => queue.start()));

  const auth = { secret };
  const apps: MountedAppOptions[] = queues.slice(1).map((queue) => ({
    queue,
    auth,
    logger,
    basePath: `/flows/${queue.name}`,
  }));
  let server;
  try {
    server = await serveHere({
      queue: queues[0],
      auth,
      logger,
      hostname,
      port,
      basePath: `/flows/${queues[0].name}`,
      apps,
    });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new CliError(
      /in use|EADDRINUSE/i.test(message)
        ? `cannot listen on ${hostname}:${port}: the address is in use (another server? ` +
          "--port 0 picks a free port)"
        : `cannot listen on ${hostname}:${port}: ${message}`,
    );
  }
  const root = new URL("/", server.url);
  const program = programName();
  const lines = [`listening on ${root.href}`];
  for (const queue of queues) {
    const base = new URL(`flows/${queue.name}/`, root);
    const workers = new URL("workers", base);
    workers.protocol = workers.protocol === "https:" ? "wss:" : "ws:";
    lines.push(`  flow "${queue.name}": ${base.href}  (workers connect to ${workers.href})`);
    for (const { key, when, next } of queue.schedules()) {
      const at = next === undefined ? "" : `, next ${new Date(next).toISOString()}`;
      lines.push(`    schedule "${key}": ${describeWhen(when)}${at}`);
    }
  }
  lines.push(
    `  dashboard: ${new URL(`flows/${flows[0]}/`, root).href}  (log in with a client token)`,
    kvPath === undefined
      ? "  jobs are kept in memory only (--memory): gone when the server stops"
      : `  jobs are kept in ${kvPath} (Deno KV on ${runtime})`,
    `  tokens are signed with the secret in ${source}`,
    "Tokens:",
    `  ${program} token --flow ${
      flows[0]
    }                  a client token (submit, stats, dashboard)`,
    `  ${program} token --flow ${flows[0]} --worker NAME    a worker token`,
    "Ctrl-C drains and stops.",
  );
  console.log(lines.join("\n"));
  return await new Promise<number>(() => {}); // the signal handler drains and exits
}

/**
 * Check each `--schedule` as its queue will, before anything is opened or created: a queue of the
 * same settings, never started, takes it or names what is wrong.
 */
function checkSchedules(schedules: readonly ScheduleArg[], settings: StoreSettingsOptions): void {
  const keys = new Set<string>();
  for (const { flow, key, when, job } of schedules) {
    if (keys.has(`${flow}/${key}`)) throw new UsageError(`--schedule ${key} is given twice`);
    keys.add(`${flow}/${key}`);
    const queue = new JobQueue({ name: flow, store: new MemoryJobStore(settings) });
    try {
      queue.schedule(key, when, job);
    } catch (error) {
      throw new UsageError(`--schedule ${key}: ${(error as Error).message}`);
    }
  }
}

/** The store options the flags ask for (only those given: the store has the defaults). */
function storeSettings(args: ParsedArgs): StoreSettingsOptions {
  const defaults: Record<string, unknown> = {};
  const attempts = args.number("attempts");
  if (attempts !== undefined) defaults.attempts = attempts;
  const timeout = args.number("timeout");
  if (timeout !== undefined) defaults.timeout = timeout;
  const lostLimit = args.number("lost-limit");
  if (lostLimit !== undefined) defaults.lostLimit = lostLimit;
  const backoff = args.string("backoff");
  if (backoff !== undefined) defaults.backoff = parseBackoff(backoff);
  const settings: Record<string, unknown> = { defaults: defaults as LifecycleDefaults };
  const maxBacklog = args.number("max-backlog");
  if (maxBacklog !== undefined) settings.maxBacklog = maxBacklog;
  const retention = args.number("retention");
  if (retention !== undefined) settings.retention = retention;
  const retainedJobs = args.number("retained-jobs");
  if (retainedJobs !== undefined) settings.retainedJobs = retainedJobs;
  return settings as StoreSettingsOptions;
}

/** `exponential:FIRST[:MAX]` or `fixed:WAIT`, durations as `--timeout` takes them. */
export function parseBackoff(text: string): Backoff {
  const [type, first, max, ...rest] = text.split(":");
  const delay = first === undefined ? undefined : parseDuration(first);
  const cap = max === undefined ? undefined : parseDuration(max);
  const bad = () =>
    new UsageError(
      `--backoff must be exponential:FIRST[:MAX] or fixed:WAIT (durations like 500ms, 10s, 1h), ` +
        `got "${text}"`,
    );
  if (rest.length > 0 || delay === undefined || (max !== undefined && cap === undefined)) {
    throw bad();
  }
  if (type === "fixed" && max === undefined) return { type: "fixed", delay };
  if (type === "exponential") {
    return cap === undefined ? { type, delay } : { type, delay, max: cap };
  }
  throw bad();
}

/**
 * What a flow's queue tells the log: workers joining and leaving at info, job changes at debug
 * (followed only at that level: a line built for every change of every job costs the hot path).
 */
function logEvents(queue: JobQueue, logger: Logger, debug: boolean): void {
  const flow = queue.name;
  const controller = queue.controller;
  controller.addEventListener("worker-bound", (event) => {
    logger.info(`flow ${flow}: worker ${event.worker} joined`);
  });
  controller.addEventListener("worker-unbound", (event) => {
    logger.info(
      `flow ${flow}: worker ${event.worker} left (${event.reason})` +
        (event.requeued > 0 ? `; ${event.requeued} of its jobs went back to the pool` : ""),
    );
  });
  controller.addEventListener("restarted", (event) => {
    logger.warn(`flow ${flow}: the controller restarted after a storage failure`, event.cause);
  });
  controller.addEventListener("delivery-failed", (event) => {
    logger.error(
      `flow ${flow}: stopped serving (${event.stage}); if another server took this KV file ` +
        "over, that one serves it now",
      event.error,
    );
  });
  if (!debug) return;
  queue.watchJobs((job, previous) => {
    logger.debug(`flow ${flow}: job ${job.id} ${previous ?? "new"} -> ${job.state}`);
  });
}
