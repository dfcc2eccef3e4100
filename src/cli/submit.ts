/**
 * `workpull submit`: add jobs to a flow. Each JSON argument is one job's payload; without
 * arguments, each line of standard input is one (blank lines skipped). Jobs go in batches of
 * `--batch` (default 100) as `POST /jobs {"jobs":[…]}`, each job with a MessageID chosen here,
 * so a batch that must be sent again (the server restarting, the backlog full for a moment) is
 * sent again under the same IDs and never adds a job twice. A progress bar runs on standard
 * error when it is a terminal; each job's id is printed on standard output, one a line.
 *
 * @module
 */

import { createInterface } from "node:readline";
import process from "node:process";
import { type CommandSpec, type ParsedArgs, UsageError } from "./args.ts";
import { CliError, EXIT } from "./exit.ts";
import { clientFlags, flowName } from "./flags.ts";
import { type Answer, answerError, call, DEFAULT_URL, flowUrl, reason } from "./http.ts";
import { progressBar } from "./progress.ts";
import { DEFAULT_SECRET_FILE, tokenFor } from "./secret.ts";

export const submitSpec: CommandSpec = {
  name: "submit",
  summary: "Add jobs: JSON payloads as arguments, or JSON lines on standard input.",
  description: [
    "Each JSON argument is one job's payload; with none, each line of standard input is one.",
    "The server answers once the jobs are stored (with a KV file: once they survive a crash),",
    "whether or not a worker is online. Batches are retried under the same MessageIDs while the",
    "server is unreachable, restarting or full (up to --retry-for), so no job is added twice.",
    "Each job's id is printed on standard output, one a line.",
  ].join("\n"),
  flags: {
    ...clientFlags,
    delay: {
      kind: "duration",
      value: "DURATION",
      max: 365 * 86_400_000,
      help: "start no sooner than this from now: 30s, 5m…",
    },
    priority: {
      kind: "integer",
      value: "N",
      min: -1000,
      max: 1000,
      help: "higher runs first (-1000..1000; default 0; negative: --priority=-5)",
    },
    attempts: {
      kind: "integer",
      value: "N",
      min: 1,
      max: 1000,
      help: "tries before a dead letter (default: the flow's)",
    },
    timeout: {
      kind: "duration",
      value: "DURATION",
      max: 86_400_000,
      help: "one try may take this long (default: the flow's)",
    },
    id: {
      kind: "string",
      value: "ID",
      help: "the job's MessageID (one job only): submitting it again changes nothing",
    },
    batch: {
      kind: "integer",
      value: "N",
      min: 1,
      max: 1000,
      help: "jobs per request (default 100)",
    },
    "retry-for": {
      kind: "duration",
      value: "DURATION",
      max: 86_400_000,
      help: "keep retrying a batch this long while the server is away or full (default 30s)",
    },
    quiet: { kind: "switch", help: "print neither the ids nor the progress" },
  },
  positionals: [{ name: "JSON", help: "a job's payload, as JSON", variadic: true }],
  notes: [
    "Examples:",
    `  submit '{"to":"ada@example.com"}' '{"to":"grace@example.com"}'`,
    "  submit --delay 1m --priority 5 '42'",
    `  seq 1000 | submit --flow numbers          (each line, here a number, is a payload)`,
  ].join("\n"),
};

/** A job as `POST /jobs` takes it. */
export interface JobBody {
  readonly payload: unknown;
  readonly messageId: string;
  readonly delay?: number;
  readonly priority?: number;
  readonly attempts?: number;
  readonly timeout?: number;
}

/** Where and how to submit. */
export interface Submitter {
  readonly base: URL;
  readonly token: string;
  /** How long to keep retrying one batch, ms. */
  readonly retryFor: number;
  /** Told of a failed try that will be retried: why, and how much longer retries go on, ms. */
  readonly onRetry?: (failure: string, remaining: number) => void;
}

/** How often a failing submit says it is still retrying, ms. */
const RETRY_NOTICE_INTERVAL = 5_000;

