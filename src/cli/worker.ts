/**
 * `workpull worker MODULE`: a worker process. The module's default export is the handler: it
 * gets each job's delivery (`payload`, `messageId`, `attempt`, `signal`, `progress`), and what
 * it returns is the job's result; a throw fails the try (retried after the flow's backoff, on
 * any worker). The process keeps its connection up (reconnecting with backoff) until SIGTERM or
 * Ctrl-C, which drains: buffered jobs go back, the running ones finish and are confirmed.
 *
 * Its name defaults to `<hostname>-<pid>` (under a token for worker W: `W#<hostname>-<pid>`),
 * so a second worker process joins the pool instead of replacing the first: the controller
 * keeps one binding per name, and a new process under a name already bound takes its place.
 *
 * @module
 */

import { hostname } from "node:os";
import { resolve } from "node:path";
import process from "node:process";
import { pathToFileURL } from "node:url";
import { identityAllows } from "../controller/controller.ts";
import { connectWorker, type UpgradeRefusedError } from "../net/client.ts";
import { signToken } from "../net/token.ts";
import { type Delivery, MAX_DRAIN_TIMEOUT } from "../worker/worker_endpoint.ts";
import { type CommandSpec, type ParsedArgs, UsageError } from "./args.ts";
import { CliError, EXIT } from "./exit.ts";
import {
  flowFlag,
  flowName,
  logFormatFlag,
  loggerFrom,
  logLevelFlag,
  secretFileFlag,
  urlFlag,
} from "./flags.ts";
import { DEFAULT_URL, flowUrl } from "./http.ts";
import { programName, runtime, webSocketHere } from "./runtime.ts";
import { DEFAULT_SECRET_FILE, requireSecret } from "./secret.ts";

/**
 * How long a SIGTERM lets running jobs finish, ms: longer than a library worker's 10 s, since a
 * worker process usually runs jobs that take a while, and an orchestrator's grace period (30 s in
 * Kubernetes) can be raised to match.
 */
const DRAIN_TIMEOUT = 60_000;

/** A job handler: what a worker module exports by default. */
export type Handler = (delivery: Delivery<unknown>) => unknown;

export const workerSpec: CommandSpec = {
  name: "worker",
  summary: "Run a worker process: MODULE's default export handles each job.",
  description: [
    "MODULE's default export is called with each job's delivery ({ payload, messageId, attempt,",
    "signal, progress }); what it returns is the job's result, and a throw fails the try (it is",
    "retried after the flow's backoff, on any worker). Delivery is at-least-once: a job can run",
    "twice (a worker lost mid-job), so key side effects by messageId.",
    "",
    "Each worker process needs its own name: the default, <hostname>-<pid>, is distinct per",
    "process (under a --token for worker W it is W#<hostname>-<pid>). Two processes under one",
    "name do not share work: the second replaces the first. Ctrl-C or SIGTERM drains and exits.",
  ].join("\n"),
  flags: {
    url: urlFlag,
    flow: flowFlag,
    token: {
      kind: "string",
      value: "TOKEN",
      help: "a worker token (default: $WORKPULL_TOKEN, else one signed with the local secret)",
    },
    name: {
      kind: "string",
      value: "NAME",
      help: "this worker's name (default <hostname>-<pid>)",
    },
    concurrency: {
      kind: "integer",
      value: "N",
      min: 1,
      max: 1000,
      help: "jobs run at once, each on its own connection NAME#1..#N (default 1)",
    },
    window: {
      kind: "integer",
      value: "N",
      min: 1,
      max: 10_000,
      help: "jobs each connection asks for ahead (default 50)",
    },
    "drain-timeout": {
      kind: "duration",
      value: "DURATION",
      min: 0,
      max: MAX_DRAIN_TIMEOUT,
      help: "on SIGTERM or Ctrl-C, how long running jobs may take to finish before they are " +
        "aborted and handed back (default 60s)",
    },
    "secret-file": secretFileFlag,
    "log-level": logLevelFlag,
    "log-format": logFormatFlag,
  },
  positionals: [{
    name: "MODULE",
    help: "a JavaScript or TypeScript module whose default export handles a job",
    required: true,
  }],
  notes: [
    "Example (a module that doubles a number):",
    "  // double.ts",
    "  export default ({ payload }) => payload.n * 2;",
    "",
    "  worker --flow jobs double.ts",
  ].join("\n"),
};

