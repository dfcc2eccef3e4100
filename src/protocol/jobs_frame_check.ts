/**
 * The check of a `jobs` frame on the worker's hot path, without valibot's copies.
 *
 * Every job a worker runs arrives in a jobs frame, and `JobsFrameSchema` builds a validated copy
 * of each job: about half of what decoding a frame costs a worker. A freshly parsed frame belongs
 * to nobody else, so it can be used as it is once checked. This checks the frame field by field
 * exactly as the schema would and answers only when it is sure it is valid; for anything else the
 * schema decides, and its issue names the problem.
 *
 * @module
 */

import { isId, isIntegerIn } from "./field_checks.ts";
import { type JobsFrame, MAX_SEQ, MAX_WINDOW } from "./schemas.ts";

/**
 * `json` (the output of `JSON.parse`) as a valid jobs frame, or undefined when unsure.
 *
 * @example
 * ```ts
 * import { checkJobsFrame } from "./jobs_frame_check.ts";
 * const frame = JSON.parse('{"type":"jobs","session":"s","seq":1,"jobs":[{"id":"a","payload":1}]}');
 * console.assert(checkJobsFrame(frame) === frame);
 * console.assert(checkJobsFrame({ ...frame, seq: 0 }) === undefined);
 * ```
 */
export function checkJobsFrame(json: unknown): JobsFrame | undefined {
  if (typeof json !== "object" || json === null) return undefined;
  const frame = json as Record<string, unknown>;
  let fields = 0;
  for (const key in frame) {
    if (key !== "type" && key !== "session" && key !== "seq" && key !== "jobs") return undefined;
    fields += 1;
  }
  if (fields !== 4 || frame.type !== "jobs" || !isId(frame.session)) return undefined;
  if (!isIntegerIn(frame.seq, 1, MAX_SEQ)) return undefined;
  const jobs = frame.jobs;
  if (!Array.isArray(jobs) || jobs.length < 1 || jobs.length > MAX_WINDOW) return undefined;
  for (let i = 0; i < jobs.length; i++) {
    const job = jobs[i];
    if (typeof job !== "object" || job === null) return undefined;
    let hasId = false;
    let hasPayload = false;
    for (const key in job) {
      const value = (job as Record<string, unknown>)[key];
      if (key === "id") {
        if (!isId(value)) return undefined;
        hasId = true;
      } else if (key === "payload") hasPayload = true;
      else if (key === "attempt") {
        if (!isIntegerIn(value, 1, MAX_SEQ)) return undefined;
      } else if (key === "timeout") {
        if (!isIntegerIn(value, 1, Number.MAX_SAFE_INTEGER)) return undefined;
      } else if (key === "confirmFirst") {
        if (value !== true) return undefined;
      } else return undefined;
    }
    if (!hasId || !hasPayload) return undefined;
  }
  return json as JobsFrame;
}
