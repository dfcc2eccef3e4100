/**
 * The dashboard in a real browser: headless Chromium (Debian's, driven by `playwright-core`)
 * opens the page served by the app on a real loopback server, refuses a worker token, logs in
 * with a client token (kept for the tab across a reload), shows the workers of a real worker
 * connected over a real loopback WebSocket, follows the jobs as they run (counts, totals, the
 * throughput chart), its retry button brings a dead letter back to life (the job runs again and
 * completes), and its pause button pauses and resumes the queue. A screenshot is saved under
 * `tests/.artifacts/`.
 *
 * Skipped when Chromium is not installed (CI installs it: there a missing one fails).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, statSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { JobQueue, MemoryJobStore } from "../mod.ts";
import { signToken } from "../server.ts";
import { connectWorker } from "../client.ts";
import { runtime, SECRET, serve } from "./fixtures/net_support.ts";
import { waitFor } from "./support/waiting.ts";

const root = new URL("..", import.meta.url).pathname;
/** Debian's Chromium: on PATH, or where Debian puts it. */
const chromium = ["chromium", "chromium-browser", "google-chrome"]
  .map((name) => spawnSync("which", [name], { encoding: "utf8" }))
  .find((found) => found.status === 0)?.stdout.trim() ??
  (existsSync("/usr/bin/chromium") ? "/usr/bin/chromium" : undefined);

