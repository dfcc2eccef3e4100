/**
 * The soak's verdict: the summary written to `summary.json`, and its one-line form.
 *
 * ```
 * soak: 600000 accepted, 600000 ran, lost 0, duplicates 123 (running 100, ack-delay 20,
 *   unconfirmed-at-controller-kill 3, avoidable 0), faults 197 (worker-kill 44, ...),
 *   worst restart→delivery 180 ms — ok
 * ```
 * (on one line). The soak fails on a lost job, an avoidable duplicate, a drain that stalled (or
 * ran past its cap), a process that crashed, or a soak where nothing was accepted. An acknowledged
 * job that never ran but was still in the durable queue at the end is not lost: the line says
 * `lost 0 (3 still queued)`, and the drain that left it unfinished fails the soak.
 *
 * @module
 */

import type { RemoteKvFault } from "../../testing.ts";
import type { Cause } from "./classify.ts";
import { type FaultKind, faultKindsOf } from "./records.ts";
import { KV_FAULT_KINDS } from "./remote_kv.ts";

/** One avoidable duplicate, for the reader of `summary.json`. */
export interface AvoidableExample {
  readonly messageId: string;
  readonly diagnosis: string;
  /**
   * The run before the duplicate, and the duplicate: endpoint, pid, `session/binding`, start,
   * end, and when the worker sent its confirmation (epoch ms; null: never, or never ended).
   */
  readonly runs: readonly {
    endpoint: string;
    pid: number;
    binding: string;
    start: number;
    end: number | null;
    confirmationSent: number | null;
  }[];
}

/** What `summary.json` holds. */
export interface Summary {
  readonly ok: boolean;
  readonly failures: string[];
  readonly settings: {
    readonly minutes: number;
    readonly rate: number;
    readonly seed: number;
    readonly workers: { name: string; runtime: string; concurrency: number }[];
    readonly ackDelayMs: number;
    readonly reconnectGraceMs: number;
    /**
     * `--drain`: the drain fails once this many seconds pass without any job
     * finishing (and never lasts more than `DRAIN_CAP_FACTOR` times it; see `drain.ts`).
     */
    readonly drainDeadlineS: number;
    /** Instances sharing the flow (absent or 1: one controller). */
    readonly instances?: number;
    /** Their lease TTL, ms. */
    readonly leaseMs?: number;
    /**
     * `--kv-latency`, `--kv-faults`: the instances reach the KV file through a `RemoteKv` with
     * these round trips and this probability of a fault per commit (absent: no `RemoteKv`).
     */
    readonly remoteKv?: {
      readonly commitLatencyMs: number;
      readonly readLatencyMs: number;
      readonly faultRate: number;
    };
  };
  /** With `--kv-latency`/`--kv-faults`: the commit faults the instances' `RemoteKv` injected. */
  readonly kv?: {
    readonly faults: number;
    readonly byKind: Record<RemoteKvFault, number>;
  };
  /** With several instances: their takeovers. */
  readonly instances?: {
    readonly count: number;
    /** Takeovers made (one per instance killed or stopped past its lease, when all is well). */
    readonly takeovers: number;
    /** Instances that found themselves taken over (stopped past their lease). */
    readonly fenced: number;
    /** Killed instances whose jobs no survivor took over (the soak fails on any). */
    readonly killsNotTakenOver: number;
    /**
     * Stopped instances taken over. A stop inside a write to the shared SQLite file holds its
     * lock, so nobody can take that instance over; it carries on at its SIGCONT.
     */
    readonly stopsTakenOver: number;
    /** From an instance kill to its takeover, ms. */
    readonly worstTakeoverMs: number | null;
    readonly medianTakeoverMs: number | null;
    readonly samples: { kind: string; pid: number; ms: number | null; jobs: number | null }[];
  };
  /** Jobs acknowledged to the producer (a 2xx answer to POST /jobs). */
  readonly accepted: number;
  /** Acknowledged jobs that a worker finished. */
  readonly ran: number;
  /** Acknowledged jobs that no worker finished and that were not in the queue at the end. */
  readonly lost: number;
  readonly lostExamples: string[];
  /**
   * Acknowledged jobs that no worker finished but that the durable queue still held, accepted and
   * unconfirmed, when the soak ended: not lost (they run after the next start), only unfinished.
   * Null when the queue was not read (`--instances`, or no KV file): then every unfinished job
   * counts as lost.
   */
  readonly queued: number | null;
  readonly queuedExamples: string[];
  readonly runs: {
    readonly total: number;
    /** Runs that started and never finished (their process was killed or stopped for good). */
    readonly unfinished: number;
    /** Distinct jobs that ran, acknowledged or not. */
    readonly jobs: number;
    /** `end` lines without a `start` (should be 0). */
    readonly unmatchedEnds: number;
  };
  readonly duplicates: Record<Cause | "total", number> & {
    readonly byFault: Partial<Record<FaultKind, number>>;
  };
  readonly avoidable: {
    readonly byDiagnosis: Record<string, number>;
    readonly examples: AvoidableExample[];
  };
  readonly observations: {
    /**
     * Excused duplicates whose run started after the fault, before its endpoint noticed it
     * (counted under "running").
     */
    readonly duplicatesStartedBeforeNotice: number;
    /** Runs that started after the controller had ended their binding. */
    readonly runsAfterBindingEnded: number;
    /** Runs that started while their endpoint was disconnected. */
    readonly runsWhileDisconnected: number;
    readonly stops: number;
    /** Stops long enough for the controller to end a binding of the stopped worker. */
    readonly stopsThatUnbound: number;
    /** Worker endpoints that stopped for good after their registration was refused. */
    readonly endpointsRefused: number;
  };
  readonly faults: { readonly total: number; readonly byKind: Record<FaultKind, number> };
  /** The graceful stops (`worker-term`): each SIGTERMed worker drains and exits by itself. */
  readonly gracefulStops: {
    readonly count: number;
    /** Stops that found the worker running a long job (one of 5..20 s), which it finished. */
    readonly duringLongJob: number;
    /** The longest from SIGTERM to exit, ms. */
    readonly worstDrainMs: number | null;
    /** Workers that had not exited by the drain deadline and were SIGKILLed (the soak fails). */
    readonly timedOut: number;
  };
  readonly restarts: {
    readonly count: number;
    readonly worstMs: number | null;
    readonly medianMs: number | null;
    /** Restarted controllers that lived `SHORT_LIFE_MS` or more and delivered nothing. */
    readonly withoutDelivery: number;
    /** Restarted controllers killed again before their first delivery, sooner than that. */
    readonly cutShort: number;
    /**
     * Each restart, ms after its spawn: first delivery (`ms`), and the controller's own
     * start-up: modules loaded, KV file opened, port listening, queue loaded (`readyMs`).
     */
    readonly samples: {
      pid: number;
      ms: number | null;
      /** From spawn to exit (null: still running at the end). */
      lifeMs: number | null;
      modulesLoadedMs: number | null;
      kvOpenedMs: number | null;
      listeningMs: number | null;
      readyMs: number | null;
      reloaded: number | null;
    }[];
  };
  readonly controller: {
    readonly commits: number;
    readonly commitMsP50: number | null;
    readonly commitMsMax: number | null;
    /** The longest window of non-durable confirmations at a controller kill, ms. */
    readonly worstUnconfirmedWindowMs: number | null;
    readonly terminalFailures: number;
    /** Restarts inside the process after durable writes kept failing (no fault of the soak's). */
    readonly selfRestarts: number;
  };
  readonly producer: {
    readonly issued: number;
    readonly retries: number;
    readonly incarnations: number;
  };
  readonly drain: {
    readonly complete: boolean;
    readonly ms: number;
    readonly remaining: number;
    /** Why an incomplete drain ended (see `drain.ts`): it stalled, or it reached its cap. */
    readonly ended?: "stalled" | "capped";
    /** The longest time without any job finishing, ms. */
    readonly longestQuietMs?: number;
  };
  readonly crashes: {
    role: string;
    name: string;
    pid: number;
    code: number | null;
    signal: string | null;
  }[];
}

