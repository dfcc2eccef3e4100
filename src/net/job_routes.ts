/**
 * The HTTP routes of a job queue, beside the worker route of the app (`app.ts`):
 *
 * | route | what | answers |
 * |---|---|---|
 * | `POST /jobs` | add one job `{ payload, messageId?, delay?, runAt?, priority?, attempts?, backoff?, timeout? }` or a batch `{ jobs: [...] }` | `201` new, `200` already known; `429` backlog full |
 * | `GET /jobs/:id` | a job's state, tries, timestamps, result or error, progress | `200`, `404` |
 * | `DELETE /jobs/:id` | cancel it | `200` (cancelled, or finished before), `202` (active: being cancelled), `404` |
 * | `GET /dead-letters?limit=&cursor=` | dead jobs, oldest death first, a page | `200` |
 * | `POST /dead-letters/:id/retry` | a fresh set of tries for one | `200`, `404` |
 * | `POST /dead-letters/retry` | ... for all | `200` `{ retried }` |
 * | `DELETE /dead-letters/:id` | forget one | `204`, `404` |
 * | `POST /pause` | start no new try (jobs are still added; running tries end) | `200` `{ paused: true }` |
 * | `POST /resume` | start tries again | `200` `{ paused: false }` |
 *
 * `POST /jobs` answers as soon as the jobs are in the store (with a durable store: once they
 * survive a crash), whether or not a worker is online. A batch is all or nothing: one invalid
 * job (the answer names `jobs.<index>.<field>`) or a full backlog refuses it whole. Every route
 * needs a client token (the app's guard runs first); bodies are read with every limit checked
 * before the work it protects (`json_body.ts`). A pause or resume answers once it is persisted
 * (with a durable store: it outlives a restart and reaches every instance of a shared flow);
 * `GET /stats` shows `paused`.
 *
 * @module
 */

import type { Context, Hono, MiddlewareHandler } from "hono";
import * as v from "valibot";
import { BacklogFullError } from "../backlog/job_store.ts";
import type { JobQueue, NewJobInput } from "../backlog/job_queue.ts";
import type { JobInfo } from "../lifecycle/job_record.ts";
import type { Logger } from "../core/logger.ts";
import { MAX_ID_LENGTH } from "../protocol/schemas.ts";
import { QueueFencedError } from "../queue/work_queue.ts";
import { bodyRefused, type JsonBodyLimits, readJsonBody } from "./json_body.ts";

/** What the job routes need from the app. */
export interface JobRoutesOptions {
  /** The flow's job queue. */
  readonly queue: JobQueue;
  /** Authenticates a request for a route (the app's guard). */
  readonly guard: (route: "jobs") => MiddlewareHandler;
  /** Limits of a `POST /jobs` body (`countKey` is set here). */
  readonly body: Omit<JsonBodyLimits, "countKey">;
  /** Where a failed submission is reported. */
  readonly logger: Logger;
}

const MessageId = v.pipe(
  v.string(),
  v.minLength(1),
  v.maxLength(MAX_ID_LENGTH),
  v.check((s) => s.trim() !== "", "must not be blank"),
);
const finite = v.pipe(v.number(), v.finite());
/** One job as JSON: the shapes only; ranges are checked by the queue, naming the field. */
const JobBody = v.strictObject({
  payload: v.unknown(),
  messageId: v.optional(MessageId),
  delay: v.optional(finite),
  runAt: v.optional(finite),
  priority: v.optional(finite),
  attempts: v.optional(finite),
  backoff: v.optional(v.record(v.string(), v.unknown())),
  timeout: v.optional(finite),
});
type JobBody = v.InferOutput<typeof JobBody>;
const PageQuery = v.object({
  limit: v.optional(
    v.pipe(
      v.string(),
      v.regex(/^\d{1,4}$/, "must be an integer of 1 to 1000"),
      v.transform(Number),
    ),
  ),
  cursor: v.optional(v.pipe(v.string(), v.maxLength(MAX_ID_LENGTH))),
});

