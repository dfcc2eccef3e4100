/**
 * Flags several `workpull` commands share, declared once: where the server is, which flow, the
 * token, the secret file, logging.
 *
 * @module
 */

import { createLogger, type Logger, type LogLevel } from "../core/logger.ts";
import { type FlagSpec, type ParsedArgs, UsageError } from "./args.ts";
import { DEFAULT_URL, flowUrl } from "./http.ts";
import { DEFAULT_SECRET_FILE, tokenFor } from "./secret.ts";

/** The flow every command uses when `--flow` is not given. */
export const DEFAULT_FLOW = "jobs";

/** What a flow name may look like on the command line (it is a URL path segment). */
const FLOW_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

export const urlFlag: FlagSpec = {
  kind: "string",
  value: "URL",
  help: `the server (default ${DEFAULT_URL})`,
};
export const flowFlag: FlagSpec = {
  kind: "string",
  value: "NAME",
  help: `the flow (default ${DEFAULT_FLOW})`,
};
export const tokenFlag: FlagSpec = {
  kind: "string",
  value: "TOKEN",
  help: "a client token for the flow (default: $WORKPULL_TOKEN, else one signed with the local " +
    "secret)",
};
export const secretFileFlag: FlagSpec = {
  kind: "string",
  value: "PATH",
  help: `the signing secret's file when WORKPULL_SECRET is unset (default ${DEFAULT_SECRET_FILE})`,
};
export const jsonFlag: FlagSpec = { kind: "switch", help: "print the server's JSON answer" };
export const logLevelFlag: FlagSpec = {
  kind: "choice",
  value: "LEVEL",
  choices: ["error", "warn", "info", "debug"],
  help: "what to log on standard error: error, warn, info or debug (default info)",
};
export const logFormatFlag: FlagSpec = {
  kind: "choice",
  value: "FORMAT",
  choices: ["text", "json"],
  help: "log lines as text or JSON (default text)",
};

/** The flags of a client command (one that calls the server's HTTP routes). */
export const clientFlags: Readonly<Record<string, FlagSpec>> = {
  url: urlFlag,
  flow: flowFlag,
  token: tokenFlag,
  "secret-file": secretFileFlag,
};

/** A checked flow name (`--flow`, or the default). */
export function flowName(args: ParsedArgs, flag = "flow"): string {
  return checkFlow(args.string(flag, DEFAULT_FLOW), flag);
}

/** `name` if it is a valid flow name on the command line; a usage error naming `flag` if not. */
export function checkFlow(name: string, flag = "flow"): string {
  if (!FLOW_NAME.test(name)) {
    throw new UsageError(
      `--${flag} must be 1 to 64 letters, digits, ".", "_" or "-" (starting with a letter or ` +
        `digit), got "${name}"`,
    );
  }
  return name;
}

/** The logger `--log-level` and `--log-format` ask for. */
export function loggerFrom(args: ParsedArgs): Logger {
  return createLogger({
    level: args.string("log-level", "info") as LogLevel,
    format: args.string("log-format", "text") as "text" | "json",
  });
}

/**
 * What a client command talks to: the flow (`--flow`), its base URL on the server (`--url`) and
 * a client token (`--token`, or one signed with the local secret of `--secret-file`).
 */
export async function clientTarget(
  args: ParsedArgs,
): Promise<{ flow: string; base: URL; token: string }> {
  const flow = flowName(args);
  const base = flowUrl(args.string("url", DEFAULT_URL), flow);
  const token = await tokenFor(
    args.string("token"),
    flow,
    args.string("secret-file", DEFAULT_SECRET_FILE),
  );
  return { flow, base, token };
}
