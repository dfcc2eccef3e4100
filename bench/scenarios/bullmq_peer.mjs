// The BullMQ peer of the throughput scenario, run by Node (the runtime BullMQ targets).
// Two roles, each its own process, talking to a local Redis:
//
//   node bench/scenarios/bullmq_peer.mjs worker   <port> <queue> <jobs> <concurrency>
//   node bench/scenarios/bullmq_peer.mjs producer <port> <queue> <jobs>
//
// The worker (no-op processor) prints {"ev":"ready"} once connected and {"ev":"done","t":…}
// when it has completed <jobs> jobs. The producer prints {"ev":"start","t":…} and then adds
// the jobs ({"n": i}, removed on completion) with addBulk in chunks of 1000, and prints
// {"ev":"added","t":…}. Times are performance.timeOrigin + performance.now().

import { Queue, Worker } from "bullmq";

const [role, port, name, jobsText, concurrencyText] = process.argv.slice(2);
const jobs = Number(jobsText);
const connection = { host: "127.0.0.1", port: Number(port), maxRetriesPerRequest: null };
const now = () => performance.timeOrigin + performance.now();
const out = (line) => process.stdout.write(`${JSON.stringify(line)}\n`);

if (role === "worker") {
  let completed = 0;
  const worker = new Worker(name, async () => {}, {
    connection,
    concurrency: Number(concurrencyText),
    removeOnComplete: { count: 0 },
    removeOnFail: { count: 0 },
  });
  worker.on("completed", () => {
    if (++completed === jobs) {
      out({ ev: "done", t: now() });
      worker.close().then(() => process.exit(0));
    }
  });
  worker.on("error", (error) => process.stderr.write(`${error}\n`));
  await worker.waitUntilReady();
  out({ ev: "ready" });
} else {
  const queue = new Queue(name, { connection });
  await queue.waitUntilReady();
  out({ ev: "start", t: now() });
  for (let first = 0; first < jobs; first += 1000) {
    const batch = [];
    for (let n = first; n < Math.min(jobs, first + 1000); n++) {
      batch.push({
        name: "bench",
        data: { n },
        opts: { removeOnComplete: true, removeOnFail: true },
      });
    }
    await queue.addBulk(batch);
  }
  out({ ev: "added", t: now() });
  await queue.close();
  process.exit(0);
}
