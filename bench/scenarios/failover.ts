/**
 * Scenario 5, failover with real worker processes (the client of `client.ts`):
 *
 * - **SIGKILL**: a victim process (1 endpoint, window 20) takes 20 jobs and is stuck in the
 *   first (its handler never returns: it is mid-job); two idle survivor processes join; the
 *   victim gets SIGKILL. Measured from the kill: the controller ending the binding (the
 *   `requeued` event), the first redelivery (a survivor's handler starting one of the victim's
 *   jobs) and all of them confirmed (the last `DeliveryConfirmed`). Survivors spend 5 ms per job.
 * - **silent (half-open)**: the same, but the victim gets SIGSTOP: its socket stays open and
 *   nothing comes from it. Default liveness settings (the client's `resendInterval` 2 s, the
 *   controller's `silenceIntervals` 4 and `retryInterval` 500 ms), so the controller must end
 *   the binding within 4 × 2 s after the last frame it heard, checked every 500 ms: at most
 *   8.5 s after the stop. Measured: the stop → `worker-unbound` (silent), the first redelivery,
 *   all confirmed. The stopped process is then killed.
 *
 * Times are `performance.timeOrigin + performance.now()` in each process (comparable across
 * processes on one machine).
 *
 * @module
 */

import process from "node:process";
import { BufferedProducer, WorkPullingController } from "../../mod.ts";
import type { Receipt } from "../../mod.ts";
import type { Child } from "../lib/proc.ts";
import { now, runtimeVersion, until } from "../lib/runtime.ts";
import { serveWorkpull, workerToken } from "../lib/servers.ts";
import { spawnWorker } from "../lib/setups.ts";
import { median, round } from "../lib/stats.ts";

/** One failover round. */
export interface FailoverSample {
  /** The kill (or stop) → the controller ended the binding, ms. */
  readonly detected: number;
  /** The kill (or stop) → a survivor started the first of the victim's jobs, ms. */
  readonly firstRedelivery: number;
  /** The kill (or stop) → the last of them confirmed, ms. */
  readonly allConfirmed: number;
  /** How many jobs were requeued. */
  readonly jobs: number;
}

/** The scenario's result. */
export interface FailoverResult {
  readonly runtime: string;
  readonly kill: { readonly samples: FailoverSample[]; readonly median: FailoverSample };
  readonly silent?: {
    readonly samples: FailoverSample[];
    readonly median: FailoverSample;
    /** The configured detection bound, ms: silenceIntervals × resendInterval + retryInterval. */
    readonly bound: number;
  };
}

const VICTIM_WINDOW = 20;
const SURVIVOR_DELAY_MS = 5;

