/**
 * Jobs that survive a crash: a job queue on a Deno KV file. A job added while no worker is
 * online is stored; the process stops; a new queue on the same file finds the job and a worker
 * runs it. Deno (`Deno.openKv`); on Bun and Node open the file with npm `@deno/kv`
 * (`openKv(path, bytesOnlyKvCodecs)`) and pass that handle instead.
 *
 *   deno run -A --unstable-kv examples/durable_jobs.ts
 */

import { connectInProcess, JobQueue, WorkerEndpoint } from "../mod.ts";
import { DenoKvJobStore } from "../deno_kv.ts";

const dir = await Deno.makeTempDir();
const path = `${dir}/jobs.kv`;
const openQueue = async (kv: Deno.Kv) => {
  const queue = new JobQueue({
    name: "emails",
    store: new DenoKvJobStore(kv, { prefix: ["workpull", "emails"] }),
  });
  await queue.start();
  return queue;
};

// First run: the job is stored (it is durable once add resolves), and nobody runs it.
let kv = await Deno.openKv(path);
let queue = await openQueue(kv);
await queue.add({ to: "ada@example.com" }, { messageId: "welcome-ada" });
await queue.close();
kv.close();

// Second run, on the same file: the job is still there, and a worker runs it.
kv = await Deno.openKv(path);
queue = await openQueue(kv);
console.log("after a restart:", (await queue.get("welcome-ada"))?.state);
const worker = new WorkerEndpoint<{ to: string }>({
  producer: "emails",
  name: "mailer",
  handler: ({ payload }) => `sent to ${payload.to}`,
});
connectInProcess(queue.controller, worker);
console.log("result:", (await queue.finished("welcome-ada")).result);

await worker.close();
await queue.close();
kv.close();
await Deno.remove(dir, { recursive: true });
