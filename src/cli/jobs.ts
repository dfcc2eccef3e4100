/**
 * `workpull jobs get ID` and `workpull jobs cancel ID`: one job's state, tries, timestamps,
 * result or error (`GET /jobs/:id`), and cancelling it (`DELETE /jobs/:id`: a job not started
 * never runs; a running one is aborted at its worker). A job that is not there is exit code 1.
 *
 * @module
 */

import type { CommandSpec, ParsedArgs } from "./args.ts";
import { CliError } from "./exit.ts";
import { clientFlags, clientTarget } from "./flags.ts";
import { call } from "./http.ts";

const id = [{ name: "ID", help: "the job's id (its MessageID)", required: true }];

export const jobsGetSpec: CommandSpec = {
  name: "jobs get",
  summary: "Show one job: state, tries, timestamps, result or error (JSON).",
  flags: clientFlags,
  positionals: id,
};

export const jobsCancelSpec: CommandSpec = {
  name: "jobs cancel",
  summary: "Cancel one job: not started, it never runs; running, it is aborted at its worker.",
  flags: clientFlags,
  positionals: id,
};

/** Run `jobs get` (or `jobs cancel` with `cancel`). */
export async function runJob(args: ParsedArgs, cancel: boolean): Promise<number> {
  const { flow, base, token } = await clientTarget(args);
  const jobId = args.positionals[0];
  const answer = await call(base, `jobs/${encodeURIComponent(jobId)}`, {
    token,
    method: cancel ? "DELETE" : "GET",
    accept: [404],
  });
  if (answer.status === 404) throw new CliError(`no job ${jobId} in flow ${flow}`);
  console.log(JSON.stringify(answer.body, null, 2));
  if (cancel && answer.status === 202) {
    console.error(`job ${jobId} is running: its worker is told to stop; it ends cancelled`);
  }
  return 0;
}
