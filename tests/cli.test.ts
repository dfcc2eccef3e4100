/**
 * The `workpull` command. As real processes on the runtime running the test: `serve` on port 0
 * (its first line names the URL), `token`, two `worker`s with default names (both stay in the
 * pool), `submit` from arguments and from standard input, `stats`, then SIGTERM draining both
 * kinds of process. In process (`main`): every command's `--help`, usage errors naming the
 * flag with exit code 2, and the job and dead-letter commands against a served job queue.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { JobQueue, MemoryJobStore } from "../mod.ts";
import { signToken } from "../server.ts";
import { main, topHelp } from "../src/cli/main.ts";
import { CliProcess, runCli } from "./fixtures/cli_support.ts";
import { SECRET, serve, waitFor, within } from "./fixtures/net_support.ts";

/** The README's worker module. */
const HANDLER = new URL("../examples/handler.ts", import.meta.url).pathname;

function tempDir(): string {
  return mkdtempSync(join(tmpdir(), "workpull-cli-"));
}

/** Run `main` in this process; what it printed and its exit code. */
async function inProcess(argv: string[]): Promise<{ code: number; out: string; err: string }> {
  const out: string[] = [];
  const err: string[] = [];
  const { log, error } = console;
  console.log = (...args: unknown[]) => void out.push(args.join(" "));
  console.error = (...args: unknown[]) => void err.push(args.join(" "));
  try {
    const code = await main(argv);
    return { code, out: out.join("\n"), err: err.join("\n") };
  } finally {
    console.log = log;
    console.error = error;
  }
}

/**
 * Start command processes in `cwd` (with no `WORKPULL_SECRET`: the secret file is used); every
 * one started is in `processes`, for the test to kill.
 */
function launcher(cwd: string) {
  const processes: CliProcess[] = [];
  const start = (args: string[], stdin?: string) => {
    const child = new CliProcess(args, { cwd, stdin, env: { WORKPULL_SECRET: "" } });
    processes.push(child);
    return child;
  };
  return { processes, start };
}

/** The flow `jobs`' `GET /stats` on the server at `url`. */
async function statsOf(url: string, client: string) {
  const response = await fetch(new URL("flows/jobs/stats", url), {
    headers: { authorization: `Bearer ${client}` },
  });
  return await response.json();
}

