#!/usr/bin/env node
// The whole test suite: Deno (the first runtime), Bun (the second), Node (the tests that need no
// Deno or Bun API), each writing a JUnit file, then one summary line "N passed, M failed".
// Usage: node scripts/test.mjs [--deno-only|--bun-only|--node-only]
//
// Node runs this script because a fresh machine has Node; Deno and Bun come pinned from npm
// (node_modules/.bin) after `npm ci`.

import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const bin = (name) => join(root, "node_modules", ".bin", name);
const out = join(root, ".tmp", "test-results");
rmSync(out, { recursive: true, force: true });
mkdirSync(out, { recursive: true });

const only = process.argv[2];
const RUNNER_TIMEOUT_MS = 8 * 60_000;
const suites = [
  {
    name: "deno",
    command: bin("deno"),
    args: ["test", "-A", "--unstable-kv", `--junit-path=${join(out, "deno.xml")}`, "tests/"],
    file: join(out, "deno.xml"),
  },
  {
    name: "bun",
    command: bin("bun"),
    args: [
      "test",
      "--timeout=120000",
      "--reporter=junit",
      `--reporter-outfile=${join(out, "bun.xml")}`,
      "tests/",
    ],
    file: join(out, "bun.xml"),
  },
  {
    name: "node",
    // Node 20 cannot run TypeScript: Bun bundles the tests that run on Node (the Deno KV adapter
    // on npm @deno/kv, the file-backed producer example) into JavaScript first.
    prepare: [bin("bun"), [
      "build",
      "tests/deno_kv_queue.test.ts",
      "tests/durable_file_producer.test.ts",
      "--target=node",
      `--outdir=${join(out, "node")}`,
      "--external=@deno/kv",
    ]],
    command: process.execPath,
    args: [
      "--test",
      "--test-reporter=junit",
      `--test-reporter-destination=${join(out, "node.xml")}`,
      join(out, "node"),
    ],
    file: join(out, "node.xml"),
  },
].filter((suite) => !only || only === `--${suite.name}-only`);

/** Count test cases in a JUnit file: passed, failed (failures + errors), skipped. */
function count(xml) {
  const cases = xml.match(/<testcase\b[\s\S]*?(?:\/>|<\/testcase>)/g) ?? [];
  let passed = 0, failed = 0, skipped = 0;
  for (const testcase of cases) {
    if (/<(failure|error)\b/.test(testcase)) failed++;
    else if (/<skipped\b/.test(testcase)) skipped++;
    else passed++;
  }
  return { passed, failed, skipped };
}

let passed = 0, failed = 0, skipped = 0;

// Static checks count as one test each: formatting, lint, types (also against a lib without the
// Deno namespace for the core), public API docs, and the JSDoc examples run as tests.
const checks = only ? [] : [
  ["deno fmt --check", ["fmt", "--check"]],
  ["deno lint", ["lint"]],
  ["deno task check", ["task", "check"]],
  ["deno doc --lint", ["task", "doc-lint"]],
  ["deno test --doc", ["task", "doc-test"]],
];
if (checks.length > 0) console.log("=== static checks ===");
for (const [name, args] of checks) {
  const result = spawnSync(bin("deno"), args, { cwd: root, encoding: "utf8", env: process.env });
  if (result.status === 0) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(
      `FAIL ${name}\n${(result.stdout + result.stderr).split("\n").slice(-40).join("\n")}`,
    );
  }
}

for (const suite of suites) {
  console.log(`\n=== ${suite.name} tests ===`);
  const started = Date.now();
  if (suite.prepare) {
    spawnSync(suite.prepare[0], suite.prepare[1], {
      cwd: root,
      stdio: "inherit",
      env: process.env,
    });
  }
  // Deno ignores node:test's per-test timeout, so a hung test would hang CI: bound each runner.
  const result = spawnSync(suite.command, suite.args, {
    cwd: root,
    stdio: "inherit",
    env: process.env,
    timeout: RUNNER_TIMEOUT_MS,
    killSignal: "SIGKILL",
  });
  if (result.error?.code === "ETIMEDOUT") {
    console.log(`${suite.name}: killed after ${RUNNER_TIMEOUT_MS / 60_000} minutes`);
  }
  const seconds = ((Date.now() - started) / 1000).toFixed(0);
  if (!existsSync(suite.file)) {
    console.log(
      `${suite.name}: no report (exit ${result.status ?? result.signal}); counted as 1 failure`,
    );
    failed += 1;
    continue;
  }
  const counts = count(readFileSync(suite.file, "utf8"));
  // A runner that exits non-zero with no failing case (a crash, an unhandled error) still fails.
  if (result.status !== 0 && counts.failed === 0) counts.failed = 1;
  console.log(
    `${suite.name}: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped (${seconds} s)`,
  );
  passed += counts.passed;
  failed += counts.failed;
  skipped += counts.skipped;
}
if (skipped > 0) console.log(`(${skipped} skipped)`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
