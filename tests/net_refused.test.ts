/**
 * A worker the server refuses learns why and stops, instead of retrying as if the server were
 * down: `connectWorker` asks with a plain GET when its upgrade fails, a lasting refusal stops the
 * endpoint with an `upgrade-refused` event, an expired token is asked of the token function
 * again, and `workpull worker` exits 3 with one line naming the reason. The server logs each kind
 * of refusal once a minute. Real sockets on loopback, on the runtime running the test.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connectWorker, type UpgradeRefusedEvent } from "../client.ts";
import { signToken } from "../server.ts";
import { CliProcess, runCli } from "./fixtures/cli_support.ts";
import { SECRET, startFlow, waitFor, within } from "./fixtures/net_support.ts";

const HANDLER = new URL("../examples/handler.ts", import.meta.url).pathname;
const OTHER_SECRET = "another-secret-0123456789-abcdefghijklmnopqrstuvwxyz";
const HOUR = 3_600_000;

/** Tokens the server of flow `jobs` (signed with `SECRET`) refuses, by the reason it gives. */
async function refusedTokens(): Promise<Record<string, string>> {
  return {
    "bad-signature": await signToken(OTHER_SECRET, {
      producer: "jobs",
      worker: "w",
      expiresIn: HOUR,
    }),
    "expired": await signToken(SECRET, {
      producer: "jobs",
      worker: "w",
      expiresIn: 1000,
      now: Date.now() - HOUR,
    }),
    "wrong-producer": await signToken(SECRET, { producer: "other", worker: "w", expiresIn: HOUR }),
    "wrong-kind": await signToken(SECRET, { producer: "jobs", expiresIn: HOUR }),
  };
}

