/**
 * The soak's producer process: submits jobs over `POST /jobs` at the target rate and keeps its
 * progress on disk, so that it can itself be killed and restarted.
 *
 * Jobs go in batches of consecutive job numbers (MessageIDs `j<n>`, payload `{ n }`), about one
 * batch every 50 ms, with at most 8 requests in flight. With several instances (`--instances`)
 * the batches go to each instance's `POST /jobs` in turn, and a retried batch to the next one. Before each attempt the batch is written
 * to the journal (`send`); only a 2xx answer makes it acknowledged (`ack`, written after the
 * answer). Anything else (a network error, a 503 "not accepted yet", any 5xx) is retried with the
 * same MessageIDs after a backoff, for as long as it takes. A 4xx other than 408 and 429 means the
 * soak itself is wrong: the process stops with exit code 2.
 *
 * On start it reads every earlier incarnation's journal: batches sent but never acknowledged are
 * sent again first (same MessageIDs), and new job numbers continue after the highest one issued.
 * On SIGTERM it issues nothing new, lets the requests in flight finish (at most 15 s) and exits.
 *
 * @module
 */

import { readdirSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { Journal, readJournal, wallClock } from "./journal.ts";
import { announce, type ChildBase, childConfig } from "./lifeline.ts";
import { messageId } from "./records.ts";

/** The configuration of the producer process. */
export interface ProducerConfig extends ChildBase {
  /** The `POST /jobs` URLs: the controller's, or every instance's. */
  readonly urls: readonly string[];
  /** A client token. */
  readonly token: string;
  /** Jobs per second. */
  readonly rate: number;
  /** The directory of producer journals. */
  readonly dir: string;
}

const MAX_IN_FLIGHT = 8;
/** After an outage, catch up at most this much of the schedule, ms. */
const MAX_DEBT_MS = 2000;
const STOP_GRACE_MS = 15_000;
const REQUEST_TIMEOUT_MS = 30_000;

const config = childConfig<ProducerConfig>();
const pid = process.pid;
const { resume, next: firstNew } = previousProgress(config.dir);
const journal = new Journal(join(config.dir, `${pid}.jsonl`));
journal.write({ ev: "start", pid, resume, next: firstNew, t: wallClock() });

const batchSize = Math.min(1000, Math.max(1, Math.round(config.rate / 20)));
const backlog: [number, number][] = [...resume];
let next = firstNew;
let issued = 0;
let inFlight = 0;
let stopping = false;
const startedAt = performance.now();

const ticker = setInterval(() => {
  if (stopping) return;
  const due = config.rate * (performance.now() - startedAt) / 1000;
  issued = Math.max(issued, due - config.rate * MAX_DEBT_MS / 1000);
  while (inFlight < MAX_IN_FLIGHT) {
    const resent = backlog.shift();
    if (resent) {
      void submit(resent);
      continue;
    }
    if (due - issued < batchSize) break;
    const batch: [number, number] = [next, next + batchSize - 1];
    next += batchSize;
    issued += batchSize;
    void submit(batch);
  }
}, 10);

/** Send one batch until a 2xx answer. */
async function submit([from, to]: [number, number]): Promise<void> {
  inFlight += 1;
  const jobs = [];
  for (let n = from; n <= to; n++) jobs.push({ messageId: messageId(n), payload: { n } });
  const body = JSON.stringify({ jobs });
  try {
    for (let attempt = 1;; attempt++) {
      journal.write({ ev: "send", from, to, attempt, t: wallClock() });
      const urls = config.urls;
      const why = await post(
        urls[(Math.floor(from / batchSize) + attempt - 1) % urls.length],
        body,
      );
      if (why === undefined) {
        journal.write({ ev: "ack", from, to, t: wallClock() });
        return;
      }
      journal.write({ ev: "retry", from, to, why, t: wallClock() });
      if (stopping) return; // unacknowledged: it does not count, and it is not lost
      await new Promise((resolve) =>
        setTimeout(resolve, Math.min(1000, 25 * 2 ** Math.min(attempt, 6)))
      );
    }
  } finally {
    inFlight -= 1;
    if (stopping && inFlight === 0) process.exit(0);
  }
}

/** POST the body; undefined when acknowledged, else why not. */
async function post(url: string, body: string): Promise<string | undefined> {
  let response: Response;
  try {
    response = await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${config.token}`, "content-type": "application/json" },
      body,
      signal: AbortSignal.timeout(REQUEST_TIMEOUT_MS),
    });
  } catch (error) {
    return error instanceof Error ? error.name : "network";
  }
  const text = await response.text().catch(() => "");
  if (response.ok) return undefined;
  const retriable = response.status >= 500 || response.status === 408 || response.status === 429;
  if (!retriable) {
    console.error(`soak producer: POST /jobs answered ${response.status}: ${text}`);
    process.exit(2);
  }
  return String(response.status);
}

/** What earlier incarnations left: batches to send again, and the next new job number. */
function previousProgress(dir: string): { resume: [number, number][]; next: number } {
  const sent = new Map<number, number>();
  const acked = new Set<number>();
  let next = 1;
  for (const file of readdirSync(dir).filter((name) => name.endsWith(".jsonl")).sort()) {
    readJournal(join(dir, file), (record) => {
      if (record.ev === "send") {
        sent.set(record.from as number, record.to as number);
        next = Math.max(next, (record.to as number) + 1);
      } else if (record.ev === "start") {
        next = Math.max(next, record.next as number);
      } else if (record.ev === "ack") {
        acked.add(record.from as number);
      }
    });
  }
  const resume = [...sent].filter(([from]) => !acked.has(from)).sort((a, b) => a[0] - b[0]);
  return { resume, next };
}

process.on("SIGTERM", () => {
  stopping = true;
  clearInterval(ticker);
  if (inFlight === 0) process.exit(0);
  setTimeout(() => process.exit(0), STOP_GRACE_MS);
});

announce({ ready: true, pid, resumed: resume.length, next });
