/**
 * One memory measurement, in a fresh process (`--v8-flags=--expose-gc`): the controller's heap
 * per pending job. Prints one JSON line.
 *
 * How the pending pool is built honestly: the pool only grows beyond worker demand when a
 * controller (re)loads accepted jobs and no worker takes them. So a `MemoryWorkQueue` is filled
 * with `count` stored and accepted jobs (payload `{"n":i}`, MessageID a random UUID), and a
 * fresh controller with no workers loads it on `start()`. The heap is measured after forced
 * garbage collections before and after `start()`; the difference is what the controller holds
 * for the pending jobs. The queue keeps its own copy of every job; `load()` hands the controller
 * new strings decoded from bytes (as the Deno KV adapter does when it reads a store), so the
 * difference includes each job's MessageID and payload strings. The payload strings' own size
 * is measured the same way (an array of as many equal-shaped fresh strings, minus the array)
 * and subtracted: the result is the heap per pending job beyond its payload.
 *
 *   deno run -A --v8-flags=--expose-gc bench/scenarios/memory_child.ts <count>
 *
 * @module
 */

import process from "node:process";
import {
  BufferedProducer,
  type LoadResult,
  MemoryWorkQueue,
  type QueueCallOptions,
  WorkPullingController,
} from "../../mod.ts";

const count = Number(process.argv[2] ?? 100_000);
const gc = (globalThis as { gc?: () => void }).gc;
if (!gc) throw new Error("run with --v8-flags=--expose-gc");

function heap(): number {
  for (let i = 0; i < 4; i++) gc!();
  return process.memoryUsage().heapUsed;
}

const encoder = new TextEncoder();
const decoder = new TextDecoder();
/** A string with the same characters, in new memory (as read back from storage). */
const fresh = (text: string) => decoder.decode(encoder.encode(text));

/** The memory queue, but `load()` hands out fresh strings, as a real store's load does. */
class FreshLoadQueue extends MemoryWorkQueue {
  override async load(options?: QueueCallOptions): Promise<LoadResult> {
    const result = await super.load(options);
    return {
      epoch: result.epoch,
      state: {
        currentSeq: result.state.currentSeq,
        unconfirmed: result.state.unconfirmed.map((job) => ({
          messageId: fresh(job.messageId),
          seq: job.seq,
          payload: fresh(job.payload),
        })),
      },
    };
  }
}

const queue = new FreshLoadQueue();
{
  const { epoch } = await queue.load();
  const step = queue.batchLimits.maxOperations / 2;
  for (let first = 1; first <= count; first += step) {
    const jobs = [];
    for (let seq = first; seq < Math.min(count + 1, first + step); seq++) {
      jobs.push({ messageId: crypto.randomUUID(), payload: JSON.stringify({ n: seq }) });
    }
    await queue.commit(epoch, {
      store: { firstSeq: first, jobs },
      accept: jobs.map((job) => job.messageId),
    });
  }
}

// The payload strings' own heap: `count` fresh strings like the loaded ones, minus the array.
const emptyArray = heap();
const slots: string[] = new Array(count).fill("");
const withArray = heap();
for (let i = 0; i < count; i++) slots[i] = fresh(JSON.stringify({ n: i + 1 }));
const withStrings = heap();
const payloadBytes = (withStrings - withArray) / count;
const idBytes = (() => {
  for (let i = 0; i < count; i++) slots[i] = fresh(crypto.randomUUID());
  return (heap() - withArray) / count;
})();
slots.length = 0;
void emptyArray;

const controller = new WorkPullingController({
  name: "bench",
  producer: new BufferedProducer(),
  queue,
});
const before = heap();
await controller.start();
const after = heap();
const pending = controller.stats().pending;
if (pending !== count) throw new Error(`expected ${count} pending jobs, got ${pending}`);
const perJob = (after - before) / count;
console.log(JSON.stringify({
  ev: "memory",
  count,
  pending,
  heapBefore: before,
  heapAfter: after,
  perJob,
  payloadBytes,
  idBytes,
  beyondPayload: perJob - payloadBytes,
}));
await controller.close();
process.exit(0);
