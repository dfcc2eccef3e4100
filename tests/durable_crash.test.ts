/**
 * Crash tests with real processes: a controller process on a Deno KV file, fed by the example
 * file-backed producer, killed with SIGKILL and restarted on the same files.
 */

import { after, describe, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import process from "node:process";
import {
  ControllerProcess,
  type CrashPoint,
  killAll,
  prng,
  removeDir,
  results,
  scenarioDir,
  sourceIds,
} from "./fixtures/durable_support.ts";

after(killAll);

/** Run a controller process on `dir` until it drained, then check it published no failure. */
async function drainRun(dir: string, run: number): Promise<ControllerProcess> {
  const child = new ControllerProcess({
    dir,
    events: join(dir, `events-${run}.jsonl`),
    run,
    until: "drained",
  });
  try {
    await child.until("drained", 20_000);
    assert.deepEqual((await child.wait()).code, 0, child.stderr);
    assert.deepEqual(child.of("failed"), [], "no delivery-failed event");
    return child;
  } finally {
    await child.kill();
  }
}

/** How many times each MessageID appears in the results. */
function tally(dir: string): Map<string, number> {
  const counts = new Map<string, number>();
  for (const line of results(dir)) counts.set(line.id, (counts.get(line.id) ?? 0) + 1);
  return counts;
}

describe("durable delivery across SIGKILL of the controller process", () => {
  test("random SIGKILLs: every job of the source is dispatched at least once", async () => {
    const JOBS = 800;
    // Kill points depend on timing as well as on the seed; set WORKPULL_CRASH_SEED to soak.
    const seed = Number(process.env.WORKPULL_CRASH_SEED ?? 20261130);
    const random = prng(seed);
    const dir = scenarioDir(JOBS);
    try {
      const kills: string[] = [];
      for (let run = 1; run <= 8; run++) {
        const before = results(dir).length;
        if (tally(dir).size === JOBS) break;
        const child = new ControllerProcess({ dir, events: join(dir, `events-${run}.jsonl`), run });
        try {
          // Kill during the reload (right after load), or after a random number of new results.
          if (random() < 0.25) {
            await child.until("loaded");
            kills.push(`run ${run}: right after load`);
          } else {
            const growth = 1 + Math.floor(random() * 80);
            await child.whileRunning(
              () =>
                results(dir).length >= before + growth || tally(dir).size === JOBS ||
                child.of("failed").length > 0,
              `${growth} more results`,
            );
            kills.push(`run ${run}: after ${growth} more results`);
          }
        } finally {
          await child.kill();
        }
        assert.deepEqual(child.of("failed"), [], `run ${run} published no failure`);
      }
      await drainRun(dir, 99);
      const counts = tally(dir);
      const missing = sourceIds(dir).filter((id) => !counts.has(id));
      assert.deepEqual(missing, [], "at-least-once: every job of the source ran");
      const duplicates = [...counts].filter(([, n]) => n > 1).length;
      const total = results(dir).length;
      console.log(
        `seed ${seed}: ${kills.length} kills (${kills.join("; ")}); ` +
          `${total} results for ${JOBS} jobs, ${duplicates} jobs ran more than once`,
      );
    } finally {
      removeDir(dir);
    }
  });

  const points: [CrashPoint, string][] = [
    ["stored", "stored, before the producer acknowledged Stored"],
    ["stored-ack", "stored and acknowledged, before the Accept was written"],
    ["accepted", "accepted, before the producer marked it (reloaded and resubmitted)"],
  ];
  for (const [at, when] of points) {
    test(`a job ${when} is dispatched exactly once, at its original store sequence`, async () => {
      const dir = scenarioDir(60);
      const target = "job-0030";
      try {
        const first = new ControllerProcess({
          dir,
          events: join(dir, "events-1.jsonl"),
          run: 1,
          crash: { at, messageId: target },
        });
        try {
          await first.until("crash"); // it killed itself right after writing this
        } finally {
          await first.kill(); // reaps it (a no-op signal if it is gone already)
        }
        assert.equal((await first.wait()).signal, "SIGKILL");
        assert.deepEqual(first.of("crash").map(({ at, messageId }) => ({ at, messageId })), [{
          at,
          messageId: target,
        }]);
        const storedAt = first.of("stored").flatMap((e) => e.jobs).find((j) =>
          j.messageId === target
        );
        assert.ok(storedAt, "the job was stored before the crash");
        assert.ok(!tally(dir).has(target), "it had not run");

        const second = await drainRun(dir, 2);
        const [loaded] = second.of("loaded");
        assert.equal(
          loaded.unconfirmed.includes(target),
          at === "accepted",
          "the reload holds it only if its Accept landed",
        );
        const [ready] = second.of("ready");
        assert.ok(ready.recovered.includes(target), "the producer offers it again (unmarked)");
        const restored = second.of("stored").flatMap((e) => e.jobs).filter((j) =>
          j.messageId === target
        );
        assert.deepEqual(
          restored.map((j) => j.seq),
          [storedAt.seq],
          "first write wins: same sequence",
        );
        assert.equal(tally(dir).get(target), 1, "dispatched exactly once");
        const missing = sourceIds(dir).filter((id) => !tally(dir).has(id));
        assert.deepEqual(missing, []);
      } finally {
        removeDir(dir);
      }
    });
  }

  test("why the example marks jobs when accepted: marking at Stored loses a job whose Accept did not land", async () => {
    // The producer contract says to mark before acknowledging Stored. When the producer dies
    // with the controller, a job marked then whose Accept never landed is neither reloaded
    // (the queue reloads accepted jobs only) nor offered again (it is marked).
    const dir = scenarioDir(60);
    const target = "job-0030";
    try {
      const first = new ControllerProcess({
        dir,
        events: join(dir, "events-1.jsonl"),
        run: 1,
        markOnStored: true,
        crash: { at: "stored-ack", messageId: target },
      });
      try {
        await first.until("crash"); // it killed itself right after writing this
      } finally {
        await first.kill();
      }
      const storedAt = first.of("stored").flatMap((e) => e.jobs).find((j) =>
        j.messageId === target
      );
      assert.ok(storedAt);
      const second = new ControllerProcess({
        dir,
        events: join(dir, "events-2.jsonl"),
        run: 2,
        markOnStored: true,
        until: "idle",
      });
      try {
        const idle = await second.until("idle", 20_000);
        assert.equal((await second.wait()).code, 0, second.stderr);
        assert.ok(!second.of("loaded")[0].unconfirmed.includes(target), "not reloaded");
        assert.ok(!second.of("ready")[0].recovered.includes(target), "not offered again");
        assert.ok(!tally(dir).has(target), "it never ran");
        assert.ok(idle.jobsInKv.includes(storedAt.seq), "stored, never accepted, kept forever");
      } finally {
        await second.kill();
      }
    } finally {
      removeDir(dir);
    }
  });
});
