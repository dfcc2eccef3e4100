/**
 * The job lifecycle with real worker processes over real loopback WebSockets: a job that kills
 * its worker process (SIGKILL, from inside its handler) every time it runs is not retried
 * forever. Each lost worker beyond the queue's `lostLimit` counts as a failed try, so after
 * `lostLimit + attempts` dead workers the job is dead, while every other job completes on the
 * workers that replace them.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { JobQueue, MemoryJobStore } from "../mod.ts";
import { signToken } from "../server.ts";
import { SECRET, serve, waitFor, WorkerProcess } from "./fixtures/net_support.ts";

test(
  "a job that SIGKILLs its worker process every time ends dead; every other job completes",
  { timeout: 120_000 },
  async () => {
    const attempts = 2, lostLimit = 1;
    const queue = new JobQueue({
      name: "jobs",
      store: new MemoryJobStore({
        defaults: { attempts, lostLimit, backoff: { type: "fixed", delay: 10 } },
      }),
    });
    await queue.start();
    const server = await serve({ queue, auth: { secret: SECRET } });
    const workers: WorkerProcess[] = [];
    let stopping = false;
    let started = 0;
    /** How each worker that died on its own went (before the test stops the rest). */
    const deaths: (string | null)[] = [];
    /** Keep two worker processes alive: each one that dies is replaced by a new one. */
    const startWorker = async (): Promise<void> => {
      const name = `w${++started}`;
      const worker = new WorkerProcess({
        url: server.workersUrl.href,
        token: await signToken(SECRET, { producer: "jobs", worker: name, expiresIn: 600_000 }),
        producer: "jobs",
        name,
        delayMs: 2,
        killOn: ["poison"],
      });
      workers.push(worker);
      void worker.exited.then(({ signal }) => {
        if (stopping) return;
        deaths.push(signal);
        void startWorker();
      });
    };
    try {
      const good = Array.from({ length: 40 }, (_, i) => ({ messageId: `job-${i}`, payload: i }));
      await queue.addMany([{ messageId: "poison", payload: -1 }, ...good]);
      await startWorker();
      await startWorker();
      await waitFor(
        async () => (await queue.get("poison"))?.state === "dead",
        "the poison job to be dead",
        90_000,
      );
      for (const { messageId } of good) {
        await waitFor(
          async () => (await queue.get(messageId))?.state === "completed",
          `${messageId} to complete`,
          30_000,
        );
      }
      // The controller may see a process die before this test reaps it.
      await waitFor(() => deaths.length >= lostLimit + attempts, "the last worker to be reaped");
      const dead = await queue.get("poison");
      assert.equal(dead?.error?.name, "WorkerLostError", JSON.stringify(dead));
      assert.equal(dead?.attempts, attempts, "every try was used");
      assert.deepEqual(
        deaths,
        Array(lostLimit + attempts).fill("SIGKILL"),
        "one worker killed per run of the poison job, and no other death",
      );
    } finally {
      stopping = true;
      await Promise.all(workers.map((worker) => worker.kill()));
      await server.close();
      await queue.close();
    }
  },
);
