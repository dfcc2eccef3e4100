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
import { connectWorker } from "../net/client.ts";
import { signToken } from "../net/token.ts";
import type { Delivery } from "../worker/worker_endpoint.ts";
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
import { runtime, webSocketHere } from "./runtime.ts";
import { DEFAULT_SECRET_FILE, requireSecret } from "./secret.ts";

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
  if (given !== undefined) {
    const claimed = workerClaim(given);
    name ??= `${claimed}#${suffix}`;
    if (!identityAllows({ worker: claimed }, name)) {
      throw new UsageError(
        `--name ${name}: the token admits worker ${claimed} and its endpoints ${claimed}#… only`,
      );
    }
    token = () => given;
  } else {
    const worker = name ??= suffix;
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
    connection.addEventListener("refused", (event) => {
      logger.error(event.error.message);
      if (event.error.retry || ++stopped < concurrency) return;
      connection.close().then(
        () => reject(new CliError("every endpoint was refused for good", EXIT.failed)),
        reject,
      );
    });
    void resolve; // a signal drains and exits
  });
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
