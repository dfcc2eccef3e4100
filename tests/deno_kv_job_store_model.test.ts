import { test } from "node:test";
import assert from "node:assert/strict";
import { DenoKvJobStore } from "../src/backlog/deno_kv/job_store.ts";
import { MemoryJobStore } from "../src/backlog/memory_job_store.ts";
import type { JobStore, ReadyJob } from "../src/backlog/job_store.ts";
import { SimulatedClock } from "../src/core/clock.ts";
import { planJob } from "../src/lifecycle/job_options.ts";
import type { JobOutcome } from "../src/lifecycle/job_record.ts";
import type { QueueBatch } from "../src/queue/work_queue.ts";
import { openKv } from "./fixtures/open_kv.ts";
import { prng } from "./support/waiting.ts";

// The Deno KV job store keys jobs by slot, keeps small payloads in the job's value and writes the
// tries it starts from the backlog as one record: random calls (enqueues with repeated
// MessageIDs, takes, stores from the backlog and from outside it, accepts, confirmations that
// complete or fail, calls in flight together that share a commit, reloads by new handles) must
// leave it where the in-memory store gets.

const IDS = Array.from({ length: 30 }, (_, i) => `job-${i}`);
const DEFAULTS = { attempts: 3, backoff: { type: "fixed", delay: 0 } } as const;

async function settle<T>(promise: Promise<T>): Promise<{ value?: T; error?: Error }> {
  try {
    return { value: await promise };
  } catch (error) {
    return { error: error as Error };
  }
}

async function jobs(store: JobStore) {
  return await Promise.all(IDS.map((id) => store.get(id)));
}