/** Run `worker`: resolves only when every endpoint was refused for good (exit 1). */
export async function runWorker(args: ParsedArgs): Promise<number> {
  const flow = flowName(args);
  const handler = await loadHandler(args.positionals[0]);
  const url = new URL("workers", flowUrl(args.string("url", DEFAULT_URL), flow));
  url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
  const logger = loggerFrom(args);
  const suffix = `${hostname()}-${process.pid}`;
  const given = args.string("token") ?? (process.env.WORKPULL_TOKEN || undefined);
  let name = args.string("name");
  let token: () => string | Promise<string>;
  /** The worker the token names. */
  let claimed: string;
  if (given !== undefined) {
    claimed = workerClaim(given);
    name ??= `${claimed}#${suffix}`;
    if (!identityAllows({ worker: claimed }, name)) {
      throw new UsageError(
        `--name ${name}: the token admits worker ${claimed} and its endpoints ${claimed}#… only`,
      );
    }
    token = () => given;
  } else {
    const worker = claimed = name ??= suffix;
    const { secret } = requireSecret(args.string("secret-file", DEFAULT_SECRET_FILE), "no --token");
    token = () => signToken(secret, { producer: flow, worker, expiresIn: 3_600_000 });
  }
  const concurrency = args.number("concurrency", 1);
  const connection = connectWorker({
    url,
    token,
    producer: flow,
    name,
    concurrency,
    window: args.number("window"),
    drainTimeout: args.number("drain-timeout", DRAIN_TIMEOUT),
    logger,
    WebSocket: await webSocketHere(),
    handler: async (delivery) => {
      logger.debug(`job ${delivery.messageId}: try ${delivery.attempt} started`);
      try {
        return await handler(delivery);
      } catch (error) {
        logger.warn(`job ${delivery.messageId}: try ${delivery.attempt} failed`, error);
        throw error;
      }
    },
  });
  logger.info(
    `worker ${name} (${runtime}, concurrency ${concurrency}) pulls flow ${flow} from ${url.href}`,
  );
  const reconnecting = new Set<string>();
  connection.addEventListener("connected", (event) => {
    if (reconnecting.delete(event.endpoint)) logger.info(`${event.endpoint}: connected again`);
    else logger.info(`${event.endpoint}: connected`);
  });
  connection.addEventListener("disconnected", (event) => {
    if (event.retryIn === undefined) return;
    reconnecting.add(event.endpoint);
    logger.warn(
      `${event.endpoint}: disconnected (${event.code}${event.reason ? ` ${event.reason}` : ""}); ` +
        `retrying in ${event.retryIn} ms`,
    );
  });
  return await new Promise<number>((resolve, reject) => {
    let stopped = 0;
    const stop = (error: CliError) => connection.close().then(() => reject(error), reject);
    connection.addEventListener("refused", (event) => {
      logger.error(event.error.message);
      if (event.error.retry || ++stopped < concurrency) return;
      void stop(new CliError("every endpoint was refused for good", EXIT.failed));
    });
    // Every endpoint shares the credential and the flow: the first lasting refusal is everyone's.
    connection.addEventListener("upgrade-refused", (event) => {
      void stop(new CliError(upgradeRefusal(event.error, flow, url, claimed), EXIT.unreachable));
    }, { once: true });
    void resolve; // a signal drains and exits
  });
}

/** The line that says why the server refused this worker, and what to do about it. */
function upgradeRefusal(error: UpgradeRefusedError, flow: string, url: URL, worker: string) {
  const remake = `make a new one with ${programName()} token --flow ${flow} --worker ${worker}`;
  switch (error.reason) {
    case "unknown-flow":
      return `the server at ${url.origin} serves no flow ${flow} (404); check --flow and --url`;
    case "expired":
    case "revoked":
      return `the server refused the worker token: ${error.reason}; ${remake}`;
    case "bad-signature":
    case "unknown-key":
      return `the server refused the worker token: ${error.reason} (it was not signed with the ` +
        `server's secret); ${remake} where the server's secret is, or give that secret ` +
        "(WORKPULL_SECRET or --secret-file)";
    case "wrong-producer":
      return `the server refused the worker token: ${error.reason} (it is for another flow ` +
        `than ${flow}); ${remake}`;
    case "wrong-kind":
      return `the server refused the worker token: ${error.reason} (a client token); ${remake}`;
    default:
      return `the server refused the worker token: ${error.reason} (${error.status}); ${remake}`;
  }
}

/** The handler a module exports by default; a usage error naming the module if none. */
async function loadHandler(path: string): Promise<Handler> {
  let module: { default?: unknown };
  try {
    module = await import(pathToFileURL(resolve(path)).href);
  } catch (error) {
    throw new UsageError(
      `MODULE ${path} cannot be loaded: ${error instanceof Error ? error.message : error}`,
    );
  }
  if (typeof module.default !== "function") {
    throw new UsageError(
      `MODULE ${path} must export a function by default (the job handler); it exports ` +
        (Object.keys(module).join(", ") || "nothing"),
    );
  }
  return module.default as Handler;
}

/** The worker a token admits, read without verifying it (the server verifies). */
function workerClaim(token: string): string {
  const parts = token.split(".");
  let claims: { worker?: unknown } | undefined;
  try {
    const text = atob(parts[parts.length - 2].replace(/-/g, "+").replace(/_/g, "/"));
    claims = JSON.parse(text);
  } catch {
    claims = undefined;
  }
  if (parts[0] !== "wp1" || parts.length < 3 || claims === undefined) {
    throw new UsageError("--token is not a workpull token");
  }
  if (typeof claims.worker !== "string") {
    throw new UsageError(
      "--token is a client token; a worker needs a worker token (token --worker NAME)",
    );
  }
  return claims.worker;
}