/** The one-line form. */
export function summaryLine(summary: Summary): string {
  const d = summary.duplicates;
  const kinds = faultKindsOf(summary.settings.instances)
    .map((kind) => `${kind} ${summary.faults.byKind[kind] ?? 0}`).join(", ");
  const takeover = summary.instances
    ? `, worst kill→takeover ${
      summary.instances.worstTakeoverMs === null
        ? "n/a"
        : `${Math.round(summary.instances.worstTakeoverMs)} ms`
    }`
    : "";
  const worst = summary.restarts.worstMs === null
    ? "n/a"
    : `${Math.round(summary.restarts.worstMs)} ms`;
  const g = summary.gracefulStops;
  const graceful = g.count === 0
    ? ""
    : `, graceful stops ${g.count} (${g.duringLongJob} during a long job, worst drain ${
      g.worstDrainMs === null ? "n/a" : `${Math.round(g.worstDrainMs)} ms`
    })`;
  const remote = summary.settings.remoteKv;
  const kv = remote === undefined
    ? ""
    : `, kv ${remote.commitLatencyMs}/${remote.readLatencyMs} ms, kv faults ${
      summary.kv?.faults ?? 0
    } at ${remote.faultRate} (${
      KV_FAULT_KINDS.map((kind) => `${kind} ${summary.kv?.byKind[kind] ?? 0}`).join(", ")
    })`;
  const verdict = summary.ok ? "ok" : `FAILED: ${summary.failures.join("; ")}`;
  const queued = summary.queued ? ` (${summary.queued} still queued)` : "";
  return `soak: ${summary.accepted} accepted, ${summary.ran} ran, lost ${summary.lost}${queued}, ` +
    `duplicates ${d.total} (running ${d.running}, ack-delay ${d["ack-delay"]}, ` +
    `unconfirmed-at-controller-kill ${
      d["unconfirmed-at-controller-kill"]
    }, avoidable ${d.avoidable}), ` +
    `faults ${summary.faults.total} (${kinds})${kv}${graceful}, worst restart→delivery ${worst}${takeover} — ` +
    verdict;
}
