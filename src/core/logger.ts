/**
 * Where workpull's own messages go: a handler that threw and was contained, a hook that failed,
 * a server that stopped accepting. Every part that reports something takes a `logger` option
 * (the controller, worker endpoints, job queues, the app and the serve helpers, the worker
 * client); without one, errors and warnings go to `console.error` and `console.warn` as they
 * always did, and info and debug messages nowhere.
 *
 * A {@linkcode Logger} is four methods, so `console` itself is one, and so are most logging
 * libraries' loggers. {@linkcode createLogger} builds one with a level threshold that writes
 * one line a message: readable text, or JSON lines for a log collector.
 *
 * Messages are short sentences without the "workpull:" prefix (the loggers built here add it);
 * the details are the values that explain them, an `Error` first when there is one.
 *
 * @module
 */

/** How serious a message is, most serious first. */
export type LogLevel = "error" | "warn" | "info" | "debug";

/** The levels, most serious first. */
export const LOG_LEVELS: readonly LogLevel[] = ["error", "warn", "info", "debug"];

/** Receives workpull's messages. `console` is one. */
export interface Logger {
  /** Something failed and was contained (a handler threw, a write was refused). */
  error(message: string, ...details: unknown[]): void;
  /** Something looks wrong but nothing failed. */
  warn(message: string, ...details: unknown[]): void;
  /** What happened, at a pace a person can read (a worker joined, a server listens). */
  info(message: string, ...details: unknown[]): void;
  /** Everything, for a diagnosis. */
  debug(message: string, ...details: unknown[]): void;
}

/** Options of {@linkcode createLogger}. */
export interface LoggerOptions {
  /** The least serious level written. Default "info". */
  readonly level?: LogLevel;
  /** One line of text a message, or one JSON object a line. Default "text". */
  readonly format?: "text" | "json";
  /** Where a line goes. Default `console.error` (standard error on Deno, Bun and Node). */
  readonly write?: (line: string, level: LogLevel) => void;
  /** The time of a message, Unix ms. Default `Date.now`. */
  readonly now?: () => number;
}

const PREFIX = "workpull: ";

/**
 * The default: errors to `console.error` and warnings to `console.warn`, each as the message
 * and its details (the console formats them); info and debug dropped. The console is looked up
 * at each call, so a replaced `console.error` receives them.
 *
 * @example
 * ```ts
 * import { defaultLogger } from "./logger.ts";
 * defaultLogger.debug("not shown"); // info and debug go nowhere
 * ```
 */
export const defaultLogger: Logger = {
  error: (message, ...details) => console.error(PREFIX + message, ...details),
  warn: (message, ...details) => console.warn(PREFIX + message, ...details),
  info: () => {},
  debug: () => {},
};

/**
 * A logger writing one line a message at `level` and above, as text
 * (`2024-06-01T12:00:00.000Z ERROR workpull: message detail…`) or JSON
 * (`{"time":"…","level":"error","msg":"…","error":{"name":…,"message":…,"stack":…}}`).
 *
 * @example JSON lines, warnings and errors only
 * ```ts
 * import { createLogger } from "./logger.ts";
 *
 * const lines: string[] = [];
 * const logger = createLogger({ level: "warn", format: "json", write: (line) => lines.push(line) });
 * logger.info("not written");
 * logger.error("adding jobs failed", new Error("disk full"));
 * const entry = JSON.parse(lines[0]);
 * console.assert(lines.length === 1 && entry.level === "error" && entry.error.message === "disk full");
 * ```
 */
export function createLogger(options: LoggerOptions = {}): Logger {
  if (typeof options !== "object" || options === null) {
    throw new TypeError("Cannot create a logger: options must be an object");
  }
  const level = options.level ?? "info";
  if (!LOG_LEVELS.includes(level)) {
    throw new RangeError(
      `Cannot create a logger: option "level" must be one of ${LOG_LEVELS.join(", ")}`,
    );
  }
  const format = options.format ?? "text";
  if (format !== "text" && format !== "json") {
    throw new RangeError('Cannot create a logger: option "format" must be "text" or "json"');
  }
  const write = options.write ?? ((line: string) => console.error(line));
  const now = options.now ?? Date.now;
  if (typeof write !== "function" || typeof now !== "function") {
    throw new TypeError('Cannot create a logger: options "write" and "now" must be functions');
  }
  const threshold = LOG_LEVELS.indexOf(level);
  const method = (at: LogLevel) => {
    if (LOG_LEVELS.indexOf(at) > threshold) return () => {};
    return (message: string, ...details: unknown[]) => {
      const time = new Date(now()).toISOString();
      write(
        format === "json"
          ? jsonLine(time, at, message, details)
          : textLine(time, at, message, details),
        at,
      );
    };
  };
  return {
    error: method("error"),
    warn: method("warn"),
    info: method("info"),
    debug: method("debug"),
  };
}

/**
 * Check a `logger` option: undefined gives {@linkcode defaultLogger}; anything else must have
 * the four methods.
 *
 * @example
 * ```ts
 * import { defaultLogger, loggerOption } from "./logger.ts";
 * console.assert(loggerOption("WorkerEndpoint", undefined) === defaultLogger);
 * console.assert(loggerOption("WorkerEndpoint", console) === console);
 * ```
 */
export function loggerOption(owner: string, logger: unknown): Logger {
  if (logger === undefined) return defaultLogger;
  const missing = typeof logger === "object" && logger !== null
    ? LOG_LEVELS.find((at) => typeof (logger as Record<string, unknown>)[at] !== "function")
    : "error";
  if (missing !== undefined) {
    throw new TypeError(
      `Cannot create ${owner}: option "logger" must have error, warn, info and debug methods`,
    );
  }
  return logger as Logger;
}

function textLine(time: string, level: LogLevel, message: string, details: unknown[]): string {
  const parts = [time, level.toUpperCase(), PREFIX + message, ...details.map(describe)];
  return parts.join(" ");
}

function jsonLine(time: string, level: LogLevel, message: string, details: unknown[]): string {
  const entry: Record<string, unknown> = { time, level, msg: message };
  const errorAt = details.findIndex((detail) => detail instanceof Error);
  if (errorAt >= 0) {
    const error = details[errorAt] as Error;
    entry.error = { name: error.name, message: error.message, stack: error.stack };
  }
  const rest = details.filter((_, i) => i !== errorAt).map(jsonSafe);
  if (rest.length > 0) entry.details = rest;
  return JSON.stringify(entry);
}

/** A detail as text: an error's stack, a string as it is, anything else as JSON. */
function describe(detail: unknown): string {
  if (detail instanceof Error) return detail.stack ?? `${detail.name}: ${detail.message}`;
  if (typeof detail === "string") return detail;
  try {
    return JSON.stringify(detail) ?? String(detail);
  } catch {
    return String(detail);
  }
}

/** A detail that `JSON.stringify` can write (a cycle or a bigint becomes its string form). */
function jsonSafe(detail: unknown): unknown {
  try {
    JSON.stringify(detail);
    return detail;
  } catch {
    return String(detail);
  }
}
