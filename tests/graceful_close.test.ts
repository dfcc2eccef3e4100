/**
 * The graceful path runs each job once. A worker closed while its handler runs keeps the job until
 * the handler finished (or its drain time ran out): its heartbeats go on through the drain, so the
 * controller does not end it as silent, and its last confirmation arrives before its close, in
 * process as over a socket. Under a simulated clock in process, and over real WebSockets on the
 * runtime running the test.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import {
  BufferedProducer,
  connectInProcess,
  JobQueue,
  MemoryJobStore,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { connectWorker } from "../client.ts";
import { SimulatedClock } from "../testing.ts";
import { CliProcess, runCli } from "./fixtures/cli_support.ts";
import { startFlow, waitFor, within } from "./fixtures/net_support.ts";

/** A worker module whose every try takes `WORKPULL_TEST_JOB_MS`. */
const SLOW_HANDLER = new URL("./fixtures/slow_handler.ts", import.meta.url).pathname;

interface Story {
  /** `worker started messageId`, in order. */
  readonly runs: string[];
  /** `worker: reason`, for each binding that ended. */
  readonly unbound: string[];
  /** MessageIDs the controller requeued. */
  readonly requeued: string[];
}

/**
 * A controller with workers `a` (its handler takes `jobMs`) and `b`; `a` takes job-1 and is
 * closed while it runs. Returns what happened once the drain ended.
 */
async function drainInProcess(jobMs: number, drainTimeout?: number): Promise<Story> {
  const clock = new SimulatedClock();
  const producer = new BufferedProducer();
  const controller = new WorkPullingController({ name: "jobs", producer, clock });
  const story: Story = { runs: [], unbound: [], requeued: [] };
  controller.addEventListener(
    "worker-unbound",
    (e) => story.unbound.push(`${e.worker}: ${e.reason}`),
  );
  controller.addEventListener("requeued", (e) => story.requeued.push(...e.messageIds));
  await controller.start();
  const worker = (name: string, ms: number) => {
    const endpoint = new WorkerEndpoint({
      producer: "jobs",
      name,
      clock,
      drainTimeout,
      handler: async ({ messageId }) => {
        story.runs.push(`${name} started ${messageId}`);
        await new Promise<void>((resolve) => clock.setTimeout(resolve, ms));
      },
    });
    connectInProcess(controller, endpoint);
    return endpoint;
  };
  const a = worker("a", jobMs);
  const receipt = producer.submit({}, { messageId: "job-1" });
  await clock.advanceAsync(100);
  const b = worker("b", 10);
  let closed = false;
  void a.close().then(() => (closed = true));
  for (let t = 0; !closed && t < jobMs + 120_000; t += 10) await clock.advanceAsync(10);
  assert.ok(closed, "the drain ended");
  await clock.advanceAsync(5_000);
  await receipt;
  await b.close();
  await controller.close();
  return story;
}

describe("a draining worker keeps the job it is running", () => {
  for (const [jobMs, drainTimeout] of [[9_000, undefined], [60_000, 90_000]] as const) {
    test(`in process: a ${jobMs / 1000} s job runs once, then the binding ends disconnected`, async () => {
      const story = await drainInProcess(jobMs, drainTimeout);
      assert.deepEqual(story.runs, ["a started job-1"]);
      assert.deepEqual(story.requeued, []);
      assert.equal(story.unbound[0], "a: disconnected");
    });
  }

  test("in process: a job whose drain time ran out goes to another worker", async () => {
    // The bound still holds: what the drain could not finish is not lost.
    const story = await drainInProcess(20_000, 5_000);
    assert.deepEqual(story.runs, ["a started job-1", "b started job-1"]);
    assert.deepEqual(story.requeued, ["job-1"]);
  });

  test("a job queue keeps the result of the job finished during a drain", async () => {
    const clock = new SimulatedClock();
    const queue = new JobQueue({
      name: "jobs",
      store: new MemoryJobStore({ clock }),
      controller: { clock },
    });
    await queue.start();
    const runs: string[] = [];
    const worker = (name: string, ms: number) => {
      const endpoint = new WorkerEndpoint({
        producer: "jobs",
        name,
        clock,
        handler: async ({ messageId }) => {
          runs.push(name);
          await new Promise<void>((resolve) => clock.setTimeout(resolve, ms));
          return `${name}:${messageId}`;
        },
      });
      connectInProcess(queue.controller, endpoint);
      return endpoint;
    };
    const a = worker("a", 9_000);
    const receipt = await queue.add({}, { messageId: "job-1" });
    await clock.advanceAsync(100);
    const b = worker("b", 10);
    let closed = false;
    void a.close().then(() => (closed = true));
    for (let t = 0; !closed && t < 30_000; t += 10) await clock.advanceAsync(10);
    await clock.advanceAsync(5_000);
    assert.deepEqual(runs, ["a"]);
    assert.equal(await receipt.result, "a:job-1");
    assert.equal((await queue.get("job-1"))?.attempts, 1);
    await b.close();
    await queue.close();
  });
});

