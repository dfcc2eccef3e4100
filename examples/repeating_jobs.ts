/**
 * Repeating jobs: a schedule every second and one by a cron pattern in a time zone. Each run is
 * an ordinary job named after its time; the next one waits in the store until then. The worker
 * runs two heartbeats, then the example prints each schedule's next run and exits.
 */

import { connectInProcess, JobQueue, WorkerEndpoint } from "../mod.ts";

const queue = new JobQueue({ name: "reports" });
// Every second (counted from the Unix epoch), and every night at 3:00 in Berlin.
queue.schedule("heartbeat", { every: 1_000 }, { payload: { kind: "heartbeat" } });
queue.schedule("nightly", { cron: "0 3 * * *", timezone: "Europe/Berlin" }, {
  payload: { kind: "sales report" },
  attempts: 5,
});
await queue.start();

const worker = new WorkerEndpoint<{ kind: string }>({
  producer: "reports",
  name: "reporter",
  handler: ({ payload, messageId }) => console.log(`${payload.kind}: ${messageId}`),
});
connectInProcess(queue.controller, worker);

// Each run is a job named after its time; wait for two heartbeats.
let beats = 0;
await new Promise<void>((resolve) =>
  queue.addEventListener("job", ({ job }) => {
    if (job.id.startsWith("heartbeat@") && job.state === "completed" && ++beats === 2) resolve();
  })
);
for (const { key, nextJob } of queue.schedules()) console.log(`next ${key}: ${nextJob}`);

await worker.close();
await queue.close();
