/**
 * `workpull pause` and `workpull resume`: stop a flow from starting new tries, and start them
 * again (`POST /pause`, `POST /resume`). Jobs are still added while it is paused, and the tries
 * already at workers run to their end. A server with a durable store keeps the pause across a
 * restart and passes it to every instance of a shared flow.
 *
 * @module
 */

import type { CommandSpec, ParsedArgs } from "./args.ts";
import { clientFlags, clientTarget } from "./flags.ts";
import { call } from "./http.ts";

export const pauseSpec: CommandSpec = {
  name: "pause",
  summary: "Start no new job of a flow (jobs are still added; running ones finish).",
  flags: clientFlags,
};

export const resumeSpec: CommandSpec = {
  name: "resume",
  summary: "Start a paused flow's jobs again.",
  flags: clientFlags,
};

/** Run `pause` (true) or `resume` (false). */
export async function runPause(args: ParsedArgs, paused: boolean): Promise<number> {
  const { flow, base, token } = await clientTarget(args);
  await call(base, paused ? "pause" : "resume", { token, method: "POST" });
  console.log(
    paused ? `flow ${flow} paused: no new job starts until \`resume\`` : `flow ${flow} resumed`,
  );
  return 0;
}
