/**
 * The job handler of `workpull demo`'s worker processes: it works for the few milliseconds the
 * payload asks, then appends the job's MessageID to this process's ledger (the file named by
 * `WORKPULL_DEMO_LOG`), one line a finished run. The demo counts jobs run, lost and duplicated
 * from these ledgers: what the handlers really did, not what the server believes.
 *
 * @module
 */

import { appendFileSync } from "node:fs";
import process from "node:process";

/** The environment variable naming the ledger file. */
export const DEMO_LOG_ENV = "WORKPULL_DEMO_LOG";

/** Run one demo job: wait `payload.ms`, then record it. */
export default async function demoJob(
  { messageId, payload }: { messageId: string; payload: { ms?: number } },
): Promise<void> {
  const ms = typeof payload?.ms === "number" ? payload.ms : 1;
  await new Promise((resolve) => setTimeout(resolve, ms));
  const ledger = process.env[DEMO_LOG_ENV];
  if (ledger) appendFileSync(ledger, `${messageId}\n`);
}
