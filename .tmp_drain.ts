import { connectInProcess, JobQueue, WorkerEndpoint } from "./mod.ts";
import { DenoKvJobStore } from "./deno_kv.ts";
const path = await Deno.makeTempFile({ suffix: ".kv" });
const kv = await Deno.openKv(path);
const N = Number(Deno.args[0] ?? 20000);
const queue = new JobQueue({
  name: "jobs",
  store: new DenoKvJobStore(kv, { maxBacklog: 1_000_000 }),
});
await queue.start();
let t0 = performance.now();
for (let i = 0; i < N; i += 100) {
  await queue.addMany(
    Array.from({ length: 100 }, (_, k) => ({ payload: { n: i + k }, messageId: `j${i + k}` })),
  );
}
const ingest = N / ((performance.now() - t0) / 1000);
let done = 0;
let resolveAll!: () => void;
const all = new Promise<void>((r) => (resolveAll = r));
queue.addEventListener("job", (e) => {
  if (e.job.state === "completed" && ++done === N) resolveAll();
});
t0 = performance.now();
const workers = [1, 2, 3, 4].map((i) => {
  const w = new WorkerEndpoint({ producer: "jobs", name: `w${i}`, window: 100, handler: () => {} });
  connectInProcess(queue.controller, w);
  return w;
});
await all;
const drain = N / ((performance.now() - t0) / 1000);
console.log(
  `ingest ${ingest.toFixed(0)} jobs/s (in-process addMany of 100), drain ${
    drain.toFixed(0)
  } jobs/s`,
);
for (const w of workers) await w.close();
await queue.close();
kv.close();
