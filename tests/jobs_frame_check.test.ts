/**
 * `checkJobsFrame` accepts exactly what `JobsFrameSchema` accepts: seeded random jobs frames,
 * valid ones and ones broken in one place (a key missing or extra, a wrong type, a value out of
 * range, an empty or oversized job list), must never be accepted when the schema refuses them,
 * and `decodeControllerFrame` must give the schema's verdict and value on every one.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import * as v from "valibot";
import { checkJobsFrame } from "../src/protocol/jobs_frame_check.ts";
import { decodeControllerFrame } from "../src/protocol/codec.ts";
import { JobsFrameSchema, MAX_WINDOW } from "../src/protocol/schemas.ts";
import { ODD_VALUES } from "./support/odd_values.ts";
import { prng } from "./support/waiting.ts";

function randomFrame(random: () => number): Record<string, unknown> {
  const pick = <T>(values: readonly T[]) => values[Math.floor(random() * values.length)];
  const job = (): Record<string, unknown> => {
    const value: Record<string, unknown> = {
      id: `m${Math.floor(random() * 1e6)}`,
      payload: pick([{ n: 1 }, "text", 3, null, [1, 2]]),
    };
    if (random() < 0.3) value.attempt = pick([1, 2, 9]);
    if (random() < 0.3) value.timeout = pick([1, 500]);
    if (random() < 0.2) value.confirmFirst = true;
    return value;
  };
  const frame: Record<string, unknown> = {
    type: "jobs",
    session: "s1",
    seq: 1 + Math.floor(random() * 1000),
    jobs: Array.from({ length: 1 + Math.floor(random() * 4) }, job),
  };
  if (random() < 0.4) return frame; // valid
  const jobs = frame.jobs as Record<string, unknown>[];
  const roll = random();
  if (roll < 0.05) frame.jobs = [];
  else if (roll < 0.055) frame.jobs = Array.from({ length: MAX_WINDOW + 1 }, job);
  else {
    const target = random() < 0.6 ? pick(jobs) : frame;
    const key = pick([...Object.keys(target), "extra", "payload", "id", "__proto__"]);
    if (random() < 0.3) delete target[key];
    else target[key] = pick(ODD_VALUES);
  }
  return frame;
}

test("checkJobsFrame never accepts a frame the schema refuses, and decoding agrees", () => {
  const random = prng(99);
  let fast = 0;
  for (let i = 0; i < 10_000; i++) {
    // Through JSON, as frames arrive (a "__proto__" key becomes an own property).
    const text = JSON.stringify(randomFrame(random));
    const parsed = v.safeParse(JobsFrameSchema, JSON.parse(text));
    const checked = checkJobsFrame(JSON.parse(text));
    if (checked) {
      fast += 1;
      assert.ok(parsed.success, `accepted a frame the schema refuses: ${text}`);
    }
    const decoded = decodeControllerFrame(text);
    assert.equal(decoded.ok, parsed.success, text);
    if (decoded.ok && parsed.success) assert.deepEqual(decoded.frame, parsed.output);
  }
  assert.ok(fast > 2_500, `the fast check answered only ${fast} times`);
});
