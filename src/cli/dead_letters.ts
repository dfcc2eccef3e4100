/**
 * `workpull dead-letters list|retry|delete`: the jobs that ran out of tries. `list` shows them
 * oldest death first (a page of `--limit`; `--cursor` for the next), `retry ID` or
 * `retry --all` gives them a fresh set of tries, `delete ID` forgets one.
 *
 * @module
 */

import { type CommandSpec, type ParsedArgs, UsageError } from "./args.ts";
import { CliError } from "./exit.ts";
import { clientFlags, clientTarget, jsonFlag } from "./flags.ts";
import { call } from "./http.ts";

export const deadListSpec: CommandSpec = {
  name: "dead-letters list",
  summary: "List dead jobs (out of tries), oldest death first.",
  flags: {
    ...clientFlags,
    limit: { kind: "integer", value: "N", min: 1, max: 1000, help: "at most N (default 100)" },
    cursor: { kind: "string", value: "CURSOR", help: "continue after a previous page" },
    json: jsonFlag,
  },
};

export const deadRetrySpec: CommandSpec = {
  name: "dead-letters retry",
  summary: "Give a dead job (or --all of them) a fresh set of tries.",
  flags: { ...clientFlags, all: { kind: "switch", help: "retry every dead job" } },
  positionals: [{ name: "ID", help: "the dead job's id" }],
};

export const deadDeleteSpec: CommandSpec = {
  name: "dead-letters delete",
  summary: "Forget a dead job.",
  flags: clientFlags,
  positionals: [{ name: "ID", help: "the dead job's id", required: true }],
};

interface DeadPage {
  jobs: {
    id: string;
    attempts: number;
    finishedAt?: number;
    error?: { name: string; message: string };
  }[];
  cursor?: string;
}

/** Run one of the dead-letters commands. */
export async function runDeadLetters(
  args: ParsedArgs,
  action: "list" | "retry" | "delete",
): Promise<number> {
  const { flow, base, token } = await clientTarget(args);
  const id = args.positionals[0];
  if (action === "list") {
    const query = new URLSearchParams();
    const limit = args.number("limit");
    if (limit !== undefined) query.set("limit", String(limit));
    const cursor = args.string("cursor");
    if (cursor !== undefined) query.set("cursor", cursor);
    const { body } = await call(base, `dead-letters${query.toString() ? `?${query}` : ""}`, {
      token,
    });
    const page = body as DeadPage;
    if (args.has("json")) console.log(JSON.stringify(page, null, 2));
    else {
      for (const job of page.jobs) {
        const error = job.error ? `  ${job.error.name}: ${job.error.message}` : "";
        console.log(`${job.id}  ${job.attempts} tries${error}`);
      }
      console.error(
        `${page.jobs.length} dead job${page.jobs.length === 1 ? "" : "s"} in flow ${flow}` +
          (page.cursor ? ` (more: --cursor ${page.cursor})` : ""),
      );
    }
    return 0;
  }
  if (action === "retry") {
    if (args.has("all") === (id !== undefined)) {
      throw new UsageError("give either a dead job's ID or --all");
    }
    if (args.has("all")) {
      const { body } = await call(base, "dead-letters/retry", { token, method: "POST" });
      console.log(`${(body as { retried: number }).retried} dead jobs retried in flow ${flow}`);
      return 0;
    }
  }
  const answer = await call(
    base,
    action === "retry"
      ? `dead-letters/${encodeURIComponent(id)}/retry`
      : `dead-letters/${encodeURIComponent(id)}`,
    { token, method: action === "retry" ? "POST" : "DELETE", accept: [404] },
  );
  if (answer.status === 404) throw new CliError(`no dead job ${id} in flow ${flow}`);
  console.log(
    action === "retry"
      ? `job ${id} retried (${(answer.body as { state: string }).state})`
      : `dead job ${id} deleted`,
  );
  return 0;
}