test("serve, token, worker, submit and stats run as separate processes", {
  timeout: 180_000,
}, async () => {
  const cwd = tempDir();
  const { processes, start } = launcher(cwd);
  try {
    const server = start(["serve", "--port", "0", "--log-level", "debug"]);
    await waitFor(
      () => /^listening on http:\/\/127\.0\.0\.1:\d+\/$/m.test(server.stdout),
      () => `the server's first line\n${server.stdout}\n${server.stderr}`,
      60_000,
    );
    const url = server.stdout.match(/^listening on (\S+)/m)![1];
    assert.match(server.stdout, /flows\/jobs\/workers/);
    assert.match(server.stderr, /generated a signing secret in \.workpull\/secret \(mode 0600\)/);
    assert.equal(statSync(join(cwd, ".workpull", "secret")).mode & 0o777, 0o600);

    // A worker token made by `token`; a second worker signs its own with the local secret.
    const made = await runCli(["token", "--worker", "w1", "--expires", "1h"], { cwd });
    assert.equal(made.code, 0, made.stderr);
    const workerToken = made.stdout.trim();
    assert.match(workerToken, /^wp1\.[\w-]+\.[\w-]+$/);
    start(["worker", "--url", url, "--token", workerToken, HANDLER]);
    start(["worker", "--url", url, "--concurrency", "2", HANDLER]);

    const client = (await runCli(["token"], { cwd })).stdout.trim();
    const stats = () => statsOf(url, client);
    await waitFor(
      async () => (await stats()).workers.length === 3,
      () => `three endpoints bound\n${server.stderr}`,
      60_000,
    );
    const names: string[] = (await stats()).workers.map((w: { worker: string }) => w.worker);
    assert.equal(names.filter((name) => /^w1#.+-\d+$/.test(name)).length, 1, names.join());
    assert.equal(names.filter((name) => /^[^#]+-\d+#[12]$/.test(name)).length, 2, names.join());

    const submitted = await runCli([
      "submit",
      "--url",
      url,
      "--token",
      client,
      '{"n":21}',
      '{"n":2}',
    ], {
      cwd,
    });
    assert.equal(submitted.code, 0, submitted.stderr);
    const ids = submitted.stdout.trim().split("\n");
    assert.equal(ids.length, 2);
    assert.match(submitted.stderr, /2\/2 jobs submitted .*to flow jobs \(2 new\)/);

    const lines = Array.from({ length: 250 }, (_, n) => JSON.stringify({ n })).join("\n") + "\n";
    const piped = await runCli(["submit", "--url", url], { cwd, stdin: lines });
    assert.equal(piped.code, 0, piped.stderr);
    assert.equal(new Set(piped.stdout.trim().split("\n")).size, 250);

    await waitFor(
      async () => {
        const { backlog, totals } = await stats();
        return backlog.waiting + backlog.active === 0 && totals.confirmed >= 252;
      },
      "252 jobs run",
      60_000,
    );
    const job = await (await fetch(new URL(`flows/jobs/jobs/${ids[0]}`, url), {
      headers: { authorization: `Bearer ${client}` },
    })).json();
    assert.deepEqual([job.state, job.result], ["completed", 42]);
    const ran = processes.slice(1).map((worker) => worker.stdout).join("");
    assert.match(ran, new RegExp(`^job ${ids[0]} \\(try 1\\): 21 \\* 2$`, "m"));

    const shown = await runCli(["stats", "--url", url], { cwd });
    assert.equal(shown.code, 0, shown.stderr);
    assert.match(shown.stdout, /^flow jobs \(running\)$/m);
    assert.match(shown.stdout, /workers: 3/);
    assert.match(shown.stdout, /^\s+w1#\S+\s+\d+\s+0\s+\d+$/m);
    assert.match(server.stderr, /flow jobs: worker w1#\S+ joined/);
    // At debug, every job's change of state.
    assert.match(server.stderr, /flow jobs: job \S+ active -> completed/);

    // SIGTERM drains and exits with 143, workers first, then the server.
    for (const child of processes.slice(1)) child.signal("SIGTERM");
    for (const child of processes.slice(1)) {
      const code = await within(child.exited, "a worker to drain and exit", 30_000);
      assert.equal(code, 143, child.stderr);
    }
    server.signal("SIGTERM");
    assert.equal(await within(server.exited, "the server to drain and exit", 30_000), 143);
  } finally {
    await Promise.all(processes.map((child) => child.kill()));
    rmSync(cwd, { recursive: true, force: true });
  }
});

test(
  "serve --schedule adds a repeating job: its runs go to a worker process, and stats shows the schedule",
  {
    timeout: 120_000,
  },
  async () => {
    const cwd = tempDir();
    const { processes, start } = launcher(cwd);
    try {
      const server = start([
        "serve",
        "--memory",
        "--port",
        "0",
        "--schedule",
        '{"key":"tick","every":"1s","payload":{"n":4},"priority":3}',
      ]);
      await waitFor(
        () => /^listening on /m.test(server.stdout) && /schedule "tick"/.test(server.stdout),
        () => `the server's first lines\n${server.stdout}\n${server.stderr}`,
        60_000,
      );
      const url = server.stdout.match(/^listening on (\S+)/m)![1];
      assert.match(server.stdout, /^ {4}schedule "tick": every 1000 ms, next \d{4}-\d\d-\d\dT/m);
      const client = (await runCli(["token"], { cwd })).stdout.trim();
      start(["worker", "--url", url, HANDLER]);
      let ran: string[] = [];
      await waitFor(
        () => (ran = processes[1].stdout.match(/^job tick@\S+/gm) ?? []).length >= 2,
        () => `two runs at the worker\n${processes[1].stdout}\n${processes[1].stderr}`,
        60_000,
      );
      const id = ran[0].slice("job ".length);
      assert.match(id, /^tick@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
      await waitFor(async () => {
        const job = await (await fetch(new URL(`flows/jobs/jobs/${encodeURIComponent(id)}`, url), {
          headers: { authorization: `Bearer ${client}` },
        })).json();
        return job.state === "completed" && job.result === 8 && job.priority === 3;
      }, `${id} completed with 4 * 2`);
      const shown = await runCli(["stats", "--url", url, "--token", client], { cwd });
      assert.equal(shown.code, 0, shown.stderr);
      assert.match(shown.stdout, /^ {2}schedules: 1\n {4}tick: every 1000 ms, next \S+Z$/m);
      server.signal("SIGTERM");
      assert.equal(await within(server.exited, "the server to drain and exit", 30_000), 143);
    } finally {
      await Promise.all(processes.map((child) => child.kill()));
      rmSync(cwd, { recursive: true, force: true });
    }
  },
);

test("a pause outlives a SIGKILLed server: restarted on its KV file, it starts paused", {
  timeout: 180_000,
}, async () => {
  const cwd = tempDir();
  const { processes, start } = launcher(cwd);
  const listening = async (server: CliProcess) => {
    await waitFor(
      () => /^listening on http:\/\/127\.0\.0\.1:\d+\/$/m.test(server.stdout),
      () => `the server's first line\n${server.stdout}\n${server.stderr}`,
      60_000,
    );
    return server.stdout.match(/^listening on (\S+)/m)![1];
  };
  try {
    const first = start(["serve", "--port", "0"]);
    let url = await listening(first);
    const paused = await runCli(["pause", "--url", url], { cwd });
    assert.equal(paused.code, 0, paused.stderr);
    const submitted = await runCli(["submit", "--url", url, "--id", "p1", '{"n":1}'], { cwd });
    assert.equal(submitted.code, 0, submitted.stderr);
    first.signal("SIGKILL");
    await within(first.exited, "the server to die", 15_000);

    const second = start(["serve", "--port", "0"]);
    url = await listening(second);
    const shown = await runCli(["stats", "--url", url], { cwd });
    assert.match(shown.stdout, /^flow jobs \(running, paused\)$/m, shown.stdout);
    const worker = start(["worker", "--url", url, "--name", "w", HANDLER]);
    const client = (await runCli(["token"], { cwd })).stdout.trim();
    const stats = () => statsOf(url, client);
    await waitFor(
      async () => (await stats()).workers[0]?.window > 0,
      () => `the worker's demand\n${second.stderr}\n${worker.stderr}`,
      60_000,
    );
    assert.deepEqual((await stats()).backlog, {
      waiting: 1,
      scheduled: 0,
      failed: 0,
      active: 0,
      dead: 0,
    });
    const resumed = await runCli(["resume", "--url", url], { cwd });
    assert.equal(resumed.code, 0, resumed.stderr);
    await waitFor(
      () => /^job p1 \(try 1\): 1 \* 2$/m.test(worker.stdout),
      () => `p1 to run after the resume\n${worker.stdout}`,
      60_000,
    );
  } finally {
    await Promise.all(processes.map((child) => child.kill()));
    rmSync(cwd, { recursive: true, force: true });
  }
});

test("the command's --help lists every command; each command has --help", async () => {
  const cwd = tempDir();
  try {
    const top = await runCli(["--help"], { cwd });
    assert.equal(top.code, 0, top.stderr);
    const commands = [
      "serve",
      "token",
      "worker",
      "submit",
      "stats",
      "jobs get",
      "jobs cancel",
      "dead-letters list",
      "dead-letters retry",
      "dead-letters delete",
      "pause",
      "resume",
      "demo",
    ];
    for (const command of commands) {
      assert.match(top.stdout, new RegExp(`^  ${command} `, "m"), command);
      const help = await inProcess([...command.split(" "), "--help"]);
      assert.equal(help.code, 0, command);
      assert.match(help.out, new RegExp(`^Usage: \\S+ ${command} \\[flags\\]`), command);
      assert.match(help.out, /^Exit codes:$/m, command);
    }
    assert.match(topHelp(), /^ {2}3 +the server could not be reached/m);
    const bare = await inProcess([]);
    assert.equal(bare.code, 2, "no command is a usage error");
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
});

test("an unknown flag, a bad value or a missing argument is named, with exit code 2", async () => {
  const cwd = tempDir();
  try {
    const unknown = await runCli(["serve", "--prot", "9000"], { cwd });
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /^error: unknown flag --prot$/m);
    const cases: [string[], RegExp][] = [
      [["frobnicate"], /unknown command "frobnicate"/],
      [["jobs", "frob", "x"], /unknown command "jobs frob" \(jobs takes get, cancel\)/],
      [
        ["serve", "--port", "http"],
        /--port must be a whole number between 0 and 65535, got "http"/,
      ],
      [["serve", "--backoff", "linear:1s"], /--backoff must be exponential:FIRST\[:MAX\] or fixed/],
      [["serve", "--memory", "--kv", "x.kv"], /--kv and --memory exclude each other/],
      [["serve", "--flow", "a b"], /--flow must be 1 to 64 letters/],
      [["serve", "--flow", "a", "--flow", "a"], /--flow a is given twice/],
      [["serve", "--log-level", "loud"], /--log-level must be one of error, warn, info, debug/],
      [["serve", "--memory", "--schedule", "{nope"], /--schedule must be a JSON object/],
      [["serve", "--memory", "--schedule", '{"every":1000,"payload":1}'], /needs a "key"/],
      [
        ["serve", "--memory", "--schedule", '{"key":"k","every":"1m","payload":1,"flow":"x"}'],
        /--schedule k: "flow" must be a flow served \(jobs\)/,
      ],
      [
        ["serve", "--memory", "--schedule", '{"key":"k","cron":"bad","payload":1}'],
        /--schedule k: when is not a valid cron pattern in UTC/,
      ],
      [
        ["serve", "--memory", "--schedule", '{"key":"k","every":"soon","payload":1}'],
        /--schedule k: "every" must be ms or a duration like 30s or 1h/,
      ],
      [
        ["serve", "--memory", "--schedule", '{"key":"k","every":"1m","payload":1,"delay":5}'],
        /--schedule k: "delay" is not a field/,
      ],
      [["serve", "--memory", "--schedule", '{"key":"k","every":"1m"}'], /"payload" is missing/],
      [
        ["serve", "--memory", "--schedule", '{"key":"k","every":1,"payload":1}'],
        /--schedule k: when.every must be in 1000\.\./,
      ],
      [
        [
          "serve",
          "--memory",
          "--schedule",
          '{"key":"k","every":1000,"payload":1}',
          "--schedule",
          '{"key":"k","every":2000,"payload":1}',
        ],
        /--schedule k is given twice/,
      ],
      [["token", "--expires", "soon"], /--expires must be a duration/],
      [["token", "--port", "1"], /unknown flag --port/],
      [["worker"], /MODULE is missing/],
      [["worker", "--concurrency", "0", "x.mjs"], /--concurrency must be a whole number between 1/],
      [["worker", "missing-module.mjs"], /MODULE missing-module\.mjs cannot be loaded/],
      [["submit", "--priority", "5000", "1"], /--priority must be a whole number between -1000/],
      [["submit", "--id", "a", "1", "2"], /--id names one job/],
      [["submit", "--url", "ftp://x", "1"], /--url must be an http\(s\) URL/],
      [["submit", "{nope", "--token", "t"], /argument 1 is not JSON/],
      [["stats", "extra"], /unexpected argument "extra"/],
      [["dead-letters", "retry", "--token", "t"], /give either a dead job's ID or --all/],
      [["demo", "--runtimes", "deno,java"], /--runtimes takes deno, bun and node, got "java"/],
    ];
    for (const [argv, message] of cases) {
      const { code, err } = await inProcess(argv);
      assert.equal(code, 2, `${argv.join(" ")}: ${err}`);
      assert.match(err, message, argv.join(" "));
    }
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
});

test("jobs get|cancel, dead-letters list|retry|delete and pause|resume against a served job queue", async () => {
  const queue = new JobQueue({
    name: "jobs",
    store: new MemoryJobStore({ defaults: { attempts: 1 } }),
  });
  await queue.start();
  const server = await serve({
    queue,
    auth: { secret: SECRET },
    basePath: "/flows/jobs",
    drainOnSignals: false,
  });
  try {
    const token = await signToken(SECRET, { producer: "jobs", expiresIn: 60_000 });
    const url = new URL("/", server.url).href;
    const flags = ["--url", url, "--token", token];
    const later = await queue.add({ n: 1 }, { messageId: "later", delay: 60_000 });
    assert.equal(later.job.state, "scheduled");
    const got = await inProcess(["jobs", "get", ...flags, "later"]);
    assert.equal(got.code, 0, got.err);
    assert.equal(JSON.parse(got.out).state, "scheduled");
    const cancelled = await inProcess(["jobs", "cancel", ...flags, "later"]);
    assert.equal(JSON.parse(cancelled.out).state, "cancelled");
    const missing = await inProcess(["jobs", "get", ...flags, "nope"]);
    assert.deepEqual([missing.code, missing.err], [1, "error: no job nope in flow jobs"]);

    // A dead letter: a job whose only try is lost to a failing worker.
    const { connectInProcess, WorkerEndpoint } = await import("../mod.ts");
    const worker = new WorkerEndpoint({
      producer: "jobs",
      name: "w",
      handler: () => {
        throw new Error("poison");
      },
    });
    connectInProcess(queue.controller, worker);
    await (await queue.add({ n: 2 }, { messageId: "poison" })).finished;
    await worker.close();
    const listed = await inProcess(["dead-letters", "list", ...flags]);
    assert.equal(listed.code, 0, listed.err);
    assert.match(listed.out, /^poison {2}1 tries {2}Error: poison$/m);
    assert.match(listed.err, /1 dead job in flow jobs/);
    const retried = await inProcess(["dead-letters", "retry", ...flags, "poison"]);
    assert.equal(retried.code, 0, retried.err);
    assert.match(retried.out, /^job poison retried \((waiting|active)\)$/);
    assert.notEqual((await queue.get("poison"))?.state, "dead");
    const gone = await inProcess(["dead-letters", "delete", ...flags, "poison"]);
    assert.deepEqual([gone.code, gone.err], [1, "error: no dead job poison in flow jobs"]);

    // Pause and resume: the server's queue follows, and `stats` says so.
    const paused = await inProcess(["pause", ...flags]);
    assert.equal(paused.code, 0, paused.err);
    assert.equal(paused.out, "flow jobs paused: no new job starts until `resume`");
    assert.equal(queue.paused, true);
    assert.match((await inProcess(["stats", ...flags])).out, /^flow jobs \(running, paused\)$/m);
    const resumed = await inProcess(["resume", ...flags]);
    assert.deepEqual([resumed.code, resumed.out], [0, "flow jobs resumed"]);
    assert.equal(queue.paused, false);
    assert.match((await inProcess(["stats", ...flags])).out, /^flow jobs \(running\)$/m);

    const unauthorized = await inProcess(["stats", "--url", url, "--token", "wp1.e30.AAAA"]);
    assert.equal(unauthorized.code, 3);
    assert.match(unauthorized.err, /the server refused the token \(bad-signature\)/);
    const unreachable = await inProcess([
      "stats",
      "--url",
      "http://127.0.0.1:1/",
      "--token",
      token,
    ]);
    assert.equal(unreachable.code, 3);
    assert.match(unreachable.err, /cannot reach http:\/\/127\.0\.0\.1:1/);
  } finally {
    await server.close();
    await queue.close();
  }
});
