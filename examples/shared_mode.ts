/**
 * Several instances of one flow on one Deno KV: here two job queues in one process sharing a KV
 * file, as two server processes (or Deno Deploy isolates) would. A job added on one instance
 * runs on a worker of the other; `instances()` lists the whole flow.
 *
 *   deno run -A --unstable-kv examples/shared_mode.ts
 */

import { connectInProcess, JobQueue, WorkerEndpoint } from "../mod.ts";
import { DenoKvClusterStore } from "../deno_kv.ts";

const dir = await Deno.makeTempDir();
const kv = await Deno.openKv(`${dir}/shared.kv`); // on Deno Deploy: Deno.openKv(), the project's KV
const [a, b] = ["a", "b"].map((id) =>
  new JobQueue({
    name: "emails",
    store: new DenoKvClusterStore(kv, {
      prefix: ["workpull", "emails"],
      instance: { id, leaseTtl: 10_000 }, // a dead instance's jobs are taken over after 10 s
    }),
  })
);
await a.start();
await b.start();

// Only instance b has a worker; the job is added on instance a.
const worker = new WorkerEndpoint<{ to: string }>({
  producer: "emails",
  name: "mailer",
  handler: ({ payload }) => `sent to ${payload.to}`,
});
connectInProcess(b.controller, worker);
await a.add({ to: "ada@example.com" }, { messageId: "welcome-ada" });
console.log("result:", (await b.finished("welcome-ada")).result); // b ran it
console.log("instances:", (await a.instances())?.length);

await worker.close();
await a.close();
await b.close();
kv.close();
await Deno.remove(dir, { recursive: true });
