/**
 * Fencing with real processes: two controller processes on one Deno KV file and one prefix.
 * The one that loaded later owns the queue; the earlier one fails once and stops writing.
 */

import { after, test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import {
  ControllerProcess,
  killAll,
  removeDir,
  results,
  scenarioDir,
  sourceIds,
} from "./fixtures/durable_support.ts";

after(killAll);

test("a second controller process fences the first: one delivery-failed there, the second finishes the work", async () => {
  const dir = scenarioDir(600);
  const workers = 3, window = 10;
  // A works slowly (20 ms a job), so that it is busy writing when B loads.
  const a = new ControllerProcess({
    dir,
    events: join(dir, "events-a.jsonl"),
    run: 1,
    workers,
    window,
    handlerDelayMs: 20,
  });
  let b: ControllerProcess | undefined;
  try {
    await a.whileRunning(() => results(dir).length >= 30, "30 results from A");
    b = new ControllerProcess({
      dir,
      events: join(dir, "events-b.jsonl"),
      run: 2,
      until: "drained",
    });
    const failed = await a.until("failed");
    const ranByA = () => results(dir).filter((line) => line.run === 1).length;
    const ranByAAtFailure = ranByA();
    await b.until("drained", 30_000);
    assert.equal((await b.wait()).code, 0, b.stderr);

    assert.ok(["store", "accept", "confirm"].includes(failed.stage), failed.stage);
    assert.equal(failed.error.name, "QueueFencedError");
    const [loadedA] = a.of("loaded");
    const [loadedB] = b.of("loaded");
    assert.ok(loadedB.epoch > loadedA.epoch, "B loaded under a newer epoch");
    assert.deepEqual(b.of("failed"), [], "B keeps working");
    assert.deepEqual(b.of("restarted"), [], "B never restarted");
    assert.ok(!a.done, "A's process lives on after its controller stopped");
    assert.equal((await a.terminate()).code, 0, a.stderr);
    // Read after A's exit: its workers kept confirming jobs in flight, which a failed
    // controller drops without a second event, and a restart (which would fence B) never came.
    assert.deepEqual(a.of("failed"), [failed], "exactly one delivery-failed event");
    assert.deepEqual(a.of("restarted"), []);
    assert.ok(
      ranByA() <= ranByAAtFailure + workers * window,
      "A dispatched nothing after the fence (only jobs already in flight finished)",
    );
    console.log(
      `A failed at ${failed.stage} after ${ranByAAtFailure} results; ` +
        `"database is locked" retries: A ${a.of("locked").length}, B ${b.of("locked").length}`,
    );
    const ran = new Set(results(dir).map((line) => line.id));
    assert.deepEqual(sourceIds(dir).filter((id) => !ran.has(id)), [], "every job ran");
  } finally {
    await a.kill();
    await b?.kill();
    removeDir(dir);
  }
});