test("twelve workers closed one after another, each right after its last job, run no job twice", async () => {
  const clock = new SimulatedClock();
  const queue = new JobQueue({
    name: "jobs",
    store: new MemoryJobStore({ clock }),
    controller: { clock },
  });
  await queue.start();
  const runs = new Map<string, string[]>();
  const closing: Promise<void>[] = [];
  /** Workers to close as soon as their running job finishes. */
  const closeAfterJob = new Set<string>();
  const worker = (name: string) => {
    const endpoint: WorkerEndpoint = new WorkerEndpoint({
      producer: "jobs",
      name,
      clock,
      window: 5,
      handler: async ({ messageId }) => {
        runs.set(messageId, [...runs.get(messageId) ?? [], name]);
        await new Promise<void>((resolve) => clock.setTimeout(resolve, 3));
        // Closed in the same turn as the job ends: its confirmation is the drain's last frame.
        if (closeAfterJob.has(name)) closing.push(endpoint.close());
        return `${name}:${messageId}`;
      },
    });
    connectInProcess(queue.controller, endpoint);
    return endpoint;
  };
  const names = Array.from({ length: 12 }, (_, i) => `w${i + 1}`);
  for (const name of names) worker(name);
  const survivor = worker("survivor");
  const receipts = await queue.addMany(
    Array.from({ length: 600 }, (_, n) => ({ payload: { n }, messageId: `job-${n}` })),
  );
  for (const name of names) {
    closeAfterJob.add(name);
    for (let t = 0; t < 20; t++) await clock.advanceAsync(1);
  }
  for (let t = 0; t < 60_000 && runs.size < 600; t += 10) await clock.advanceAsync(10);
  await clock.advanceAsync(5_000);
  await Promise.all(closing);
  const twice = [...runs].filter(([, workers]) => workers.length > 1);
  assert.deepEqual(twice, []);
  assert.equal(runs.size, 600);
  for (const receipt of receipts) {
    const job = await queue.get(receipt.job.id);
    assert.equal(job?.state, "completed", receipt.job.id);
    assert.equal(job?.result, `${runs.get(receipt.job.id)![0]}:${receipt.job.id}`);
  }
  await survivor.close();
  await queue.close();
});

test(
  "over WebSocket, a worker closed during a 9 s job and one during a 60 s job (drain 90 s) run each once",
  {
    timeout: 120_000,
  },
  async () => {
    /** A flow with a worker `a` running one `jobMs` job when it is closed, and a worker `b`. */
    const scenario = async (jobMs: number, drainTimeout?: number) => {
      const flow = await startFlow();
      const runs: string[] = [];
      const connect = async (name: string, ms: number) => {
        const token = await flow.token(name);
        return connectWorker({
          url: flow.server.workersUrl,
          token,
          producer: "jobs",
          name,
          drainTimeout,
          drainOnSignals: false,
          handler: async ({ messageId }) => {
            runs.push(`${name} started ${messageId}`);
            await new Promise((resolve) => setTimeout(resolve, ms));
          },
        });
      };
      try {
        const a = await connect("a", jobMs);
        const { confirmed } = flow.submit(1);
        await within(
          new Promise<void>((resolve) => {
            const check = setInterval(
              () => runs.length > 0 && (clearInterval(check), resolve()),
              5,
            );
          }),
          "a to start the job",
        );
        const b = await connect("b", 10);
        await within(
          new Promise<void>((resolve) => {
            const check = setInterval(() => {
              if (flow.of("worker-bound").some((e) => e.worker === "b")) {
                clearInterval(check);
                resolve();
              }
            }, 5);
          }),
          "b to bind",
        );
        const closedAt = performance.now();
        await within(a.close(), "a to drain", jobMs + 20_000);
        const drained = performance.now() - closedAt;
        await within(confirmed, "the job to be confirmed");
        await b.close();
        return { runs, drained, flow };
      } finally {
        await flow.close();
      }
    };
    const results = await Promise.all([scenario(9_000), scenario(60_000, 90_000)]);
    for (const [i, { runs, drained, flow }] of results.entries()) {
      assert.deepEqual(runs, ["a started job-1"], `scenario ${i}`);
      assert.deepEqual(flow.of("requeued"), [], `scenario ${i}`);
      const unbound = flow.of("worker-unbound").filter((e) => e.worker === "a");
      assert.deepEqual(unbound.map((e) => e.reason), ["disconnected"], `scenario ${i}`);
      assert.ok(
        drained > (i === 0 ? 8_000 : 55_000),
        `the drain waited for the job (${drained} ms)`,
      );
    }
  },
);

