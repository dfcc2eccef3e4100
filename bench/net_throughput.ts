/**
 * Network throughput: jobs/s over loopback for 4 worker endpoints with window 100 and a no-op
 * handler, next to a raw WebSocket baseline (one job message and one confirmation message per
 * job, at most 100 unconfirmed) measured in the same run.
 *
 *   deno run -A bench/net_throughput.ts [jobs] [--workers=deno|bun]
 *   bun bench/net_throughput.ts [jobs] [--workers=deno|bun]
 *
 * The server (controller, BufferedProducer, Hono app) runs in this process on the runtime that
 * runs the script; the workers run in subprocesses (by default on the same runtime).
 */

import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";
import { BufferedProducer, WorkPullingController } from "../mod.ts";
import { signToken } from "../server.ts";

const runtime = "Deno" in globalThis ? "deno" : "bun";
const args = process.argv.slice(runtime === "deno" ? 2 : 2);
const jobs = Number(args.find((arg) => /^\d+$/.test(arg)) ?? 100_000);
const workerRuntime = args.find((arg) => arg.startsWith("--workers="))?.slice(10) ?? runtime;
const WINDOW = 100;
const SECRET = "bench-secret-0123456789-abcdefghijklmnopqrstuvwxyz";
const root = new URL("..", import.meta.url).pathname;

/** Spawn a bench worker; resolves when it reports ready. */
async function worker(config: Record<string, unknown>): Promise<ChildProcess> {
  const script = `${root}bench/net_worker.ts`;
  const [command, argv] = workerRuntime === "deno"
    ? [`${root}node_modules/.bin/deno`, ["run", "-A", "--quiet", script]]
    : [`${root}node_modules/.bin/bun`, [script]];
  const child = spawn(command, argv, {
    env: { ...process.env, WORKPULL_BENCH: JSON.stringify(config) },
    stdio: ["ignore", "pipe", "inherit"],
  });
  await new Promise<void>((resolve, reject) => {
    child.stdout!.setEncoding("utf8");
    child.stdout!.on("data", (chunk: string) => chunk.includes('"ready"') && resolve());
    child.on("exit", () => reject(new Error("worker exited")));
  });
  return child;
}

async function stop(children: ChildProcess[]): Promise<void> {
  await Promise.all(children.map((child) =>
    new Promise<void>((resolve) => {
      if (child.exitCode !== null || child.signalCode !== null) return resolve();
      child.on("exit", () => resolve());
      process.kill(child.pid!, "SIGKILL");
    })
  ));
}

interface Listener {
  port: number;
  stop(): Promise<void>;
}

/** A raw WebSocket server: one job message per job, one confirmation per job, window 100. */
function rawServer(onDone: () => void): Listener {
  let sent = 0;
  let confirmed = 0;
  const job = () => `{"id":"${++sent}","payload":{"n":${sent}}}`;
  const fill = (send: (text: string) => void, count: number) => {
    for (let i = 0; i < count && sent < jobs; i++) send(job());
  };
  const onConfirm = (send: (text: string) => void) => {
    if (++confirmed === jobs) onDone();
    fill(send, 1);
  };
  if (runtime === "deno") {
    const server = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (request) => {
      const { socket, response } = Deno.upgradeWebSocket(request);
      const send = (text: string) => socket.send(text);
      socket.onopen = () => fill(send, WINDOW);
      socket.onmessage = () => onConfirm(send);
      return response;
    });
    return { port: server.addr.port, stop: () => server.shutdown() };
  }
  type BunSocket = { send(text: string): number };
  const bun = (globalThis as unknown as {
    Bun: {
      serve(options: unknown): { port: number; stop(force: boolean): Promise<void> | void };
    };
  }).Bun;
  const server = bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: (request: Request, srv: { upgrade(request: Request): boolean }) =>
      srv.upgrade(request) ? undefined : new Response("upgrade", { status: 426 }),
    websocket: {
      open: (ws: BunSocket) => fill((text) => ws.send(text), WINDOW),
      message: (ws: BunSocket) => onConfirm((text) => ws.send(text)),
    },
  });
  return { port: server.port, stop: async () => void await server.stop(true) };
}

async function raw(): Promise<number> {
  let done!: () => void;
  const finished = new Promise<void>((resolve) => (done = resolve));
  const server = rawServer(() => done());
  const started = performance.now();
  const child = await worker({ mode: "raw", url: `ws://127.0.0.1:${server.port}/` });
  await finished;
  const seconds = (performance.now() - started) / 1000;
  await stop([child]);
  await server.stop();
  return seconds;
}

async function workpull(processes: number, concurrency: number): Promise<number> {
  const producer = new BufferedProducer<{ n: number }>();
  const controller = new WorkPullingController({ name: "bench", producer });
  await controller.start();
  const serve = runtime === "deno"
    ? (await import("../deno.ts")).serveDeno
    : (await import("../bun.ts")).serveBun;
  const server = serve({ controller, producer, auth: { secret: SECRET } });
  const children = await Promise.all(
    Array.from({ length: processes }, async (_, i) =>
      worker({
        mode: "workpull",
        url: server.workersUrl.href,
        token: await signToken(SECRET, {
          producer: "bench",
          worker: `w${i}`,
          expiresIn: 3_600_000,
        }),
        name: `w${i}`,
        concurrency,
        window: WINDOW,
      })),
  );
  const started = performance.now();
  for (let n = 1; n <= jobs; n++) producer.submit({ n }).catch(() => {});
  while (controller.stats().totals.confirmed < jobs) {
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
  const seconds = (performance.now() - started) / 1000;
  await stop(children);
  await server.close();
  await controller.close();
  return seconds;
}

const line = (label: string, seconds: number) =>
  console.log(
    `${label.padEnd(58)} ${jobs} jobs in ${seconds.toFixed(2)} s = ${
      Math.round(jobs / seconds).toLocaleString("en-US")
    } jobs/s`,
  );

console.log(`server: ${runtime}; workers: ${workerRuntime}; window ${WINDOW}; no-op handler`);
const baseline = await raw();
line("raw WebSocket baseline (1 connection)", baseline);
const oneProcess = await workpull(1, 4);
line("workpull: 1 worker process x 4 endpoints", oneProcess);
const fourProcesses = await workpull(4, 1);
line("workpull: 4 worker processes x 1 endpoint", fourProcesses);
console.log(
  `ratio to the baseline: ${(baseline / oneProcess).toFixed(2)} and ${
    (baseline / fourProcesses).toFixed(2)
  }`,
);
