/** Quick in-process throughput probe: controller + 4 in-process workers, no-op handler. */
import {
  BufferedProducer,
  connectInProcess,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";

const jobs = Number(Deno.args[0] ?? 200_000);
const producer = new BufferedProducer<{ n: number }>();
const controller = new WorkPullingController({ name: "bench", producer });
await controller.start();
let done = 0;
let finish!: () => void;
const finished = new Promise<void>((r) => (finish = r));
for (let i = 0; i < 4; i++) {
  connectInProcess(
    controller,
    new WorkerEndpoint<{ n: number }>({
      producer: "bench",
      name: `w${i}`,
      window: 100,
      handler: () => {
        if (++done === jobs) finish();
      },
    }),
  );
}
const start = performance.now();
for (let n = 0; n < jobs; n++) producer.submit({ n });
await finished;
const ms = performance.now() - start;
console.log(`${jobs} jobs in ${ms.toFixed(0)} ms: ${(jobs / ms * 1000).toFixed(0)} jobs/s`);
await controller.close();
Deno.exit(0);
