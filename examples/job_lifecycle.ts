/**
 * A job's lifecycle in one run: a result travels back, a flaky job succeeds on its second try, a
 * poison job ends in the dead letters, a slow job times out and is retried, a scheduled job is
 * cancelled before it runs. In one process with two in-process workers; the same holds over
 * WebSockets and on a Deno KV store.
 *
 *   deno run examples/job_lifecycle.ts
 */

import { connectInProcess, JobQueue, MemoryJobStore, WorkerEndpoint } from "../mod.ts";

type Job = { kind: "double" | "flaky" | "poison" | "slow" | "later"; n: number };

const queue = new JobQueue({
  name: "jobs",
  store: new MemoryJobStore({
    defaults: { attempts: 3, backoff: { type: "exponential", delay: 50, max: 200, jitter: 0 } },
  }),
});
await queue.start();

let flakyTries = 0;
let slowTries = 0;
const workers = ["w1", "w2"].map((name) => {
  const worker = new WorkerEndpoint<Job>({
    producer: "jobs",
    name,
    handler: async ({ payload, attempt, signal }) => {
      switch (payload.kind) {
        case "double":
          return payload.n * 2; // the result travels back with the confirmation
        case "flaky":
          if (++flakyTries === 1) throw new Error("a passing hiccup");
          return "fine on try " + attempt;
        case "poison":
          throw new TypeError(`${name} cannot digest this`);
        case "slow":
          // The first try takes too long: its signal aborts at the timeout and it is retried.
          if (++slowTries === 1) {
            await new Promise((resolve) => signal.addEventListener("abort", resolve));
            throw signal.reason;
          }
          return "quick the second time";
        case "later":
          return "never runs: cancelled first";
      }
    },
  });
  connectInProcess(queue.controller, worker);
  return worker;
});

const [double, flaky, poison, slow, later] = await queue.addMany<Job>([
  { payload: { kind: "double", n: 21 }, messageId: "double" },
  { payload: { kind: "flaky", n: 0 }, messageId: "flaky" },
  { payload: { kind: "poison", n: 0 }, messageId: "poison" },
  { payload: { kind: "slow", n: 0 }, messageId: "slow", timeout: 200 },
  { payload: { kind: "later", n: 0 }, messageId: "later", delay: 60_000 },
]);
console.log("result:", await double.result);
console.log("retried:", await flaky.result);
const cancelled = await queue.cancel(later.job.id);
console.log("cancelled:", cancelled?.state);
const dead = await poison.finished;
console.log(`dead letter: ${dead.id} after ${dead.attempts} tries (${dead.error?.message})`);
console.log("timed out, then:", await slow.result);
const letters = await queue.deadLetters();
console.log("dead letters:", letters.jobs.map((job) => job.id).join(", "));

for (const worker of workers) await worker.close();
await queue.close();
