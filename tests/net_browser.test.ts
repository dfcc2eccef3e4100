/**
 * The worker client in a real browser tab: the client bundled for the browser (esbuild), loaded
 * by headless Chromium, joins the pool over a real loopback WebSocket with its token in the
 * subprotocol list (a browser cannot set headers) and completes jobs. Skipped when Chromium is
 * not installed (CI installs it).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { startFlow, waitFor, within } from "./fixtures/net_support.ts";

const root = new URL("..", import.meta.url).pathname;
const chromium = ["chromium", "chromium-browser", "google-chrome"].find((name) =>
  spawnSync("which", [name]).status === 0
);

/** The browser page's script: the client bundle plus a worker that reads its config from the URL. */
function bundle(): string {
  const entry = `
    import { connectWorker } from ${JSON.stringify(`${root}client.ts`)};
    const config = JSON.parse(decodeURIComponent(location.hash.slice(1)));
    const worker = connectWorker({
      ...config,
      handler: async ({ payload }) => {
        // Real work in the tab: hash the payload with Web Crypto.
        await crypto.subtle.digest("SHA-256", new TextEncoder().encode(JSON.stringify(payload)));
      },
    });
    worker.addEventListener("connected", () => (document.title = "connected"));
  `;
  const result = spawnSync(
    `${root}node_modules/.bin/esbuild`,
    ["--bundle", "--format=iife", "--platform=browser", "--minify", "--loader=ts"],
    { input: entry, encoding: "utf8", cwd: root },
  );
  if (result.status !== 0) throw new Error(`esbuild failed: ${result.stderr}`);
  return result.stdout;
}

test("a browser tab joins the pool with its token in the subprotocol list", {
  timeout: 60_000,
  // Outside CI a missing Chromium skips the test; in CI (which installs it) it is a failure.
  skip: chromium || process.env.CI ? false : "Chromium is not installed",
}, async () => {
  assert.ok(chromium, "Chromium is not installed (CI must install Debian's chromium)");
  const flow = await startFlow();
  const dir = mkdtempSync(join(tmpdir(), "workpull-browser-"));
  const page = join(dir, "index.html");
  writeFileSync(page, `<!doctype html><title>worker</title><script>${bundle()}</script>`);
  const config = {
    url: flow.server.workersUrl.href,
    token: await flow.token("tab"),
    producer: "jobs",
    name: "tab",
    concurrency: 2,
  };
  const browser = spawn(chromium!, [
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    // This machine's network is closed: without these Chromium keeps calling out at start.
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
    `--user-data-dir=${join(dir, "profile")}`,
    `file://${page}#${encodeURIComponent(JSON.stringify(config))}`,
  ], {
    detached: true,
    stdio: "ignore",
    // Chromium puts its singleton socket in a directory of TMPDIR; killed, it cannot remove it.
    env: { ...process.env, TMPDIR: dir },
  });
  const exited = new Promise((resolve) => browser.on("exit", resolve));
  try {
    await waitFor(
      () => flow.of("worker-bound").length === 2,
      "the tab's two endpoints to bind",
      30_000,
    );
    assert.deepEqual(flow.of("worker-bound").map((e) => e.worker).sort(), ["tab#1", "tab#2"]);
    const { confirmed } = flow.submit(200);
    await within(confirmed, "200 jobs confirmed by the browser tab", 30_000);
    const workers = flow.controller.stats().workers;
    assert.equal(workers.reduce((sum, w) => sum + w.confirmed, 0), 200);
    assert.deepEqual(flow.net, [], "no request was refused");
  } finally {
    try {
      process.kill(-browser.pid!, "SIGKILL"); // the whole process group: Chromium forks helpers
    } catch {
      // Already gone.
    }
    await within(exited, "Chromium to exit");
    await flow.close();
    rmSync(dir, { recursive: true, force: true });
  }
});
