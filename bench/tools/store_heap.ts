/**
 * What a waiting job costs a `MemoryJobStore` in heap: `jobs` jobs added with `enqueue`, 1,000 a
 * call (random UUIDs, payloads `{"n":i}`, no options), nobody taking them; the heap after two full
 * collections, before and after, divided by the job count. The payload's own text is included
 * (about 20 bytes here). Run it with V8's `gc` exposed:
 *
 *   deno run -A --v8-flags=--expose-gc bench/tools/store_heap.ts [jobs=1000000]
 *
 * @module
 */

import process from "node:process";
import { MemoryJobStore } from "../../mod.ts";
import { planJob } from "../../src/lifecycle/job_options.ts";
import { commandLine, numberArg } from "../lib/cli.ts";

const { positionals } = commandLine({
  usage: "deno run -A --v8-flags=--expose-gc bench/tools/store_heap.ts [jobs]",
  summary: "Heap bytes a waiting job in a MemoryJobStore (payload included).",
  positionals: [{ name: "jobs", help: "waiting jobs (default 1000000)" }],
  flags: {},
});
const jobs = numberArg("jobs", positionals[0], 1_000_000);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) {
  console.error("run with --v8-flags=--expose-gc (Deno) or --expose-gc (Node)");
  process.exit(2);
}

const store = new MemoryJobStore({ maxBacklog: jobs });
await store.load();
gc();
gc();
const before = process.memoryUsage().heapUsed;
const plan = planJob({}, Date.now());
for (let added = 0; added < jobs; added += 1000) {
  const batch = [];
  for (let i = added; i < Math.min(jobs, added + 1000); i++) {
    batch.push({ id: crypto.randomUUID(), payload: `{"n":${i}}`, plan });
  }
  await store.enqueue(batch);
}
gc();
gc();
const after = process.memoryUsage().heapUsed;
console.log(
  `${jobs.toLocaleString("en-US")} waiting jobs: ${
    Math.round((after - before) / jobs)
  } bytes of heap a job (payload included); backlog ${
    store.counts().waiting.toLocaleString("en-US")
  }`,
);
store.close();