test("connectWorker stops with the server's reason when its upgrade is refused for good", {
  timeout: 60_000,
}, async () => {
  const lines: string[] = [];
  const logger = {
    error() {},
    warn() {},
    info: (message: string) => void lines.push(message),
    debug() {},
  };
  const flow = await startFlow({}, { basePath: "/flows/jobs", logger });
  try {
    const tokens = await refusedTokens();
    const cases: [string, string, string | undefined][] = [
      ...Object.entries(tokens).map(([reason, token]) =>
        [reason, "jobs", token] as [
          string,
          string,
          string,
        ]
      ),
      ["missing-token", "jobs", undefined],
      ["unknown-flow", "nope", await flow.token("w")],
    ];
    for (const [reason, flowName, token] of cases) {
      const url = new URL(`/flows/${flowName}/workers`, flow.server.url);
      const connection = connectWorker({
        url,
        token,
        producer: "jobs",
        name: "w",
        drainOnSignals: false,
        handler: () => {},
      });
      const refused = await within(
        new Promise<UpgradeRefusedEvent>((resolve) =>
          connection.addEventListener("upgrade-refused", resolve)
        ),
        `the ${reason} refusal`,
        5_000,
      );
      assert.equal(refused.error.reason, reason);
      assert.equal(refused.error.status, reason === "unknown-flow" ? 404 : 401);
      assert.match(refused.error.message, new RegExp(reason));
      assert.ok(connection.endpoints[0].closed, "the endpoint stopped");
      await connection.close();
    }
    // One line for each kind, though the same refusals come again within the minute.
    const again = connectWorker({
      url: flow.server.workersUrl,
      token: tokens["bad-signature"],
      producer: "jobs",
      name: "w",
      drainOnSignals: false,
      handler: () => {},
    });
    await within(
      new Promise((resolve) => again.addEventListener("upgrade-refused", resolve)),
      "the second refusal",
      5_000,
    );
    await again.close();
    const refusals = lines.filter((line) => line.startsWith("refused"));
    for (const reason of ["bad-signature", "expired", "wrong-producer", "wrong-kind"]) {
      const of = refusals.filter((line) => line.includes(`: ${reason}`));
      assert.equal(of.length, 1, `${reason}:\n${refusals.join("\n")}`);
      assert.match(of[0], /refused a worker's upgrade from 127\.0\.0\.1: /);
    }
    assert.equal(refusals.filter((line) => line.includes("unknown-flow")).length, 1);
  } finally {
    await flow.close();
  }
});

test("an expired token is asked of the token function again, and a fresh one connects", {
  timeout: 60_000,
}, async () => {
  const flow = await startFlow();
  try {
    const { expired } = await refusedTokens();
    const asked: string[] = [];
    const connection = connectWorker({
      url: flow.server.workersUrl,
      token: async () => {
        const token = asked.length === 0 ? expired : await flow.token("w");
        asked.push(token);
        return token;
      },
      producer: "jobs",
      name: "w",
      drainOnSignals: false,
      handler: () => {},
    });
    const stopped: UpgradeRefusedEvent[] = [];
    connection.addEventListener("upgrade-refused", (event) => stopped.push(event));
    await waitFor(() => connection.endpoints[0].live, "the endpoint to register", 10_000);
    assert.equal(asked[0], expired);
    assert.equal(asked.length, 2);
    assert.deepEqual(stopped, []);
    await connection.close();

    // A function that has nothing fresher stops on the second expiry.
    const stale = connectWorker({
      url: flow.server.workersUrl,
      token: () => expired,
      producer: "jobs",
      name: "w2",
      drainOnSignals: false,
      handler: () => {},
    });
    const refused = await within(
      new Promise<UpgradeRefusedEvent>((resolve) =>
        stale.addEventListener("upgrade-refused", resolve)
      ),
      "the stale token's refusal",
      5_000,
    );
    assert.equal(refused.error.reason, "expired");
    await stale.close();
  } finally {
    await flow.close();
  }
});

test("a server that is down is retried, not refused", { timeout: 30_000 }, async () => {
  const flow = await startFlow();
  const url = flow.server.workersUrl;
  await flow.close();
  const connection = connectWorker({
    url,
    token: await signToken(SECRET, { producer: "jobs", worker: "w", expiresIn: HOUR }),
    producer: "jobs",
    name: "w",
    drainOnSignals: false,
    backoff: { initial: 20, max: 50 },
    handler: () => {},
  });
  const retries: number[] = [];
  let refused = false;
  connection.addEventListener("disconnected", (event) => {
    if (event.retryIn !== undefined) retries.push(event.retryIn);
  });
  connection.addEventListener("upgrade-refused", () => (refused = true));
  await waitFor(() => retries.length >= 3, "three retries", 10_000);
  assert.equal(refused, false);
  assert.equal(connection.endpoints[0].closed, false);
  await connection.close();
});

test("workpull worker exits 3 within 5 s when the server refuses its credential", {
  timeout: 120_000,
}, async () => {
  const cwd = mkdtempSync(join(tmpdir(), "workpull-refused-"));
  const flow = await startFlow({}, { basePath: "/flows/jobs" });
  try {
    const tokens = await refusedTokens();
    // A client token the command refuses itself, before it connects (exit 2, usage).
    const client = await runCli(
      ["worker", "--url", flow.server.url.href, "--token", tokens["wrong-kind"], HANDLER],
      { cwd, env: { WORKPULL_SECRET: "", WORKPULL_TOKEN: "" } },
    );
    assert.equal(client.code, 2, client.stderr);
    assert.match(client.stderr, /--token is a client token; a worker needs a worker token/);
    const cases: [string, string[]][] = [
      ...Object.entries(tokens).filter(([reason]) => reason !== "wrong-kind").map((
        [reason, token],
      ) => [reason, ["--token", token]] as [string, string[]]),
      ["unknown-flow", ["--flow", "nope", "--token", await flow.token("w")]],
    ];
    const runs = cases.map(async ([reason, flags]) => {
      const child = new CliProcess(
        ["worker", "--url", flow.server.url.href, ...flags, HANDLER],
        { cwd, env: { WORKPULL_SECRET: "", WORKPULL_TOKEN: "" } },
      );
      try {
        // From the moment it starts pulling (the runtime's own start-up is not the worker's).
        await waitFor(() => /pulls flow/.test(child.stderr), () => child.stderr, 60_000);
        const started = performance.now();
        const code = await within(child.exited, `the ${reason} worker to exit`, 5_000);
        return { reason, code, stderr: child.stderr, took: performance.now() - started };
      } finally {
        await child.kill();
      }
    });
    for (const { reason, code, stderr, took } of await Promise.all(runs)) {
      assert.equal(code, 3, `${reason}: ${stderr}`);
      const last = stderr.trim().split("\n").pop()!;
      if (reason === "unknown-flow") {
        assert.match(last, /serves no flow nope \(404\); check --flow and --url/);
      } else {
        assert.match(last, new RegExp(`the server refused the worker token: ${reason}`));
        assert.match(last, /token --flow jobs --worker w/);
      }
      assert.ok(took < 5_000, `${reason} took ${took} ms`);
    }
  } finally {
    await flow.close();
    rmSync(cwd, { recursive: true, force: true });
  }
});

test("workpull submit to a server that is down says so at once, retries, then exits 3", {
  timeout: 60_000,
}, async () => {
  const cwd = mkdtempSync(join(tmpdir(), "workpull-down-"));
  const flow = await startFlow();
  const url = flow.server.url.href;
  await flow.close();
  try {
    const run = await runCli(["submit", "--url", url, "--retry-for", "3s", '{"n":1}'], {
      cwd,
      env: { WORKPULL_SECRET: SECRET },
    });
    assert.equal(run.code, 3, run.stderr);
    const lines = run.stderr.trim().split("\n");
    assert.match(lines[0], /^cannot reach .*; retrying for 3 s \(--retry-for\), Ctrl-C to stop$/);
    assert.match(lines.at(-1)!, /^error: cannot reach .*\(is the server running\? .* serve\)$/);
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
});