test("the dashboard in Chromium: login, live updates as jobs run, a dead letter retried", {
  timeout: 120_000,
  skip: chromium || process.env.CI ? false : "Chromium is not installed",
}, async () => {
  assert.ok(chromium, "Chromium is not installed (CI must install Debian's chromium)");
  const { chromium: playwright } = await import("playwright-core");
  const queue = new JobQueue({
    name: "reports",
    store: new MemoryJobStore({ defaults: { attempts: 1 } }),
  });
  await queue.start();
  const server = await serve({ queue, auth: { secret: SECRET } });
  const client = await signToken(SECRET, { producer: "reports", expiresIn: 600_000 });
  const failedOnce = new Set<string>();
  const worker = connectWorker<{ n: number; poison?: boolean }>({
    url: server.workersUrl,
    token: await signToken(SECRET, { producer: "reports", worker: "render", expiresIn: 600_000 }),
    producer: "reports",
    name: "render",
    concurrency: 2,
    drainOnSignals: false,
    handler: async ({ payload, messageId }) => {
      await new Promise((resolve) => setTimeout(resolve, 10)); // some work
      if (payload.poison && !failedOnce.has(messageId)) {
        failedOnce.add(messageId);
        throw new RangeError("the template is missing");
      }
      return payload.n * 2;
    },
  });
  const browser = await playwright.launch({
    executablePath: chromium,
    args: [
      "--no-sandbox",
      "--disable-gpu",
      "--disable-dev-shm-usage",
      // This machine's network is closed: without these Chromium keeps calling out.
      "--disable-background-networking",
      "--disable-component-update",
      "--disable-sync",
    ],
  });
  try {
    const page = await browser.newPage({ viewport: { width: 1280, height: 900 } });
    const errors: string[] = [];
    page.on("pageerror", (error) => errors.push(String(error)));
    page.on("console", (message) => {
      // The refused login is a failed request, as it should be; anything else is an error.
      const expected = /status of 401/.test(message.text());
      if (message.type() === "error" && !expected) errors.push(message.text());
    });
    const text = async (selector: string) => (await page.locator(selector).textContent()) ?? "";
    const visible = (selector: string) => page.locator(selector).isVisible();

    await page.goto(server.url.href);
    await page.locator("#token").waitFor();
    // A worker token is the wrong kind: refused, and the login stays.
    const workerToken = await signToken(SECRET, {
      producer: "reports",
      worker: "render",
      expiresIn: 60_000,
    });
    await page.fill("#token", workerToken);
    await page.click("#login-form button");
    await waitFor(async () => (await text("#login-error")).includes("wrong-kind"), "a refusal");
    assert.equal(await visible("#board"), false);

    await page.fill("#token", client);
    await page.click("#login-form button");
    await waitFor(async () => (await text("#live")) === "live", "the stream to be live");
    await waitFor(async () => (await text("#flow")) === "reports", "the flow's name");
    for (const name of ["render#1", "render#2"]) {
      const row = page.locator(`#workers tbody tr[data-key="k:${name}"]`);
      await row.waitFor({ timeout: 10_000 });
      const runtimeCell = (await row.locator("td").nth(1).textContent()) ?? "";
      const expected = { deno: /^Deno \d/, bun: /^Bun \d/, node: /^Node\b/ }[runtime];
      assert.match(runtimeCell, expected, `${name}'s runtime`);
    }
    assert.match(await text("#totals"), /0 completed/);

    // Jobs run: the counts, the totals and the chart follow.
    const jobs = Array.from({ length: 80 }, (_, i) => ({
      payload: { n: i, ...(i === 40 ? { poison: true } : {}) },
      messageId: i === 40 ? "poison" : `report-${i}`,
    }));
    const posted = await fetch(new URL("jobs", server.url), {
      method: "POST",
      headers: { authorization: `Bearer ${client}`, "content-type": "application/json" },
      body: JSON.stringify({ jobs }),
    });
    assert.equal(posted.status, 201);
    let totals = "";
    await waitFor(
      async () => (totals = await text("#totals")).includes("79 completed"),
      () => `79 completed in the page (it says ${totals})`,
      30_000,
    );
    await waitFor(
      async () => (await text("#count-dead .value")) === "1",
      "one dead job in the counts",
    );
    const deadRow = page.locator('#dead tbody tr[data-key="k:poison"]');
    await deadRow.waitFor();
    assert.match(
      (await deadRow.textContent()) ?? "",
      /RangeError: the template is missing/,
    );
    await waitFor(async () => {
      const points = await page.locator("#chart polyline.s-completed").getAttribute("points");
      const ys = (points ?? "").split(" ").map((p) => Number(p.split(",")[1]));
      return new Set(ys).size > 1;
    }, "the throughput chart to rise");
    assert.notEqual(await text("#rate-completed"), "0/s");
    const failure = page.locator("#failures tbody tr").first();
    assert.match((await failure.textContent()) ?? "", /poison/);

    // The token is kept for the tab: a reload goes straight back to the board.
    await page.reload();
    await waitFor(async () => (await text("#live")) === "live", "live again after a reload");
    assert.equal(await visible("#login"), false);

    // The retry button: the job runs again and completes; the dead letter goes away.
    await deadRow.waitFor();
    mkdirSync(join(root, "tests", ".artifacts"), { recursive: true });
    const screenshot = join(root, "tests", ".artifacts", `dashboard-${runtime}.png`);
    await page.screenshot({ path: screenshot, fullPage: true });
    assert.ok(statSync(screenshot).size > 10_000, "a screenshot was saved");
    await deadRow.locator("button.retry").click();
    await waitFor(
      async () => (await queue.get("poison"))?.state === "completed",
      "the retried job to complete",
      15_000,
    );
    assert.equal((await queue.get("poison"))?.result, 80);
    await waitFor(async () => (await deadRow.count()) === 0, "the dead letter to leave the page");
    await waitFor(
      async () => (await text("#count-dead .value")) === "0",
      "no dead job in the counts",
    );
    await waitFor(
      async () => (await text("#totals")).includes("80 completed"),
      "80 completed in the page",
    );

    // A schedule appears with its next run once declared.
    assert.equal(await visible("#schedules-panel"), false, "no panel without a schedule");
    queue.schedule("nightly", { cron: "0 3 * * *", timezone: "Europe/Berlin" }, {
      payload: { n: 0 },
    });
    const scheduleRow = page.locator('#schedules tbody tr[data-key="k:nightly"]');
    await scheduleRow.waitFor({ timeout: 10_000 });
    const next = queue.schedules()[0].next!;
    const shown = await scheduleRow.locator("td").allTextContents();
    assert.deepEqual(shown.slice(0, 2), ["nightly", 'cron "0 3 * * *" Europe/Berlin']);
    assert.equal(Date.parse(shown[2].replace(/^(\d\d)\/(\d\d)\/(\d{4}), /, "$3-$2-$1T")), next);
    assert.equal(queue.unschedule("nightly"), true);

    // The pause button: the queue pauses, the badge says so, and the button resumes it.
    assert.equal(await text("#pause"), "Pause");
    await page.click("#pause");
    await waitFor(() => queue.paused, "the queue to pause");
    await waitFor(async () => (await text("#state")) === "running, paused", "the paused badge");
    assert.equal(await text("#pause"), "Resume");
    await page.click("#pause");
    await waitFor(() => !queue.paused, "the queue to resume");
    await waitFor(async () => (await text("#state")) === "running", "the running badge");
    assert.equal(await text("#pause"), "Pause");

    // Logging out forgets the token.
    await page.click("#logout");
    await page.locator("#token").waitFor();
    await page.reload();
    await page.locator("#token").waitFor();
    assert.equal(await visible("#board"), false, "logged out across a reload");
    assert.deepEqual(errors, [], "no script error in the page");
  } finally {
    await browser.close();
    await worker.close();
    await server.close();
    await queue.close();
  }
});