/** Run `submit`. */
export async function runSubmit(args: ParsedArgs): Promise<number> {
  const flow = flowName(args);
  const base = flowUrl(args.string("url", DEFAULT_URL), flow);
  const options = {
    ...optional("delay", args.number("delay")),
    ...optional("priority", args.number("priority")),
    ...optional("attempts", args.number("attempts")),
    ...optional("timeout", args.number("timeout")),
  };
  const id = args.string("id");
  const fromArgs = args.positionals.length > 0;
  if (!fromArgs && process.stdin.isTTY) {
    throw new UsageError(
      "give each job's payload as a JSON argument, or pipe JSON lines on standard input",
    );
  }
  if (id !== undefined && args.positionals.length !== 1) {
    throw new UsageError("--id names one job: give exactly one JSON argument with it");
  }
  const submitter: Submitter = {
    base,
    token: await tokenFor(
      args.string("token"),
      flow,
      args.string("secret-file", DEFAULT_SECRET_FILE),
    ),
    retryFor: args.number("retry-for", 30_000),
    onRetry: retryNotices(),
  };
  const quiet = args.has("quiet");
  const batchSize = args.number("batch", 100);
  const progress = progressBar(
    "jobs submitted",
    fromArgs ? args.positionals.length : undefined,
    quiet,
  );
  let submitted = 0;
  let created = 0;
  const send = async (payloads: readonly unknown[]) => {
    const jobs = payloads.map((payload) => ({
      payload,
      messageId: id ?? crypto.randomUUID(),
      ...options,
    }));
    const answers = await submitBatch(submitter, jobs);
    for (const answer of answers) {
      if (!quiet) console.log(answer.id);
      if (answer.created) created++;
    }
    submitted += jobs.length;
    progress.update(submitted);
  };
  let batch: unknown[] = [];
  if (fromArgs) {
    args.positionals.forEach((text, i) => batch.push(parseJson(text, `argument ${i + 1}`)));
    for (let i = 0; i < batch.length; i += batchSize) await send(batch.slice(i, i + batchSize));
  } else {
    let line = 0;
    for await (const text of createInterface({ input: process.stdin, crlfDelay: Infinity })) {
      line++;
      if (text.trim() === "") continue;
      batch.push(parseJson(text, `line ${line} of standard input`));
      if (batch.length === batchSize) {
        await send(batch);
        batch = [];
      }
    }
    if (batch.length > 0) await send(batch);
  }
  progress.finish(` to flow ${flow} (${created} new)`);
  return EXIT.ok;
}

/** Submit one batch, retrying under the same MessageIDs; the jobs as the server shows them. */
export async function submitBatch(
  submitter: Submitter,
  jobs: readonly JobBody[],
): Promise<{ id: string; created: boolean }[]> {
  const deadline = Date.now() + submitter.retryFor;
  for (let attempt = 1;; attempt++) {
    let answer: Answer | undefined;
    let failure: string;
    try {
      answer = await call(submitter.base, "jobs", {
        method: "POST",
        token: submitter.token,
        body: { jobs },
        accept: [429, 503],
      });
      if (answer.status < 300) {
        const shown = (answer.body as { jobs: { id: string; created: boolean }[] }).jobs;
        return shown.map((job) => ({ id: job.id, created: job.created }));
      }
      failure = `the server answered ${answer.status}`;
    } catch (error) {
      // Unreachable (restarting?) is worth waiting for; a refusal is not.
      if (!(error instanceof CliError) || error.exitCode !== EXIT.unreachable) throw error;
      if (/refused the token/.test(error.message)) throw error;
      failure = error.message;
    }
    const retryAfter = Number(answer?.headers.get("retry-after") ?? NaN) * 1000;
    const wait = Math.min(
      Number.isFinite(retryAfter) && retryAfter > 0 ? retryAfter : 100 * 2 ** Math.min(attempt, 5),
      3000,
    );
    if (Date.now() + wait > deadline) {
      throw answer ? answerError(submitter.base, answer) : new CliError(failure, EXIT.unreachable);
    }
    submitter.onRetry?.(failure, deadline - Date.now());
    await new Promise((resolve) => setTimeout(resolve, wait));
  }
}

/**
 * What a submit says on standard error while it retries: at once, why and for how long, then
 * every few seconds how long is left (the jobs keep their MessageIDs, so a retry adds nothing
 * twice).
 */
function retryNotices(): (failure: string, remaining: number) => void {
  let lastNotice = -Infinity;
  return (failure, remaining) => {
    const now = Date.now();
    if (now - lastNotice < RETRY_NOTICE_INTERVAL) return;
    const first = lastNotice === -Infinity;
    lastNotice = now;
    const left = `${Math.ceil(remaining / 1000)} s`;
    console.error(
      first
        ? `${failure}; retrying for ${left} (--retry-for), Ctrl-C to stop`
        : `still failing; retrying for ${left} more`,
    );
  };
}

function optional<K extends string>(key: K, value: number | undefined): Partial<Record<K, number>> {
  return value === undefined ? {} : { [key]: value } as Record<K, number>;
}

function parseJson(text: string, where: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new UsageError(`${where} is not JSON: ${reason(error)} (in ${text.slice(0, 80)})`);
  }
}