test("SIGTERM of a workpull worker running a 20 s job: the job runs once, then it exits 143", {
  timeout: 120_000,
}, async () => {
  const cwd = mkdtempSync(join(tmpdir(), "workpull-drain-"));
  const runsFile = join(cwd, "runs.txt");
  writeFileSync(runsFile, "");
  const env = { WORKPULL_SECRET: "", WORKPULL_TEST_RUNS: runsFile, WORKPULL_TEST_JOB_MS: "20000" };
  const processes: CliProcess[] = [];
  const start = (args: string[]) => {
    const child = new CliProcess(args, { cwd, env });
    processes.push(child);
    return child;
  };
  const lines = () => readFileSync(runsFile, "utf8").trim().split("\n").filter(Boolean);
  try {
    const server = start(["serve", "--port", "0", "--memory"]);
    await waitFor(
      () => /^listening on (\S+)/m.test(server.stdout),
      () => `the server's first line\n${server.stderr}`,
      60_000,
    );
    const url = server.stdout.match(/^listening on (\S+)/m)![1];
    const first = start(["worker", "--url", url, "--name", "first", SLOW_HANDLER]);
    await waitFor(() => /first: connected/.test(first.stderr), () => first.stderr, 60_000);
    const submitted = await runCli(["submit", "--url", url, '{"n":1}'], { cwd, env });
    assert.equal(submitted.code, 0, submitted.stderr);
    const id = submitted.stdout.trim();
    await waitFor(() => lines().length === 1, "the first worker to start the job", 30_000);
    const second = start(["worker", "--url", url, "--name", "second", SLOW_HANDLER]);
    await waitFor(() => /second: connected/.test(second.stderr), () => second.stderr, 60_000);
    first.signal("SIGTERM");
    const code = await within(first.exited, "the first worker to drain and exit", 60_000);
    assert.equal(code, 143, first.stderr);
    // It exited after its job finished: the end is written before the exit.
    assert.deepEqual(lines().map((line) => line.split(" ").slice(0, 2).join(" ")), [
      `start ${id}`,
      `end ${id}`,
    ]);
    const client = (await runCli(["token"], { cwd, env })).stdout.trim();
    const job = await (await fetch(new URL(`flows/jobs/jobs/${id}`, url), {
      headers: { authorization: `Bearer ${client}` },
    })).json();
    assert.deepEqual([job.state, job.attempts, job.result], ["completed", 1, first.pid]);
    assert.equal(lines().length, 2, "the second worker never ran it");
    // One line when the drain starts (what it waits for), one when it ends.
    assert.match(first.stderr, /SIGTERM: draining: .*waiting for the running ones to finish/);
    assert.match(first.stderr, /drained and closed in \d+ ms; exiting/);
    server.signal("SIGTERM");
    assert.equal(await within(server.exited, "the server to drain and exit", 30_000), 143);
    assert.match(server.stderr, /SIGTERM: draining: no new tries start/);
    assert.match(server.stderr, /drained and closed in \d+ ms; exiting/);
  } finally {
    await Promise.all(processes.map((child) => child.kill()));
    rmSync(cwd, { recursive: true, force: true });
  }
});
