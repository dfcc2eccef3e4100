#!/usr/bin/env node
// The whole test suite: Deno (the first runtime), Bun (the second), Node (the network tests with
// a Node controller and Node workers, the npm package, the Deno KV adapter on npm @deno/kv),
// each writing a JUnit file, then one summary line "N passed, M failed".
// Usage: node scripts/test.mjs [--deno-only|--bun-only|--node-only]
//
// Node runs this script because a fresh machine has Node; Deno, Bun and Node 22 come pinned from
// npm (node_modules/.bin) after `npm ci`.

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

/** The test files the Node suite runs (the others use Deno or Bun APIs, or test pure logic). */
const NODE_TESTS = [
  "net_workers.test.ts", // worker processes: SIGKILL, SIGSTOP (silence), reconnects, backpressure
  "net_security.test.ts", // authentication over real sockets
  "net_fuzz.test.ts",
  "net_auth.test.ts",
  "net_jobs.test.ts", // job queue routes on Node
  "net_serve_apps.test.ts", // several flows on one port
  "net_lifecycle.test.ts", // a job that SIGKILLs Node worker processes ends dead
  "net_client.test.ts",
  "net_browser.test.ts", // a browser tab against a Node controller (CI installs Chromium)
  "net_node.test.ts", // what the Node adapter adds to ws
  "npm_package.test.ts",
  "deno_kv_queue.test.ts", // the Deno KV adapter on npm @deno/kv
  "deno_kv_job_store.test.ts", // the Deno KV job store on npm @deno/kv
  "deno_kv_job_store_model.test.ts", // and against the in-memory store, on npm @deno/kv
  "job_store_conformance.test.ts", // the job store conformance suite, the KV stores on npm @deno/kv
  "job_queue_pause.test.ts", // the pause flag on npm @deno/kv
  "job_queue_schedule.test.ts", // croner and a stored run on npm @deno/kv
  "durable_file_producer.test.ts",
  "metrics.test.ts", // GET /metrics on the Node adapter
  "dashboard.test.ts", // the live stream (server-sent events) through @hono/node-server
  "dashboard_browser.test.ts", // the dashboard in Chromium, served by Node (CI installs Chromium)
  "cli.test.ts", // the workpull command on Node (as installed from npm): serve, worker, submit
  "graceful_close.test.ts", // a drain keeps its job: in process, over ws, a SIGTERMed worker
  "net_refused.test.ts", // a refused worker learns why and stops; the server logs it
  "net_hostile_pinned.test.ts", // non-reading sockets dropped, slow heads and bodies cut
];
/** How Node 22 runs TypeScript (tests/fixtures/net_support.ts spawns workers the same way). */
const NODE_TS_FLAGS = ["--experimental-transform-types", "--no-warnings"];
const RUNNER_TIMEOUT_MS = 12 * 60_000;
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
    // Node 22 (pinned from npm: the machine's Node may be older) runs the TypeScript sources with
    // its type stripping: the tests that exercise Node itself, with a Node controller and Node
    // worker processes, and the npm package built, packed, installed and run.
    command: bin("node"),
    args: [
      ...NODE_TS_FLAGS,
      "--test",
      "--test-reporter=junit",
      `--test-reporter-destination=${join(out, "node.xml")}`,
      ...NODE_TESTS.map((file) => join("tests", file)),
    ],
    // The package test runs one worker on the Node that runs this script (Node 20 here).
    env: { WORKPULL_HOST_NODE: process.execPath },
    file: join(out, "node.xml"),
  },
].filter((suite) => !only || only === `--${suite.name}-only`);

/** The test cases of a JUnit file, each as its XML text. */
function testcases(xml) {
  return xml.match(/<testcase\b[\s\S]*?(?:\/>|<\/testcase>)/g) ?? [];
}

