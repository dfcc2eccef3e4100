/**
 * `workpull demo` (`npm run demo`): the whole story in one command, with real processes.
 *
 * 1. A server (`workpull serve`, a process of this runtime) on a fresh Deno KV file under
 *    `.workpull/demo-<time>/`, with a random secret.
 * 2. Worker processes (`workpull worker`) alternating between runtimes (Deno and Bun in a
 *    checkout), each with a distinct name, running `demo_handler.ts`: a few ms of work, then
 *    the job's MessageID appended to that worker's ledger file.
 * 3. Jobs submitted over HTTP in batches, with a progress bar.
 * 4. A quarter of the way through, one worker is killed with SIGKILL: the jobs it held go back
 *    to the pool and the others run them.
 * 5. Halfway, the server is killed with SIGKILL and started again on the same KV file and port:
 *    the workers reconnect, the submission retries under the same MessageIDs, and every stored
 *    job is still there.
 * 6. Once every job has run and the server is idle, the ledgers are counted: jobs run, lost
 *    (submitted, never run) and duplicated (run more than once: at-least-once delivery, for the
 *    jobs that were running when their worker or the server died). The last line starts with
 *    `demo:`; the exit code is 0 when nothing was lost.
 *
 * Every child is killed and reaped and the demo directory removed at the end (and on Ctrl-C),
 * unless `--keep`, which leaves the server and workers running and prints the dashboard URL and
 * a token until Ctrl-C.
 *
 * @module
 */

import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { signToken } from "../net/token.ts";
import { drainOnShutdown } from "../net/shutdown.ts";
import { type CommandSpec, type ParsedArgs, UsageError } from "./args.ts";
import { Child } from "./children.ts";
import { DEMO_LOG_ENV } from "./demo_handler.ts";
import { CliError, EXIT } from "./exit.ts";
import { call, flowUrl } from "./http.ts";
import { progressBar } from "./progress.ts";
import { commandOn, fromSources, programName, type Runtime, runtime } from "./runtime.ts";
import { submitBatch } from "./submit.ts";

const FLOW = "demo";
const RUNTIMES: readonly Runtime[] = ["deno", "bun", "node"];

export const demoSpec: CommandSpec = {
  name: "demo",
  summary: "See it work: workers on Deno and Bun, one killed, the server restarted, nothing lost.",
  description: [
    "Starts a server on a fresh Deno KV file under .workpull/, worker processes on Deno and Bun,",
    "submits jobs with a progress bar, kills a worker with SIGKILL mid-run (its jobs go to the",
    "others), kills and restarts the server on the same file (nothing stored is lost), then",
    'counts what the workers\' handlers really ran. The last line starts with "demo:" and names',
    "jobs run, lost and duplicated (at-least-once: a job running when its worker or the server",
    "died runs again). Exit code 0 when no job was lost.",
  ].join("\n"),
  flags: {
    jobs: {
      kind: "integer",
      value: "N",
      min: 1,
      max: 1_000_000,
      help: "jobs to submit (default 2000)",
    },
    workers: {
      kind: "integer",
      value: "N",
      min: 1,
      max: 32,
      help: "worker processes, alternating between the runtimes (default 4)",
    },
    runtimes: {
      kind: "string",
      value: "LIST",
      help: "the workers' runtimes, comma-separated: deno, bun, node (default deno,bun; from " +
        "the npm package: node)",
    },
    keep: {
      kind: "switch",
      help: "keep serving afterwards (the dashboard URL and a token are printed) until Ctrl-C",
    },
    port: {
      kind: "integer",
      value: "N",
      min: 0,
      max: 65_535,
      help: "the server's port (default 0: a free one)",
    },
  },
};

/** What the demo started, for the cleanup. */
interface Run {
  readonly dir: string;
  server?: Child;
  readonly workers: Child[];
}

/** Run `demo`. */
export async function runDemo(args: ParsedArgs): Promise<number> {
  const jobs = args.number("jobs", 2000);
  const workerCount = args.number("workers", 4);
  const keep = args.has("keep");
  const runtimes = workerRuntimes(args.string("runtimes"));
  const server = commandOn(runtime);
  if (!server) throw new CliError(`cannot start ${runtime} again as a server process`);
  const dir = join(".workpull", `demo-${Date.now()}`);
  mkdirSync(dir, { recursive: true });
  const run: Run = { dir, workers: [] };
  let cleaning: Promise<void> | undefined;
  const cleanUp = () =>
    cleaning ??= (async () => {
      await Promise.all([...run.workers, ...(run.server ? [run.server] : [])].map((c) => c.stop()));
      if (!keep) rmSync(dir, { recursive: true, force: true });
    })();
  const unregister = drainOnShutdown(cleanUp);
  try {
    return await demo(run, { jobs, workerCount, keep, runtimes, port: args.number("port", 0) });
  } finally {
    await cleanUp();
    unregister();
  }
}

interface DemoOptions {
  readonly jobs: number;
  readonly workerCount: number;
  readonly keep: boolean;
  readonly runtimes: readonly Runtime[];
  readonly port: number;
}

