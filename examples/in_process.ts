/**
 * A controller, a buffered producer and three in-process workers of different speeds, one of
 * which crashes mid-job. Run: `deno run examples/in_process.ts` (or `bun examples/in_process.ts`).
 *
 * What to watch: the fast worker takes most jobs; the crashed worker's unconfirmed jobs go back to
 * the head of the pool and finish on the survivors; every job is confirmed.
 */

import {
  BufferedProducer,
  connectInProcess,
  type RequeuedEvent,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";

const producer = new BufferedProducer<{ n: number }>();
const controller = new WorkPullingController({
  name: "jobs",
  producer,
  deliveryConfirmation: true,
});
controller.addEventListener("requeued", (event: RequeuedEvent) => {
  console.log(`requeued from ${event.worker}: ${event.messageIds.length} jobs`);
});
await controller.start();

const counts: Record<string, number> = {};
const workers: WorkerEndpoint<{ n: number }>[] = [];
const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
function startWorker(name: string, ms: number) {
  counts[name] = 0;
  const worker = new WorkerEndpoint<{ n: number }>({
    producer: "jobs",
    name,
    window: 5,
    handler: async () => {
      await sleep(ms);
      counts[name]++;
    },
  });
  workers.push(worker);
  return connectInProcess(controller, worker);
}

startWorker("fast", 1);
startWorker("slow", 20);
const doomed = startWorker("doomed", 10);
setTimeout(() => doomed.close(1006, "crashed"), 50);

const receipts = await Promise.all(Array.from({ length: 200 }, (_, n) => producer.submit({ n })));
await Promise.all(receipts.map((receipt) => receipt.confirmed));
console.log("all 200 jobs confirmed; handled per worker:", counts);
console.log(controller.stats().totals);
await Promise.all(workers.map((worker) => worker.close()));
await controller.close();