async function round1(mode: "kill" | "stop"): Promise<FailoverSample> {
  const producer = new BufferedProducer<{ n: number }>();
  const controller = new WorkPullingController({
    name: "bench",
    producer,
    deliveryConfirmation: true,
  });
  let endedAt = 0;
  let requeued: readonly string[] = [];
  controller.addEventListener("requeued", (event) => {
    if (event.worker !== "victim" || requeued.length > 0) return;
    endedAt = now();
    requeued = event.messageIds;
  });
  await controller.start();
  const server = await serveWorkpull(controller, producer as BufferedProducer<unknown>);
  const children: Child[] = [];
  const starts = new Map<string, number>();
  const confirmedAt = new Map<string, number>();
  try {
    const worker = async (name: string, delayMs: number) => {
      const child = await spawnWorker(name, {
        mode: "workpull",
        url: server.workersUrl.href,
        token: await workerToken(name),
        name,
        window: VICTIM_WINDOW,
        handler: "report",
        delayMs,
      });
      children.push(child);
      child.onReport((report) => {
        if (report.ev === "start" && !starts.has(report.id as string)) {
          starts.set(report.id as string, report.t as number);
        }
      });
      return child;
    };
    const victim = await worker("victim", -1);
    const receipts: Promise<Receipt>[] = [];
    for (let n = 0; n < VICTIM_WINDOW; n++) receipts.push(producer.submit({ n }));
    for (const receipt of receipts) {
      receipt.then((r) => r.confirmed?.then(() => confirmedAt.set(r.messageId, now())));
    }
    await until(() => controller.stats().workers[0]?.inFlight === VICTIM_WINDOW, "dispatch");
    await until(() => starts.size === 1, "the victim's first job");
    starts.clear(); // only redeliveries count from here
    await Promise.all([worker("s1", SURVIVOR_DELAY_MS), worker("s2", SURVIVOR_DELAY_MS)]);
    const at = now();
    victim.signal(mode === "kill" ? "SIGKILL" : "SIGSTOP");
    await until(() => requeued.length > 0, "the victim's jobs requeued", 30_000);
    await until(
      () => requeued.every((id) => confirmedAt.has(id)),
      "the victim's jobs confirmed",
      30_000,
    );
    await until(() => requeued.every((id) => starts.has(id)), "start reports", 5_000);
    return {
      detected: endedAt - at,
      firstRedelivery: Math.min(...requeued.map((id) => starts.get(id)!)) - at,
      allConfirmed: Math.max(...requeued.map((id) => confirmedAt.get(id)!)) - at,
      jobs: requeued.length,
    };
  } finally {
    await Promise.all(children.map((child) => child.kill()));
    await server.close();
    await controller.close();
  }
}

function medianSample(samples: FailoverSample[]): FailoverSample {
  const pick = (key: keyof FailoverSample) => round(median(samples.map((s) => s[key])), 1);
  return {
    detected: pick("detected"),
    firstRedelivery: pick("firstRedelivery"),
    allConfirmed: pick("allConfirmed"),
    jobs: pick("jobs"),
  };
}

/** Run the scenario: `killRounds` SIGKILL rounds, then `silentRounds` SIGSTOP rounds. */
export async function failover(options: {
  killRounds: number;
  silentRounds: number;
  log: (line: string) => void;
}): Promise<FailoverResult> {
  const describe = (s: FailoverSample) =>
    `detected ${s.detected.toFixed(1)} ms, first redelivery ${
      s.firstRedelivery.toFixed(1)
    } ms, all ${s.jobs} confirmed ${s.allConfirmed.toFixed(1)} ms`;
  const kill: FailoverSample[] = [];
  for (let i = 0; i < options.killRounds; i++) {
    kill.push(await round1("kill"));
    options.log(`  SIGKILL round ${i + 1}/${options.killRounds}: ${describe(kill.at(-1)!)}`);
  }
  // Silent rounds mostly wait for the silence bound: they run side by side, each with its own
  // controller, server and processes (they hardly use the CPU while waiting).
  const silent = await Promise.all(
    Array.from({ length: options.silentRounds }, () => round1("stop")),
  );
  silent.forEach((sample, i) =>
    options.log(`  SIGSTOP round ${i + 1}/${options.silentRounds}: ${describe(sample)}`)
  );
  return {
    runtime: runtimeVersion(),
    kill: { samples: kill.map(roundSample), median: medianSample(kill) },
    silent: silent.length > 0
      ? { samples: silent.map(roundSample), median: medianSample(silent), bound: 4 * 2000 + 500 }
      : undefined,
  };
}

function roundSample(s: FailoverSample): FailoverSample {
  return {
    detected: round(s.detected, 1),
    firstRedelivery: round(s.firstRedelivery, 1),
    allConfirmed: round(s.allConfirmed, 1),
    jobs: s.jobs,
  };
}

if (import.meta.main) {
  const result = await failover({
    killRounds: Number(process.argv[2] ?? 3),
    silentRounds: Number(process.argv[3] ?? 0),
    log: console.log,
  });
  console.log(JSON.stringify(result));
  process.exit(0);
}
