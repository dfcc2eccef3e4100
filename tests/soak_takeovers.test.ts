/**
 * The soak's wait for the takeovers of killed instances (`tools/soak/takeovers.ts`), on journals
 * written as the test goes: it ends when the last kill has a later takeover of that instance, and
 * runs out of time, reporting what is still pending, when one never comes. Runs under Deno and
 * Bun (it reads files with `node:fs` only).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync, mkdirSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { SoakPaths } from "../tools/soak/records.ts";
import { awaitTakeovers } from "../tools/soak/takeovers.ts";

function journals(): { paths: SoakPaths; write: (file: string, record: object) => void } {
  const paths = new SoakPaths(mkdtempSync(join(tmpdir(), "workpull-takeovers-")));
  mkdirSync(paths.controllers, { recursive: true });
  const write = (file: string, record: object) =>
    appendFileSync(file, JSON.stringify(record) + "\n");
  // Instance i1 (pid 11) killed at 1,000 and restarted as pid 21; i2 (pid 12) survives it.
  write(join(paths.controllers, "11.jsonl"), { ev: "ready", pid: 11, instance: "i1-a", t: 10 });
  write(join(paths.controllers, "12.jsonl"), { ev: "ready", pid: 12, instance: "i2-a", t: 10 });
  write(paths.soak, { ev: "fault", kind: "instance-kill", target: "i1", pid: 11, t: 1_000 });
  write(join(paths.controllers, "21.jsonl"), { ev: "ready", pid: 21, instance: "i1-b", t: 1_100 });
  return { paths, write };
}

test("the soak waits for a killed instance's takeover, and no longer", async () => {
  const { paths, write } = journals();
  try {
    const lines: string[] = [];
    const waited = awaitTakeovers(paths, 30_000, new AbortController().signal, (line) => {
      lines.push(line);
      // Seen waiting: the survivor takes i1 over now (an earlier takeover of it does not count).
      write(join(paths.controllers, "12.jsonl"), { ev: "takeover", pid: 12, of: "i1-a", t: 900 });
      write(join(paths.controllers, "12.jsonl"), { ev: "takeover", pid: 12, of: "i1-a", t: 3_500 });
    });
    const result = await waited;
    assert.equal(result.pending, 0);
    assert.deepEqual(lines, ["drain: waiting for 1 killed instances to be taken over"]);
  } finally {
    rmSync(paths.out, { recursive: true, force: true });
  }
});

test("the soak's wait for takeovers ends at its deadline with the kills still pending", async () => {
  const { paths, write } = journals();
  try {
    // A takeover of another instance, and one of i1 from before its kill: neither is i1's.
    write(join(paths.controllers, "11.jsonl"), { ev: "takeover", pid: 11, of: "i2-a", t: 1_200 });
    write(join(paths.controllers, "12.jsonl"), { ev: "takeover", pid: 12, of: "i1-a", t: 900 });
    const result = await awaitTakeovers(paths, 300, new AbortController().signal, () => {});
    assert.equal(result.pending, 1);
    assert.ok(result.ms >= 300);
  } finally {
    rmSync(paths.out, { recursive: true, force: true });
  }
});
