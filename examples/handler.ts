/**
 * A worker module for `workpull worker`: its default export handles each job. What it returns is
 * the job's result; a throw fails the try, which is retried (after the flow's backoff, on any
 * worker) until the flow's attempts run out and the job becomes a dead letter.
 *
 *   npm run cli -- worker examples/handler.ts
 */

import type { Delivery } from "../mod.ts";

export default function double({ payload, messageId, attempt }: Delivery<{ n: number }>) {
  // Delivery is at-least-once: key side effects by messageId, a job may run twice.
  if (typeof payload?.n !== "number") throw new Error(`job ${messageId}: no number n`);
  console.log(`job ${messageId} (try ${attempt}): ${payload.n} * 2`);
  return payload.n * 2;
}
