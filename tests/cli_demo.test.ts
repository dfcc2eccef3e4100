/**
 * `workpull demo` with small numbers, as a real process on the runtime running the test (its
 * server on the same runtime, its workers on Deno and Bun): a worker SIGKILLed, the server
 * SIGKILLed and restarted on the same KV file, and a last line that counts what the handlers
 * ran: nothing lost. Everything it started is gone afterwards, and so is its directory.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { runCli } from "./fixtures/cli_support.ts";

test("the demo kills a worker and restarts the server, and loses no job", {
  timeout: 180_000,
}, async () => {
  const cwd = mkdtempSync(join(tmpdir(), "workpull-demo-"));
  try {
    const { code, stdout, stderr } = await runCli(["demo", "--jobs", "300", "--workers", "3"], {
      cwd,
      timeout: 150_000,
    });
    assert.equal(code, 0, `${stdout}\n${stderr}`);
    const lines = stdout.trim().split("\n");
    assert.match(lines[0], /^workpull demo: 300 jobs, 3 worker processes \(2 on Deno, 1 on Bun\)/);
    assert.match(stdout, /^\[4\] killed worker demo-bun-2 with SIGKILL/m);
    assert.match(stdout, /^\[5\] killed the server with SIGKILL .* starting it again on /m);
    assert.match(stdout, /^ {4}back in \d+\.\d s \(pid \d+\)/m);
    const last = lines.at(-1)!;
    assert.match(
      last,
      /^demo: 300 jobs submitted, run 300, lost 0, duplicated \d+ \(\d+ handler runs/,
    );
    const runs = Number(last.match(/\((\d+) handler runs/)![1]);
    const duplicated = Number(last.match(/duplicated (\d+)/)![1]);
    assert.ok(runs >= 300 + duplicated, last);
    const left = existsSync(join(cwd, ".workpull")) ? readdirSync(join(cwd, ".workpull")) : [];
    assert.deepEqual(left, [], "the demo directory is removed");
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
});