/** Add the job routes to `app` (see the module documentation). */
export function addJobRoutes(app: Hono, options: JobRoutesOptions): void {
  const { queue, guard } = options;
  const Batch = v.strictObject({
    jobs: v.pipe(v.array(JobBody), v.minLength(1), v.maxLength(options.body.maxItems ?? 1000)),
  });
  const Body = v.lazy((input) =>
    typeof input === "object" && input !== null && "jobs" in input ? Batch : JobBody
  );

  app.post("/jobs", guard("jobs"), async (c) => {
    const parsed = await readJsonBody(c.req.raw, Body, { ...options.body, countKey: "jobs" });
    if (!parsed.ok) return bodyRefused(c, parsed);
    const batch = "jobs" in parsed.value;
    const jobs: JobBody[] = "jobs" in parsed.value ? parsed.value.jobs : [parsed.value];
    let receipts;
    try {
      // The shapes are checked here; the queue checks the values (a backoff's fields too).
      receipts = await queue.addMany(jobs as NewJobInput<unknown>[]);
    } catch (error) {
      return refused(c, error, batch, options.logger);
    }
    const created = receipts.every((receipt) => receipt.created);
    const shown = receipts.map((receipt) => ({ ...receipt.job, created: receipt.created }));
    return c.json(batch ? { jobs: shown } : shown[0], created ? 201 : 200);
  });

  app.get("/jobs/:id", guard("jobs"), async (c) => {
    const job = await queue.get(c.req.param("id"));
    c.header("Cache-Control", "no-store");
    return job ? c.json(job) : notFound(c);
  });

  app.delete("/jobs/:id", guard("jobs"), async (c) => {
    const job = await queue.cancel(c.req.param("id"));
    if (!job) return notFound(c);
    return c.json(job, job.state === "active" ? 202 : 200);
  });

  app.get("/dead-letters", guard("jobs"), async (c) => {
    const query = v.safeParse(PageQuery, c.req.query());
    if (!query.success) {
      return c.json({ error: "invalid-query", detail: query.issues[0].message }, 400);
    }
    const limit = Math.min(1000, Math.max(1, query.output.limit ?? 100));
    c.header("Cache-Control", "no-store");
    return c.json(await queue.deadLetters(limit, query.output.cursor));
  });

  app.post("/dead-letters/retry", guard("jobs"), async (c) => {
    return c.json({ retried: await queue.retryAllDead() });
  });

  app.post("/dead-letters/:id/retry", guard("jobs"), async (c) => {
    const job = await queue.retryDead(c.req.param("id"));
    return job ? c.json(job) : notFound(c);
  });

  app.delete("/dead-letters/:id", guard("jobs"), async (c) => {
    return (await queue.deleteDead(c.req.param("id"))) ? c.body(null, 204) : notFound(c);
  });

  for (const paused of [true, false]) {
    app.post(paused ? "/pause" : "/resume", guard("jobs"), async (c) => {
      try {
        await (paused ? queue.pause() : queue.resume());
      } catch (error) {
        options.logger.error(`${paused ? "pausing" : "resuming"} the queue failed`, error);
        c.header("Retry-After", "1");
        return c.json({ error: "unavailable" }, 503);
      }
      return c.json({ paused: queue.paused });
    });
  }
}

function notFound(c: Context) {
  return c.json({ error: "not-found" }, 404);
}

/** The answer to a refused submission. */
function refused(c: Context, error: unknown, batch: boolean, logger: Logger) {
  if (error instanceof BacklogFullError) {
    c.header("Retry-After", String(error.retryAfter));
    return c.json({
      error: "backlog-full",
      limit: error.limit,
      size: error.size,
      adding: error.adding,
    }, 429);
  }
  if (error instanceof TypeError || error instanceof RangeError) {
    // The queue names the field as `jobs.<index>.<field>`; a single job is the body itself.
    const detail = batch ? error.message : error.message.replace(/^jobs\.0\./, "");
    const tooLarge = /payload is \d+ bytes/.test(error.message);
    return c.json(
      { error: tooLarge ? "payload-too-large" : "invalid-body", detail },
      tooLarge ? 413 : 400,
    );
  }
  const fenced = error instanceof QueueFencedError;
  logger.error("adding jobs failed", error);
  c.header("Retry-After", "1");
  return c.json({ error: fenced ? "not-serving" : "unavailable" }, 503);
}

/** A job as an answer shows it. */
export type JobAnswer = JobInfo & { readonly created?: boolean };
