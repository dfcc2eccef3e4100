/**
 * `npm run cli -- serve` ends with npm: npm's SIGTERM reaches the server, which drains and exits,
 * and a server whose npm was SIGKILLed notices and exits too, instead of listening on with
 * nobody to stop it. Real npm, real processes, real signals (run on Deno only: one runtime is
 * enough for npm's wrapper).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import process from "node:process";
import { runtime, SECRET, waitFor, within } from "./fixtures/net_support.ts";

const ROOT = new URL("..", import.meta.url).pathname;

/** `npm run cli -- serve` on port 0, and the pid of the server process under it. */
async function npmServe(): Promise<{ npm: ChildProcess; server: number; exited: Promise<void> }> {
  const npm = spawn("npm", ["run", "-s", "cli", "--", "serve", "--port", "0", "--memory"], {
    cwd: ROOT,
    env: { ...process.env, WORKPULL_SECRET: SECRET },
    stdio: ["ignore", "pipe", "pipe"],
  });
  let out = "";
  npm.stdout!.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
  npm.stderr!.setEncoding("utf8").on("data", (chunk: string) => (out += chunk));
  const exited = new Promise<void>((resolve) => npm.on("exit", () => resolve()));
  await waitFor(() => /^listening on /m.test(out), () => `the server to listen\n${out}`, 60_000);
  const children = execFileSync("ps", ["-o", "pid=,args=", "--ppid", String(npm.pid)], {
    encoding: "utf8",
  }).trim().split("\n");
  const line = children.find((entry) => entry.includes("cli.ts serve"));
  assert.ok(line, `the server is npm's own child (the script execs it): ${children.join("; ")}`);
  return { npm, server: Number(line.trim().split(/\s+/)[0]), exited };
}

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

test("npm run cli -- serve: npm's SIGTERM drains the server, and npm's SIGKILL ends it too", {
  skip: runtime !== "deno" ? "npm's wrapper is tested once, on Deno" : false,
  timeout: 120_000,
}, async () => {
  const first = await npmServe();
  try {
    first.npm.kill("SIGTERM");
    await within(first.exited, "npm to exit", 30_000);
    await waitFor(() => !alive(first.server), "the server to exit after npm's SIGTERM", 30_000);
  } finally {
    if (alive(first.server)) process.kill(first.server, "SIGKILL");
  }
  const second = await npmServe();
  try {
    second.npm.kill("SIGKILL");
    await within(second.exited, "npm to die", 10_000);
    await waitFor(() => !alive(second.server), "the orphaned server to exit", 30_000);
  } finally {
    if (alive(second.server)) process.kill(second.server, "SIGKILL");
  }
  assert.ok(!alive(first.server) && !alive(second.server));
});
