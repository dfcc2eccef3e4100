import { test } from "node:test";
import assert from "node:assert/strict";
import { DenoKvWorkQueue } from "../src/queue/deno_kv/queue.ts";
import { MemoryWorkQueue } from "../src/queue/memory_queue.ts";
import type { QueueBatch, WorkQueueState } from "../src/queue/work_queue.ts";
import { openKv } from "./fixtures/open_kv.ts";
import { prng } from "./support/waiting.ts";

// The Deno KV queue keeps acceptance in runs and completions in shared records: random batches
// (out-of-order accepts, confirmations before accepts, resubmissions, reloads by new handles)
// must leave it in the state the in-memory queue reaches with the same calls.

const IDS = Array.from({ length: 40 }, (_, i) => `id-${i}`);

async function settle<T>(promise: Promise<T>): Promise<{ value?: T; error?: Error }> {
  try {
    return { value: await promise };
  } catch (error) {
    return { error: error as Error };
  }
}

function snapshot(state: WorkQueueState) {
  return {
    currentSeq: state.currentSeq,
    unconfirmed: state.unconfirmed.map(({ messageId, seq, payload }) => [messageId, seq, payload]),
  };
}

for (const seed of [1, 2, 3, 4, 5, 6]) {
  test(`DenoKvWorkQueue matches MemoryWorkQueue over random batches (seed ${seed})`, async () => {
    const random = prng(seed);
    const pick = <T>(items: readonly T[]) => items[Math.floor(random() * items.length)];
    const kv = await openKv(":memory:");
    try {
      const memory = new MemoryWorkQueue();
      let durable = new DenoKvWorkQueue(kv, { completedWindow: 5 });
      let memoryEpoch = (await memory.load()).epoch;
      let durableEpoch = (await durable.load()).epoch;
      let currentSeq = 0;
      let recent: string[] = []; // recently stored MessageIDs: most accepts name one of them
      let conflicts = 0;
      for (let step = 0; step < 300; step++) {
        const batch: { store?: QueueBatch["store"]; accept?: string[]; confirm?: string[] } = {};
        if (random() < 0.6) {
          const jobs = Array.from({ length: 1 + Math.floor(random() * 6) }, () => {
            const messageId = pick(IDS);
            return { messageId, payload: JSON.stringify({ messageId, step }) };
          });
          batch.store = { firstSeq: currentSeq + 1, jobs };
          recent = [...recent, ...jobs.map((job) => job.messageId)].slice(-12);
        }
        if (recent.length > 0 && random() < 0.6) {
          batch.accept = Array.from({ length: 1 + Math.floor(random() * 5) }, () => pick(recent));
        }
        if (random() < 0.6) {
          batch.confirm = Array.from({ length: 1 + Math.floor(random() * 5) }, () => pick(IDS));
        }
        const [expected, actual] = await Promise.all([
          settle(memory.commit(memoryEpoch, batch)),
          settle(durable.commit(durableEpoch, batch)),
        ]);
        // An accept of a MessageID that is not retained is a conflict in both, applying nothing.
        assert.equal(actual.error?.name, expected.error?.name, `outcome at step ${step}`);
        if (expected.error) conflicts += 1;
        assert.deepEqual(actual.value?.stored, expected.value?.stored, `stored at step ${step}`);
        for (const result of expected.value?.stored ?? []) {
          currentSeq = Math.max(currentSeq, result.seq);
        }
        if (random() < 0.15) {
          // A new handle reads everything back from KV, as a restarted controller does.
          if (random() < 0.5) durable = new DenoKvWorkQueue(kv, { completedWindow: 5 });
          const reloaded = await durable.load();
          const model = await memory.load();
          durableEpoch = reloaded.epoch;
          memoryEpoch = model.epoch;
          assert.deepEqual(
            snapshot(reloaded.state),
            snapshot(model.state),
            `state at step ${step}`,
          );
          // The KV queue remembers fewer completions (at least the last 5, here), each of them one
          // the model remembers: the latest completion of its MessageID.
          const completed = new Set(
            model.state.recentlyCompleted?.map((m) => `${m.messageId}@${m.seq}`),
          );
          for (const m of reloaded.state.recentlyCompleted ?? []) {
            assert.ok(completed.has(`${m.messageId}@${m.seq}`), `${m.messageId}@${m.seq}`);
          }
        }
      }
      assert.ok(conflicts < 150, `${conflicts} of 300 batches were conflicts`);
      const final = await new DenoKvWorkQueue(kv, { completedWindow: 5 }).load();
      assert.deepEqual(snapshot(final.state), snapshot((await memory.load()).state));
    } finally {
      kv.close();
    }
  });
}