for (const seed of [1, 2, 3, 4, 5, 6]) {
  test(`DenoKvJobStore matches MemoryJobStore over random calls (seed ${seed})`, async () => {
    const random = prng(seed);
    const pick = <T>(items: readonly T[]) => items[Math.floor(random() * items.length)];
    const kv = await openKv(":memory:");
    const clock = new SimulatedClock();
    clock.advance(1_000_000);
    const open = () => new DenoKvJobStore(kv, { prefix: ["model"], clock, defaults: DEFAULTS });
    try {
      const memory = new MemoryJobStore({ clock, defaults: DEFAULTS });
      let durable = open();
      let memoryEpoch = (await memory.load()).epoch;
      let durableEpoch = (await durable.load()).epoch;
      let currentSeq = 0;
      let taken: { messageId: string; payload: string }[] = [];
      let active: string[] = [];
      for (let step = 0; step < 250; step++) {
        clock.advance(Math.floor(random() * 3));
        const roll = random();
        if (roll >= 0.85 && roll < 0.92) {
          // Calls made together share a commit (group commit): an enqueue, a take, a store of
          // what was taken and confirmations, all in flight at once, then compared one by one.
          const batch = Array.from({ length: 1 + Math.floor(random() * 3) }, () => {
            const id = pick(IDS);
            return { id, payload: JSON.stringify({ id, step }), plan: planJob({}, clock.now()) };
          });
          const store: QueueBatch = { store: { firstSeq: currentSeq + 1, jobs: taken } };
          const confirm = active.length > 0 ? [pick(active)] : [];
          const outcomes = new Map<string, JobOutcome>(
            confirm.filter(() => random() < 0.4).map((id) => [
              id,
              { kind: "failed", error: { name: "Error", message: `step ${step}` } },
            ]),
          );
          const calls = (s: MemoryJobStore | DenoKvJobStore, epoch: number) => [
            settle(s.enqueue(batch)),
            settle(s.take(2)),
            settle(s.commit(epoch, store)),
            settle(s.commit(epoch, { confirm, outcomes })),
          ];
          const expected = await Promise.all(calls(memory, memoryEpoch));
          const actual = await Promise.all(calls(durable, durableEpoch));
          assert.deepEqual(actual, expected, `group at step ${step}`);
          active.push(...taken.map((job) => job.messageId));
          taken = (expected[1].value as readonly ReadyJob[]).map(
            ({ messageId, payload }) => ({ messageId, payload }),
          );
          const stored = expected[2].value as { stored: { seq: number }[] } | undefined;
          for (const result of stored?.stored ?? []) currentSeq = Math.max(currentSeq, result.seq);
          active = active.filter((id) => !confirm.includes(id));
        } else if (roll < 0.25) {
          const batch = Array.from({ length: 1 + Math.floor(random() * 4) }, () => {
            const id = pick(IDS);
            const plan = planJob({ priority: Math.floor(random() * 2) }, clock.now());
            return { id, payload: JSON.stringify({ id, step }), plan };
          });
          const [expected, actual] = await Promise.all([
            memory.enqueue(batch),
            durable.enqueue(batch),
          ]);
          assert.deepEqual(actual, expected, `enqueue at step ${step}`);
        } else if (roll < 0.45) {
          const max = 1 + Math.floor(random() * 5);
          const [expected, actual] = await Promise.all([memory.take(max), durable.take(max)]);
          assert.deepEqual(actual, expected, `take at step ${step}`);
          taken.push(...expected.map(({ messageId, payload }) => ({ messageId, payload })));
        } else if (roll < 0.65) {
          // Store what was taken, and now and then a job from outside the backlog.
          const outside = random() < 0.2 ? [{ messageId: pick(IDS), payload: '"outside"' }] : [];
          const batch: QueueBatch = {
            store: { firstSeq: currentSeq + 1, jobs: [...taken, ...outside] },
            ...(outside.length > 0 && random() < 0.5 ? { accept: [outside[0].messageId] } : {}),
          };
          taken = [];
          const [expected, actual] = await Promise.all([
            settle(memory.commit(memoryEpoch, batch)),
            settle(durable.commit(durableEpoch, batch)),
          ]);
          assert.equal(actual.error?.message, expected.error?.message, `store at step ${step}`);
          assert.deepEqual(actual.value, expected.value, `stored at step ${step}`);
          for (const result of expected.value?.stored ?? []) {
            currentSeq = Math.max(currentSeq, result.seq);
          }
          active.push(...(batch.store?.jobs.map((job) => job.messageId) ?? []));
        } else if (roll < 0.85 && active.length > 0) {
          const confirm = Array.from({ length: 1 + Math.floor(random() * 4) }, () => pick(active));
          const outcomes = new Map<string, JobOutcome>(
            confirm.filter(() => random() < 0.4).map((id) => [
              id,
              { kind: "failed", error: { name: "Error", message: `step ${step}` } },
            ]),
          );
          const accept = confirm.filter(() => random() < 0.3);
          const batch: QueueBatch = { confirm, outcomes, ...(accept.length ? { accept } : {}) };
          const [expected, actual] = await Promise.all([
            settle(memory.commit(memoryEpoch, batch)),
            settle(durable.commit(durableEpoch, batch)),
          ]);
          assert.equal(actual.error?.message, expected.error?.message, `confirm at step ${step}`);
          active = active.filter((id) => !confirm.includes(id) || random() < 0.2);
        } else if (taken.length === 0) {
          // A new handle reads everything back from KV, as a restarted process does.
          durable.close();
          durable = open();
          const [model, reloaded] = await Promise.all([memory.load(), durable.load()]);
          memoryEpoch = model.epoch;
          durableEpoch = reloaded.epoch;
          // (Which completions a load remembers is not compared: the KV store keeps none.)
          assert.deepEqual(
            [reloaded.state.currentSeq, reloaded.state.unconfirmed],
            [model.state.currentSeq, model.state.unconfirmed],
            `load at step ${step}`,
          );
        }
        assert.deepEqual(durable.counts(), memory.counts(), `counts at step ${step}`);
        assert.deepEqual(await jobs(durable), await jobs(memory), `jobs at step ${step}`);
      }
      durable.close();
      const final = open();
      await final.load();
      assert.deepEqual(await jobs(final), await jobs(memory));
      final.close();
    } finally {
      kv.close();
    }
  });
}