/** Count test cases: passed, failed (failures + errors), skipped. */
function count(cases) {
  let passed = 0, failed = 0, skipped = 0;
  for (const testcase of cases) {
    if (/<(failure|error)\b/.test(testcase)) failed++;
    else if (/<skipped\b/.test(testcase)) skipped++;
    else passed++;
  }
  return { passed, failed, skipped };
}

/** Each failing case: its name and the first lines of its failure message. */
function failures(cases) {
  const decode = (text) =>
    text.replace(/&#(\d+);/g, (_, code) => String.fromCharCode(Number(code)))
      .replace(/&lt;/g, "<").replace(/&gt;/g, ">").replace(/&quot;/g, '"')
      .replace(/&apos;/g, "'").replace(/&amp;/g, "&");
  const found = [];
  for (const testcase of cases) {
    const failure = testcase.match(/<(?:failure|error)\b[^>]*?message="([^"]*)"/);
    if (!failure) continue;
    const name = decode(testcase.match(/\bname="([^"]*)"/)?.[1] ?? "?");
    const message = decode(failure[1]).trim().split("\n").slice(0, 12).join("\n    ");
    found.push(`${name}\n    ${message}`);
  }
  return found;
}

let passed = 0, failed = 0, skipped = 0;
/** The failing cases, repeated at the end where a log's tail shows them. */
const failing = [];

// Static checks count as one test each: formatting, lint, types (also against a lib without the
// Deno namespace for the core), public API docs, the JSDoc examples run as tests, the package
// manifests agreeing (one version, one list of entry points), and JSR accepting the package
// (`deno publish --dry-run`, which needs no network).
const deno = (args) => [bin("deno"), args];
const script = (file, args = []) => [process.execPath, [join("scripts", file), ...args]];
const checks = only ? [] : [
  ["deno fmt --check", deno(["fmt", "--check"])],
  ["deno lint", deno(["lint"])],
  ["deno task check", deno(["task", "check"])],
  ["deno doc --lint", deno(["task", "doc-lint"])],
  ["deno test --doc", deno(["task", "doc-test"])],
  ["package manifests", script("manifest.mjs")],
  ["deno publish --dry-run", script("publish_jsr.mjs", ["--dry-run", "--allow-dirty"])],
];
if (checks.length > 0) console.log("=== static checks ===");
for (const [name, [command, args]] of checks) {
  const result = spawnSync(command, args, { cwd: root, encoding: "utf8", env: process.env });
  if (result.status === 0) {
    passed++;
    console.log(`ok   ${name}`);
  } else {
    failed++;
    console.log(
      `FAIL ${name}\n${(result.stdout + result.stderr).split("\n").slice(-40).join("\n")}`,
    );
    failing.push(`static check: ${name}`);
  }
}

for (const suite of suites) {
  console.log(`\n=== ${suite.name} tests ===`);
  const started = Date.now();
  // Deno ignores node:test's per-test timeout, so a hung test would hang CI: bound each runner.
  const result = spawnSync(suite.command, suite.args, {
    cwd: root,
    stdio: "inherit",
    env: { ...process.env, ...suite.env },
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
    failing.push(`${suite.name}: no report (exit ${result.status ?? result.signal})`);
    continue;
  }
  const cases = testcases(readFileSync(suite.file, "utf8"));
  const counts = count(cases);
  for (const failure of failures(cases)) failing.push(`${suite.name}: ${failure}`);
  // A runner that exits non-zero with no failing case (a crash, an unhandled error) still fails.
  if (result.status !== 0 && counts.failed === 0) counts.failed = 1;
  console.log(
    `${suite.name}: ${counts.passed} passed, ${counts.failed} failed, ${counts.skipped} skipped (${seconds} s)`,
  );
  passed += counts.passed;
  failed += counts.failed;
  skipped += counts.skipped;
}
if (failing.length > 0) console.log(`\nFailed:\n${failing.map((f) => `- ${f}`).join("\n")}`);
if (skipped > 0) console.log(`(${skipped} skipped)`);
console.log(`${passed} passed, ${failed} failed`);
process.exit(failed > 0 ? 1 : 0);
