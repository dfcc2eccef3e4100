/**
 * Failover latency: a worker process is killed with SIGKILL while it holds unconfirmed jobs;
 * how long until the controller requeues them, and until a survivor starts the first of them.
 *
 *   deno run -A bench/net_failover.ts [rounds]
 *   bun bench/net_failover.ts [rounds]
 *
 * Times are wall-clock (`Date.now()`, shared by the processes), so they have 1 ms resolution.
 */

import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";
import { BufferedProducer, WorkPullingController } from "../mod.ts";
import { signToken } from "../server.ts";

const runtime = "Deno" in globalThis ? "deno" : "bun";
const rounds = Number(process.argv.slice(2).find((arg) => /^\d+$/.test(arg)) ?? 5);
const SECRET = "bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz";
const root = new URL("..", import.meta.url).pathname;

interface Worker {
  child: ChildProcess;
  /** MessageID → when its handler started (Date.now() in the worker). */
  starts: Map<string, number>;
}

async function worker(config: Record<string, unknown>): Promise<Worker> {
  const script = `${root}bench/net_worker.ts`;
  const [command, argv] = runtime === "deno"
    ? [`${root}node_modules/.bin/deno`, ["run", "-A", "--quiet", script]]
    : [`${root}node_modules/.bin/bun`, [script]];
  const child = spawn(command, argv, {
    env: { ...process.env, WORKPULL_BENCH: JSON.stringify({ ...config, report: true }) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  const starts = new Map<string, number>();
  await new Promise<void>((resolve, reject) => {
    let pending = "";
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (chunk: string) => {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      for (const line of lines) {
        const report = JSON.parse(line);
        if (report.ev === "ready") resolve();
        if (report.ev === "start") starts.set(report.id, report.at);
      }
    });
    child.on("exit", () => reject(new Error("worker exited")));
  });
  return { child, starts };
}

function kill(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.on("exit", () => resolve());
    process.kill(child.pid!, "SIGKILL");
  });
}

async function until(condition: () => boolean): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error("timed out");
    await new Promise((resolve) => setTimeout(resolve, 1));
  }
}

async function round(): Promise<{ requeued: number; redelivered: number; jobs: number }> {
  const producer = new BufferedProducer<{ n: number }>();
  const controller = new WorkPullingController({ name: "bench", producer });
  let requeuedAt = 0;
  let requeuedIds: readonly string[] = [];
  controller.addEventListener("requeued", (event) => {
    if (requeuedAt > 0) return; // only the victim's
    requeuedAt = Date.now();
    requeuedIds = event.messageIds;
  });
  await controller.start();
  const serve = runtime === "deno"
    ? (await import("../deno.ts")).serveDeno
    : (await import("../bun.ts")).serveBun;
  const server = serve({ controller, producer, auth: { secret: SECRET } });
  const token = (name: string) =>
    signToken(SECRET, { producer: "bench", worker: name, expiresIn: 3_600_000 });
  const common = { mode: "workpull", url: server.workersUrl.href, window: 10 };
  // The victim takes all 10 jobs; the survivor joins idle, so what is measured is detection and
  // redelivery, not the survivor's backlog.
  const victim = await worker({
    ...common,
    name: "victim",
    token: await token("victim"),
    delayMs: 50,
  });
  for (let n = 1; n <= 10; n++) producer.submit({ n }).catch(() => {});
  await until(() => victim.starts.size >= 2);
  const survivor = await worker({
    ...common,
    name: "survivor",
    token: await token("survivor"),
    delayMs: 5,
  });
  const killedAt = Date.now();
  await kill(victim.child);
  await until(() => requeuedIds.length > 0 && requeuedIds.some((id) => survivor.starts.has(id)));
  const firstRedelivery = Math.min(
    ...requeuedIds.flatMap((id) => survivor.starts.has(id) ? [survivor.starts.get(id)!] : []),
  );
  const result = {
    requeued: requeuedAt - killedAt,
    redelivered: firstRedelivery - killedAt,
    jobs: requeuedIds.length,
  };
  await kill(survivor.child);
  await server.close();
  await controller.close();
  return result;
}

console.log(`${runtime}: SIGKILL of a worker holding 10 unconfirmed jobs; one idle survivor`);
const results = [];
for (let i = 0; i < rounds; i++) {
  const result = await round();
  results.push(result);
  console.log(
    `round ${i + 1}: requeued ${result.jobs} jobs ${result.requeued} ms after the kill; ` +
      `a survivor started the first of them at ${result.redelivered} ms`,
  );
}
const median = (values: number[]) => values.sort((a, b) => a - b)[Math.floor(values.length / 2)];
console.log(
  `median: requeue ${median(results.map((r) => r.requeued))} ms, first redelivery ${
    median(results.map((r) => r.redelivered))
  } ms`,
);
