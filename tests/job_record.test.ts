/**
 * A job's record as a store keeps it: the records a new job, a started try and an ended try get,
 * field by field (stores persist them as they are, so no field may appear or linger unasked), and
 * the plan a submission's options make.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { finishTry, newRecord, startTry } from "../src/lifecycle/job_record.ts";
import { planJob, resolveDefaults } from "../src/lifecycle/job_options.ts";

const defaults = resolveDefaults({ attempts: 3, backoff: { type: "fixed", delay: 100 } });

describe("job records", () => {
  test("a plan and a new record carry only the options the job set", () => {
    assert.deepEqual(planJob({}, 1000), { runAt: 1000, delayed: false, priority: 0 });
    const plan = planJob({ delay: 5, priority: 2, attempts: 4, timeout: 50 }, 1000);
    assert.deepEqual(plan, {
      runAt: 1005,
      delayed: true,
      priority: 2,
      attempts: 4,
      timeout: 50,
    });
    assert.deepEqual(newRecord("j", planJob({}, 1000), 1000).own, {});
    const record = newRecord("j", plan, 1000);
    assert.deepEqual(record, {
      id: "j",
      state: "waiting",
      priority: 2,
      runAt: 1005,
      enqueuedAt: 1000,
      attempts: 0,
      own: { attempts: 4, timeout: 50 },
    });
    const backoff = planJob({ backoff: { type: "fixed", delay: 7 } }, 0);
    assert.deepEqual(Object.keys(newRecord("k", backoff, 0).own), ["backoff"]);
  });

  test("a completed try copies the record, and leaves an earlier completion's result out", () => {
    const started = startTry(newRecord("j", planJob({}, 0), 0), 10);
    const completed = finishTry(
      started,
      { kind: "completed", worker: "w1", result: '{"n":1}' },
      defaults,
      20,
      () => 0,
    );
    assert.deepEqual(completed, {
      ...started,
      state: "completed",
      worker: "w1",
      finishedAt: 20,
      result: '{"n":1}',
    });
    assert.equal(started.state, "active", "the record it came from is unchanged");
    // Run again (a finished job stored again): a completion without a result keeps none.
    const again = finishTry(startTry(completed, 30), { kind: "completed" }, defaults, 40, () => 0);
    assert.equal("result" in again, false);
    const { result: _, ...rerun } = startTry(completed, 30);
    assert.deepEqual(again, { ...rerun, state: "completed", finishedAt: 40 });
    assert.equal(completed.result, '{"n":1}', "the earlier record keeps its result");
    const failed = finishTry(
      started,
      { kind: "failed", worker: "w2", error: { name: "Error", message: "boom" } },
      defaults,
      20,
      () => 0,
    );
    assert.deepEqual([failed.state, failed.runAt, failed.worker], ["failed", 120, "w2"]);
  });
});