async function demo(run: Run, options: DemoOptions): Promise<number> {
  const started = performance.now();
  const { dir, workers } = run;
  const kv = join(dir, "demo.kv");
  const secret = btoa(String.fromCharCode(...crypto.getRandomValues(new Uint8Array(32))));
  const env = { WORKPULL_SECRET: secret };
  const names = Array.from(
    { length: options.workerCount },
    (_, i) => `demo-${options.runtimes[i % options.runtimes.length]}-${i + 1}`,
  );
  const runtimeOf = (i: number) => options.runtimes[i % options.runtimes.length];
  const perRuntime = options.runtimes.map((on) =>
    `${names.filter((_, i) => runtimeOf(i) === on).length} on ${label(on)}`
  );
  say(
    `workpull demo: ${options.jobs} jobs, ${options.workerCount} worker processes ` +
      `(${perRuntime.join(", ")}), a Deno KV file in ${dir}/`,
  );

  // 1. The server.
  const startServer = async (port: number) => {
    const child = new Child("the server", commandOn(runtime)!, [
      "serve",
      "--flow",
      FLOW,
      "--kv",
      kv,
      "--port",
      String(port),
      "--log-level",
      "warn",
    ], { env, stderrFile: join(dir, "server.log") });
    run.server = child;
    const [, url] = await child.line(/^listening on (\S+)/, 30_000);
    return { child, url };
  };
  let { child: server, url } = await startServer(options.port);
  const port = Number(new URL(url).port);
  const base = flowUrl(url, FLOW);
  say(`[1] server listening on ${url} (${label(runtime)}, pid ${server.pid})`);

  // 2. The workers.
  const handler = fileURLToPath(
    new URL(`./demo_handler.${fromSources ? "ts" : "js"}`, import.meta.url),
  );
  names.forEach((name, i) => {
    workers.push(
      new Child(name, commandOn(runtimeOf(i))!, [
        "worker",
        "--url",
        url,
        "--flow",
        FLOW,
        "--name",
        name,
        "--window",
        "20",
        "--log-level",
        "warn",
        handler,
      ], {
        env: { ...env, [DEMO_LOG_ENV]: ledger(dir, name) },
        stderrFile: join(dir, `${name}.log`),
      }),
    );
  });
  const token = await signToken(secret, { producer: FLOW, expiresIn: 86_400_000 });
  await until(
    async () => {
      for (const worker of workers) {
        if (worker.ended) {
          throw new CliError(`worker ${worker.name} exited at start:\n${worker.stderr()}`);
        }
      }
      return (await stats(base, token))?.workers?.length === workers.length;
    },
    "every worker to connect",
    60_000,
  );
  say(
    `[2] ${workers.length} workers connected: ${
      workers.map((w) => `${w.name} (pid ${w.pid})`).join(", ")
    }`,
  );

  // 3. Submit, while watching the ledgers: kill a worker at 25%, restart the server at 50%.
  say(`[3] submitting ${options.jobs} jobs in batches of 100`);
  const progress = progressBar("jobs submitted", options.jobs);
  const submitted: string[] = [];
  const submitting = (async () => {
    for (let i = 0; i < options.jobs; i += 100) {
      const batch = Array.from({ length: Math.min(100, options.jobs - i) }, (_, k) => ({
        payload: { n: i + k + 1, ms: 1 + ((i + k) % 5) },
        messageId: `demo-job-${i + k + 1}`,
      }));
      await submitBatch({ base, token, retryFor: 60_000 }, batch);
      submitted.push(...batch.map((job) => job.messageId));
      progress.update(submitted.length);
    }
    progress.finish();
  })();
  let failure: unknown;
  submitting.catch((error) => (failure = error));

  const victim = workers.find((w) => w.name.includes("bun")) ?? workers[0];
  let killedWorker = false;
  let restarted = false;
  const ranNow = () => countLedgers(dir).runs;
  await until(
    async () => {
      if (failure) throw failure;
      const ran = ranNow();
      if (!killedWorker && ran >= options.jobs * 0.25 && workers.length > 1) {
        killedWorker = true;
        await victim.stop("SIGKILL");
        say(
          `[4] killed worker ${victim.name} with SIGKILL after ${ran} runs: the jobs it held go ` +
            "back to the pool, the other workers run them",
        );
      }
      if (!restarted && ran >= options.jobs * 0.5) {
        restarted = true;
        await server.stop("SIGKILL");
        const down = performance.now();
        say(`[5] killed the server with SIGKILL after ${ran} runs; starting it again on ${kv}`);
        ({ child: server, url } = await startServer(port));
        say(
          `    back in ${seconds(performance.now() - down)} (pid ${server.pid}); the workers ` +
            "reconnect" + (submitted.length < options.jobs
              ? ", and the submission goes on, resending its batch under the same MessageIDs"
              : ""),
        );
      }
      return restarted && (killedWorker || workers.length === 1) &&
        submitted.length === options.jobs;
    },
    "the kills and the submission",
    120_000,
  );
  await submitting;

  // 4. Wait until every submitted job ran and the server is idle, then count.
  const everyJob = new Set(submitted);
  await until(
    async () => {
      const { ids } = countLedgers(dir);
      for (const id of everyJob) if (!ids.has(id)) return false;
      const backlog = (await stats(base, token))?.backlog;
      return backlog !== undefined &&
        backlog.waiting + backlog.scheduled + backlog.failed + backlog.active === 0;
    },
    "every job to run",
    120_000,
  ).catch((error) => say(`    ${error.message}`));
  const { ids, runs, perWorker } = countLedgers(dir);
  const lost = submitted.filter((id) => !ids.has(id)).length;
  const duplicated = [...ids.values()].filter((count) => count > 1).length;
  say(
    `[6] every job accounted for in ${seconds(performance.now() - started)}; runs per worker: ` +
      names.map((name) =>
        `${name} ${perWorker.get(name) ?? 0}${
          name === victim.name && killedWorker ? " (killed)" : ""
        }`
      ).join(", "),
  );
  if (options.keep) {
    const client = await signToken(secret, { producer: FLOW, expiresIn: 86_400_000 });
    say(
      [
        `Still serving (--keep). Dashboard: ${flowUrl(url, FLOW).href}`,
        `  client token: ${client}`,
        `  more jobs:    WORKPULL_TOKEN=${client} ${programName()} submit --url ${url} --flow ${FLOW} '{"ms":5}'`,
        `  files:        ${dir}/ (kept)`,
        "Ctrl-C stops the server and the workers.",
      ].join("\n"),
    );
  }
  say(
    `demo: ${submitted.length} jobs submitted, run ${submitted.length - lost}, lost ${lost}, ` +
      `duplicated ${duplicated} (${runs} handler runs` +
      (duplicated > 0
        ? "; at-least-once: jobs running or unconfirmed when their worker or the server was " +
          "killed ran again)"
        : ")"),
  );
  if (options.keep) await new Promise(() => {}); // until Ctrl-C (the shutdown drain cleans up)
  return lost === 0 ? EXIT.ok : EXIT.failed;
}

