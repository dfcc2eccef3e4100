/**
 * The examples run to completion (they exit by themselves) and print what they promise, on the
 * runtime running the tests.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
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
