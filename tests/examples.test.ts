/**
 * The examples run to completion (they exit by themselves) and print what they promise, on the
 * runtime running the tests (the Deno-only ones on Deno). The README's TypeScript blocks are
 * examples: each names its file on its first line and is that file's code, word for word.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readdirSync, readFileSync } from "node:fs";
import process from "node:process";

const runtime: "deno" | "bun" = "Deno" in globalThis ? "deno" : "bun";

/** Run `examples/<name>` to its end; its stdout, stderr and exit code. */
export function runExample(
  name: string,
  timeout = 60_000,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const file = new URL(`../examples/${name}`, import.meta.url).pathname;
  const [command, args] = runtime === "deno"
    ? [Deno.execPath(), ["run", "-A", "--unstable-kv", "--quiet", file]]
    : [process.execPath, [file]];
  return new Promise((resolve, reject) => {
    const child = spawn(command, args, { stdio: ["ignore", "pipe", "pipe"] });
    let stdout = "", stderr = "";
    child.stdout!.on("data", (chunk) => (stdout += chunk));
    child.stderr!.on("data", (chunk) => (stderr += chunk));
    const timer = setTimeout(() => {
      child.kill("SIGKILL");
      reject(new Error(`examples/${name} did not exit within ${timeout} ms\n${stdout}\n${stderr}`));
    }, timeout);
    child.on("exit", (code) => {
      clearTimeout(timer);
      resolve({ code, stdout, stderr });
    });
  });
}

test("examples/job_lifecycle.ts: a result, a retry, a cancel, a dead letter, a timeout; exits 0", async () => {
  const { code, stdout, stderr } = await runExample("job_lifecycle.ts");
  assert.equal(code, 0, stderr);
  assert.deepEqual(stdout.trim().split("\n"), [
    "result: 42",
    "retried: fine on try 2",
    "cancelled: cancelled",
    stdout.match(/^dead letter: poison after 3 tries \(w\d cannot digest this\)$/m)?.[0],
    "timed out, then: quick the second time",
    "dead letters: poison",
  ]);
});

test("examples/quick_start.ts: three results from two in-process workers; exits 0", async () => {
  const { code, stdout, stderr } = await runExample("quick_start.ts");
  assert.equal(code, 0, stderr);
  assert.equal(stdout.trim(), "results: [ 2, 4, 6 ]");
});

test("examples/in_process.ts: every job confirmed, a crashed worker's jobs requeued; exits 0", async () => {
  const { code, stdout, stderr } = await runExample("in_process.ts");
  assert.equal(code, 0, stderr);
  assert.match(stdout, /^requeued from \S+: [1-9]\d* jobs$/m);
  assert.match(stdout, /confirmed: 200,/);
});

test("examples/handler.ts: a worker module (workpull worker runs it in tests/cli.test.ts)", async () => {
  const { code, stderr } = await runExample("handler.ts");
  assert.equal(code, 0, stderr);
  const { default: handler } = await import("../examples/handler.ts");
  const delivery = { payload: { n: 21 }, messageId: "m", attempt: 1 };
  const { log } = console;
  console.log = () => {};
  try {
    assert.equal(handler(delivery as never), 42);
    assert.throws(() => handler({ ...delivery, payload: {} } as never), /job m: no number n/);
  } finally {
    console.log = log;
  }
});

const denoOnly = runtime === "deno" ? false : "Deno.serve and Deno.openKv";

test("examples/network_deno.ts: tokens, POST /jobs, workers over WebSockets; exits 0", {
  skip: denoOnly,
}, async () => {
  const { code, stdout, stderr } = await runExample("network_deno.ts");
  assert.equal(code, 0, stderr);
  assert.match(stdout, /^submitted 200 /m);
  assert.equal(stdout.match(/^sending to /gm)?.length, 3);
  assert.match(stdout, /confirmed: 3,/);
});

test("examples/durable_jobs.ts: a stored job outlives its queue and runs after a restart", {
  skip: denoOnly,
}, async () => {
  const { code, stdout, stderr } = await runExample("durable_jobs.ts");
  assert.equal(code, 0, stderr);
  assert.deepEqual(stdout.trim().split("\n"), [
    "after a restart: waiting",
    "result: sent to ada@example.com",
  ]);
});

test("examples/shared_mode.ts: a job added on one instance runs on the other's worker", {
  skip: denoOnly,
}, async () => {
  const { code, stdout, stderr } = await runExample("shared_mode.ts");
  assert.equal(code, 0, stderr);
  assert.deepEqual(stdout.trim().split("\n"), ["result: sent to ada@example.com", "instances: 2"]);
});

test("examples/durable_file_producer.ts: jobs from a source file reach a worker; exits 0", {
  skip: denoOnly,
}, async () => {
  const { code, stdout, stderr } = await runExample("durable_file_producer.ts");
  assert.equal(code, 0, stderr);
  assert.match(stdout, /^sending mail-1 to ada@example\.com$/m);
  assert.match(stdout, /^sending mail-2 to grace@example\.com$/m);
  assert.match(stdout, /^marked as accepted: "mail-1"/m);
});

test("examples/repeating_jobs.ts: two heartbeats a second apart, then each schedule's next run; exits 0", async () => {
  const { code, stdout, stderr } = await runExample("repeating_jobs.ts");
  assert.equal(code, 0, stderr);
  const lines = stdout.trim().split("\n");
  assert.equal(lines.length, 4, stdout);
  const beats = lines.slice(0, 2).map((line) =>
    Date.parse(line.match(/^heartbeat: heartbeat@(\S+)$/)![1])
  );
  assert.equal(beats[1] - beats[0], 1000, stdout);
  assert.match(lines[2], /^next heartbeat: heartbeat@\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z$/);
  assert.match(lines[3], /^next nightly: nightly@\d{4}-\d\d-\d\dT0[12]:00:00\.000Z$/);
});

test("every example has a test here, and every README TypeScript block is an example", () => {
  const here = readFileSync(new URL(import.meta.url), "utf8");
  const examples = readdirSync(new URL("../examples/", import.meta.url))
    .filter((name) => name.endsWith(".ts"));
  for (const name of examples) {
    assert.ok(here.includes(`runExample("${name}"`), `examples/${name} is run by a test`);
  }
  const readme = readFileSync(new URL("../README.md", import.meta.url), "utf8");
  const blocks = [...readme.matchAll(/^```(\S*)[^\n]*\n([\s\S]*?)^```$/gm)];
  assert.ok(blocks.length > 0);
  for (const [, language, body] of blocks) {
    assert.ok(
      ["ts", "sh", "text"].includes(language),
      `a README block in ${language || "no language"}`,
    );
    if (language !== "ts") continue;
    const [first, ...rest] = body.split("\n");
    const name = first.match(/^\/\/ (examples\/\w+\.ts)$/)?.[1];
    assert.ok(name, `a README TypeScript block names its example on its first line: ${first}`);
    const file = readFileSync(new URL(`../${name}`, import.meta.url), "utf8");
    // The file is its module comment, then the block's code.
    const code = file.replace(/^\/\*\*[\s\S]*?\*\/\n\n/, "");
    assert.equal(rest.join("\n"), code, `the README block is ${name}, word for word`);
  }
});
