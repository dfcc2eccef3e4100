/**
 * The library in one process: a job queue (backlog, results, retries, dead letters) and two
 * workers attached in-process. Over the network the workers are other processes; the queue and
 * the handlers are the same. Run: `deno run examples/quick_start.ts` (or `bun`, or Node 22 with
 * `--experimental-transform-types`).
 */

import { connectInProcess, JobQueue, MemoryJobStore, WorkerEndpoint } from "../mod.ts";

const queue = new JobQueue({
  name: "jobs",
  store: new MemoryJobStore({ defaults: { attempts: 3 } }), // DenoKvJobStore: survives a crash
});
await queue.start();

const workers = ["w1", "w2"].map((name) => {
  const worker = new WorkerEndpoint<{ n: number }>({
    producer: "jobs",
    name, // one name per worker: a second worker under a name already bound replaces the first
    handler: ({ payload }) => payload.n * 2, // the job's result; a throw fails the try
  });
  connectInProcess(queue.controller, worker);
  return worker;
});

const receipts = await Promise.all([1, 2, 3].map((n) => queue.add({ n })));
console.log("results:", await Promise.all(receipts.map((receipt) => receipt.result)));

await Promise.all(workers.map((worker) => worker.close()));
await queue.close();
