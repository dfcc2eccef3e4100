/**
 * The npm and JSR manifests agree (`scripts/manifest.mjs`): one version (package.json's; deno.json
 * has none and `scripts/publish_jsr.mjs` passes it to `deno publish`), one list of entry points,
 * one license, and a `bin` exactly when there is a CLI. The checker is tested on copies that
 * drift, so it can fail.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { cpSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { manifestProblems } from "../scripts/manifest.mjs";

const root = new URL("..", import.meta.url).pathname;

/**
 * A copy of the manifests (and the LICENSE, and cli.ts when there is one: `bin` follows it) in a
 * temporary directory, changed by `edit`.
 */
function drifted(edit: (dir: string) => void): string[] {
  const dir = mkdtempSync(join(tmpdir(), "workpull-manifest-"));
  try {
    for (const file of ["package.json", "deno.json", "LICENSE", "cli.ts"]) {
      if (existsSync(join(root, file))) cpSync(join(root, file), join(dir, file));
    }
    edit(dir);
    return manifestProblems(dir);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function editJson(dir: string, file: string, change: (json: Record<string, unknown>) => void) {
  const path = join(dir, file);
  const json = JSON.parse(readFileSync(path, "utf8"));
  change(json);
  writeFileSync(path, JSON.stringify(json));
}

test("the repository's npm and JSR manifests agree", () => {
  assert.deepEqual(manifestProblems(root), []);
});

test("a second version, in deno.json, is refused", () => {
  const problems = drifted((dir) => editJson(dir, "deno.json", (json) => (json.version = "9.9.9")));
  assert.equal(problems.length, 1);
  assert.match(problems[0], /deno\.json: must not have a "version"/);
});

test("an entry point missing from npm or from JSR's include list is refused", () => {
  const problems = drifted((dir) => {
    editJson(dir, "deno.json", (json) => {
      (json.exports as Record<string, string>)["./extra"] = "./extra.ts";
    });
  });
  assert.deepEqual(problems.map((problem) => problem.split(":")[0]), [
    "package.json",
    "deno.json",
  ]);
  assert.match(problems[0], /"exports" must be .*"\.\/extra":\{"types":"\.\/dist\/extra\.d\.ts"/);
  assert.match(problems[1], /"publish\.include" must list \.\/extra\.ts/);
});

test("a bin without a CLI, a CLI without a bin, a private package, a missing license are refused", () => {
  const problems = drifted((dir) => {
    editJson(dir, "package.json", (json) => {
      json.bin = { workpull: "dist/cli.js" };
      json.private = true;
    });
    rmSync(join(dir, "LICENSE"));
    rmSync(join(dir, "cli.ts"), { force: true });
  });
  assert.deepEqual(problems.sort(), [
    "LICENSE: must exist and hold the MIT License",
    'package.json: "bin" must be absent while there is no cli.ts',
    'package.json: must not be "private"',
  ]);
  const unbuilt = drifted((dir) => {
    writeFileSync(join(dir, "cli.ts"), "");
    editJson(dir, "package.json", (json) => delete json.bin);
  });
  assert.deepEqual(unbuilt, [
    'package.json: "bin" must be { "workpull": "dist/cli.js" }: run npm run build',
  ]);
});
