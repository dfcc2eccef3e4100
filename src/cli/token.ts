/**
 * `workpull token`: print a signed token for a flow. Without `--worker` it is a client token
 * (submit jobs, read stats and jobs, the dashboard); with `--worker NAME` a worker token that
 * admits the worker `NAME` and its endpoints `NAME#…` to the WebSocket route. Signed with the
 * server's secret (`WORKPULL_SECRET` or the secret file, created if missing), so run it where
 * the server runs.
 *
 * @module
 */

import { signToken } from "../net/token.ts";
import type { CommandSpec, ParsedArgs } from "./args.ts";
import { flowFlag, flowName, secretFileFlag } from "./flags.ts";
import { DEFAULT_SECRET_FILE, loadSecret } from "./secret.ts";

export const tokenSpec: CommandSpec = {
  name: "token",
  summary: "Print a signed token: a client token, or with --worker a worker token.",
  description: [
    "A client token (no --worker) lets its holder submit jobs, read stats and jobs, retry dead",
    "letters and use the dashboard. A worker token for NAME admits the worker NAME, and its",
    "endpoints NAME#1, NAME#2… (concurrency) or NAME#anything, to the flow's WebSocket route.",
    "Tokens are signed with the server's secret: run this where the server runs.",
  ].join("\n"),
  flags: {
    flow: flowFlag,
    worker: { kind: "string", value: "NAME", help: "make a worker token for NAME" },
    expires: {
      kind: "duration",
      value: "DURATION",
      min: 1000,
      max: 10 * 365 * 86_400_000,
      help: "how long it is valid: 30m, 12h, 7d… (default 1d)",
    },
    "secret-file": secretFileFlag,
  },
  notes: [
    "Examples:",
    "  token                                  a client token for flow 'jobs', valid a day",
    "  token --flow emails --worker mailer --expires 7d",
  ].join("\n"),
};

/** Run `token`: the token on standard output. */
export async function runToken(args: ParsedArgs): Promise<number> {
  const flow = flowName(args);
  const worker = args.string("worker");
  const { secret } = loadSecret(args.string("secret-file", DEFAULT_SECRET_FILE), true)!;
  const token = await signToken(secret, {
    producer: flow,
    worker,
    expiresIn: args.number("expires", 86_400_000),
  });
  console.log(token);
  return 0;
}
