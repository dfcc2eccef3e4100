/** Quick probe: durable throughput in process (controller + Deno KV file + 4 in-process workers). */
import {
  BufferedProducer,
  connectInProcess,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { DenoKvWorkQueue } from "../deno_kv.ts";

const jobs = Number(Deno.args[0] ?? 50_000);
const maxBatch = Number(Deno.args[1] ?? 1000);
const dir = await Deno.makeTempDir();
const kv = await Deno.openKv(`${dir}/q.kv`);
const producer = new BufferedProducer<{ n: number }>({ maxBatch });
const controller = new WorkPullingController({
  name: "bench",
  producer,
  queue: new DenoKvWorkQueue(kv),
  maxBatch,
});
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
console.log(
  `maxBatch ${maxBatch}: ${jobs} jobs in ${ms.toFixed(0)} ms: ${
    (jobs / ms * 1000).toFixed(0)
  } jobs/s`,
);
await controller.close();
kv.close();
await Deno.remove(dir, { recursive: true });
Deno.exit(0);
