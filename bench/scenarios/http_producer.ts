/**
 * A remote producer, one process: it submits jobs to a workpull server over HTTP, `POST /jobs`
 * with a client token, in batches (`{"jobs":[{"payload":{"n":i}},…]}`), keeping `concurrency`
 * requests in flight. Configured by `WORKPULL_BENCH` (JSON: `url` of the jobs route, `token`,
 * `jobs`, `batch`, `concurrency`). Every batch must be answered with a 2xx; anything else ends
 * the process with `{"ev":"error","status":…,"body":…}` and exit code 1.
 *
 * Reports (JSON lines on stdout): `{"ev":"ready"}`; on the command `{"cmd":"go"}`,
 * `{"ev":"start","t":…}` before the first request and `{"ev":"posted","t":…,"batches":n}`
 * when every batch has been answered. Times are `performance.timeOrigin + performance.now()`.
 *
 * @module
 */

import process from "node:process";
import { onCommand } from "../lib/commands.ts";

/** The configuration in `WORKPULL_BENCH`. */
export interface HttpProducerConfig {
  readonly url: string;
  readonly token: string;
  readonly jobs: number;
  readonly batch: number;
  readonly concurrency: number;
}

const config: HttpProducerConfig = JSON.parse(process.env.WORKPULL_BENCH ?? "{}");
const now = () => performance.timeOrigin + performance.now();
const out = (line: Record<string, unknown>) => process.stdout.write(`${JSON.stringify(line)}\n`);

/** Post batches until `config.jobs` are submitted; one such loop per request in flight. */
let next = 0;
let batches = 0;
async function postLoop(): Promise<void> {
  while (next < config.jobs) {
    const first = next;
    const last = Math.min(config.jobs, first + config.batch);
    next = last;
    let body = '{"jobs":[';
    for (let n = first; n < last; n++) body += `${n === first ? "" : ","}{"payload":{"n":${n}}}`;
    const response = await fetch(config.url, {
      method: "POST",
      headers: { authorization: `Bearer ${config.token}`, "content-type": "application/json" },
      body: `${body}]}`,
    });
    const text = await response.text();
    if (!response.ok) {
      out({ ev: "error", status: response.status, body: text.slice(0, 500) });
      process.exit(1);
    }
    batches += 1;
  }
}

async function go(): Promise<void> {
  out({ ev: "start", t: now() });
  await Promise.all(Array.from({ length: config.concurrency }, postLoop));
  out({ ev: "posted", t: now(), batches });
}

onCommand((command) => {
  if (command.cmd !== "go") return;
  go().catch((error) => {
    out({ ev: "error", status: 0, body: String(error) });
    process.exit(1);
  });
});
out({ ev: "ready" });