function say(line: string): void {
  if (process.stderr.isTTY) process.stderr.write("\r\x1b[K"); // over a progress bar
  console.log(line);
}

function label(on: Runtime): string {
  return on === "deno" ? "Deno" : on === "bun" ? "Bun" : "Node";
}

function seconds(ms: number): string {
  return `${(ms / 1000).toFixed(1)} s`;
}

/** The workers' runtimes: `--runtimes`, or what this installation can run. */
function workerRuntimes(given: string | undefined): Runtime[] {
  const wanted = given === undefined
    ? (fromSources ? ["deno", "bun"] : ["node", "bun"])
    : given.split(",").map((item) => item.trim());
  for (const item of wanted) {
    if (!RUNTIMES.includes(item as Runtime)) {
      throw new UsageError(`--runtimes takes deno, bun and node, got "${item}"`);
    }
  }
  const found = (wanted as Runtime[]).filter((item) => commandOn(item) !== undefined);
  const missing = wanted.filter((item) => !found.includes(item as Runtime));
  if (given !== undefined && missing.length > 0) {
    throw new CliError(
      `cannot run workers on ${missing.join(", ")}: not found in node_modules/.bin or on PATH` +
        (fromSources ? " (npm ci installs Deno and Bun)" : ""),
    );
  }
  if (found.length === 0) {
    throw new CliError(`no runtime found for the workers (${wanted.join(", ")})`);
  }
  return found;
}

/** This worker's ledger file. */
function ledger(dir: string, name: string): string {
  return join(dir, `ran-${name}.log`);
}

/** Every run recorded in the ledgers: runs by MessageID, runs by worker, the total. */
function countLedgers(dir: string): {
  ids: Map<string, number>;
  perWorker: Map<string, number>;
  runs: number;
} {
  const ids = new Map<string, number>();
  const perWorker = new Map<string, number>();
  let runs = 0;
  if (!existsSync(dir)) return { ids, perWorker, runs };
  for (const file of readdirSync(dir)) {
    const match = /^ran-(.+)\.log$/.exec(file);
    if (!match) continue;
    const lines = readFileSync(join(dir, file), "utf8").split("\n").filter((line) => line !== "");
    perWorker.set(match[1], lines.length);
    runs += lines.length;
    for (const id of lines) ids.set(id, (ids.get(id) ?? 0) + 1);
  }
  return { ids, perWorker, runs };
}

interface DemoStats {
  workers?: unknown[];
  backlog?: { waiting: number; scheduled: number; failed: number; active: number };
}

/** The flow's stats, or undefined while the server is away. */
async function stats(base: URL, token: string): Promise<DemoStats | undefined> {
  try {
    return (await call(base, "stats", { token })).body as DemoStats;
  } catch {
    return undefined;
  }
}

/** Poll `condition` every 50 ms until it holds; fail after `timeout` ms naming `what`. */
async function until(
  condition: () => boolean | Promise<boolean>,
  what: string,
  timeout: number,
): Promise<void> {
  const deadline = performance.now() + timeout;
  while (!(await condition())) {
    if (performance.now() > deadline) {
      throw new CliError(`timed out after ${timeout / 1000} s waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}
