/**
 * The verification at the end of a soak, from the journals alone: lost jobs, duplicates by
 * cause, what the avoidable duplicates look like, faults by kind, and how long each restarted
 * controller took to deliver again.
 *
 * - **lost**: acknowledged by `POST /jobs` (the producer's journals), never finished by any
 *   worker (the workers' journals), and not in the durable queue at the end either (`queued`,
 *   read from the KV file by `queued.ts`, when given). One still queued is counted apart: it is
 *   not lost, and the drain that left it unfinished fails the soak by itself.
 * - **duplicates**: every run of a job after its first, acknowledged or not, classified by
 *   `classify.ts`.
 * - **restart → first delivery**: for each controller (or instance) restarted, from its spawn to
 *   the first handler start of a job it delivered (a run whose endpoint held a binding of that
 *   controller's session).
 * - **kill → takeover** (`--instances`): for each instance killed or stopped, from the fault to
 *   the takeover of that instance by a survivor.
 * - **KV faults** (`--kv-faults`): the commit faults the instances' `RemoteKv` injected, by kind
 *   (they excuse nothing: the store must handle them).
 *
 * @module
 */

import type { Cause } from "./classify.ts";
import { Classifier, CLOCK_SLACK_MS } from "./classify.ts";
import { LONG_JOB_MIN_MS } from "./random.ts";
import { readAcknowledgements, readEvidence } from "./evidence.ts";
import { ALL_FAULT_KINDS, type FaultKind, messageId, type SoakPaths } from "./records.ts";
import { KV_FAULT_KINDS } from "./remote_kv.ts";
import { Runs } from "./runs.ts";
import type { AvoidableExample, Summary } from "./summary.ts";

/** What the verifier is told besides the journals. */
export interface VerifySettings {
  readonly settings: Summary["settings"];
  readonly drain: Summary["drain"];
  /**
   * The job numbers the durable queue held accepted and unconfirmed when the soak ended
   * (`queued.ts`); undefined when it was not read: every unfinished job then counts as lost.
   */
  readonly queued?: ReadonlySet<number>;
}

/** Avoidable duplicates shown per diagnosis. */
const EXAMPLES = 5;
const LOST_EXAMPLES = 20;
/**
 * A restarted controller killed again sooner than this after its spawn may not have delivered
 * yet through no fault of its own (its workers were still backing off to reconnect): such a
 * restart is "cut short", not "without delivery".
 */
export const SHORT_LIFE_MS = 5_000;

/** Verify the journals under `paths`. */
export function verify(paths: SoakPaths, given: VerifySettings): Summary {
  const runs = Runs.read(paths);
  const evidence = readEvidence(paths, new Set(runs.repeated()));
  const acks = readAcknowledgements(paths);
  const classifier = new Classifier(evidence, runs, given.settings.ackDelayMs);

  // Lost: acknowledged, never finished, and not in the queue at the end either.
  let ran = 0;
  const lostExamples: string[] = [];
  let lost = 0;
  const queuedExamples: string[] = [];
  let queued = 0;
  for (let n = 1; n <= acks.maxJob; n++) {
    if (acks.acked[n] === 0) continue;
    if (runs.ran(n)) ran += 1;
    else if (given.queued?.has(n)) {
      queued += 1;
      if (queuedExamples.length < LOST_EXAMPLES) queuedExamples.push(messageId(n));
    } else {
      lost += 1;
      if (lostExamples.length < LOST_EXAMPLES) lostExamples.push(messageId(n));
    }
  }

  // Duplicates.
  const duplicates: Record<Cause | "total", number> = {
    total: 0,
    running: 0,
    "ack-delay": 0,
    "unconfirmed-at-controller-kill": 0,
    avoidable: 0,
  };
  const byFault: Partial<Record<FaultKind, number>> = {};
  const byDiagnosis: Record<string, number> = {};
  const examples: AvoidableExample[] = [];
  let startedBeforeNotice = 0;
  for (const n of runs.repeated()) {
    for (const duplicate of classifier.duplicates(n)) {
      duplicates.total += 1;
      duplicates[duplicate.cause] += 1;
      if (duplicate.excuse) {
        const kind = duplicate.excuse.fault.kind;
        byFault[kind] = (byFault[kind] ?? 0) + 1;
        if (duplicate.excuse.beforeNotice) startedBeforeNotice += 1;
        continue;
      }
      const diagnosis = classifier.diagnose(duplicate.run, duplicate.previous, acks);
      byDiagnosis[diagnosis] = (byDiagnosis[diagnosis] ?? 0) + 1;
      if (byDiagnosis[diagnosis] <= EXAMPLES) {
        examples.push({
          messageId: messageId(n),
          diagnosis,
          runs: [duplicate.previous, duplicate.run].map((run) => ({
            endpoint: runs.endpoint(run).name,
            pid: runs.endpoint(run).pid,
            binding: `${runs.session(run)?.slice(0, 8) ?? "?"}/${runs.binding(run)}`,
            start: runs.start(run),
            end: Number.isNaN(runs.end(run)) ? null : runs.end(run),
            confirmationSent: runs.confirmationSent(run) ?? null,
          })),
        });
      }
    }
  }

  // Observations over every run.
  let unfinished = 0;
  let afterBindingEnded = 0;
  let whileDisconnected = 0;
  const jobsRun = new Set<number>();
  const firstStartOfSession = new Float64Array(runs.sessions.length).fill(Infinity);
  const sessionColumn = runs.sessionColumn;
  for (let run = 0; run < runs.count; run++) {
    jobsRun.add(runs.job(run));
    if (Number.isNaN(runs.end(run))) unfinished += 1;
    if (classifier.bindingEnded(run) < runs.start(run) - CLOCK_SLACK_MS) afterBindingEnded += 1;
    if (classifier.startedDisconnected(run)) whileDisconnected += 1;
    const session = sessionColumn[run];
    if (session >= 0 && runs.start(run) < firstStartOfSession[session]) {
      firstStartOfSession[session] = runs.start(run);
    }
  }

  // Faults.
  const byKind = Object.fromEntries(ALL_FAULT_KINDS.map((kind) => [kind, 0])) as Record<
    FaultKind,
    number
  >;
  for (const fault of evidence.faults) byKind[fault.kind] += 1;
  const stops = evidence.faults.filter((fault) => fault.kind === "worker-stop");
  const stopsThatUnbound = stops.filter((stop) => {
    const to = evidence.conts.get(stop.pid)?.find((t) => t >= stop.t) ?? stop.t + (stop.ms ?? 0);
    const names = new Set(
      runs.endpoints.filter((endpoint) => endpoint.pid === stop.pid).map((e) => e.name),
    );
    return evidence.unbinds.some((u) => names.has(u.ep) && u.t >= stop.t && u.t <= to + 250);
  }).length;

  // Restart → first delivery: every controller spawn but the first of its slot.
  const slotsSeen = new Set<string>();
  const restartSpawns = evidence.spawns.filter((spawn) => {
    if (spawn.role !== "controller") return false;
    const again = slotsSeen.has(spawn.name);
    slotsSeen.add(spawn.name);
    return again;
  });
  const samples = restartSpawns.map((spawn) => {
    let first = Infinity;
    for (const session of evidence.sessions.get(spawn.pid) ?? []) {
      const index = runs.sessionIndex(session);
      if (index !== undefined) first = Math.min(first, firstStartOfSession[index]);
    }
    const ready = evidence.ready.get(spawn.pid);
    const since = (t: number | undefined) => t === undefined ? null : round(t - spawn.t);
    const exit = evidence.exits.find((e) => e.pid === spawn.pid);
    return {
      pid: spawn.pid,
      ms: first === Infinity ? null : round(first - spawn.t),
      lifeMs: exit === undefined ? null : round(exit.t - spawn.t),
      modulesLoadedMs: since(ready?.modulesLoaded),
      kvOpenedMs: since(ready?.kvOpened),
      listeningMs: since(ready?.listening),
      readyMs: since(ready?.t),
      reloaded: ready?.loaded ?? null,
    };
  });
  const measured = samples.flatMap((sample) => sample.ms === null ? [] : [sample.ms]).sort((a, b) =>
    a - b
  );

  // The controller's durable commits.
  const durations = [...evidence.commits.values()].flat().map((c) => c.e - c.s).sort((a, b) =>
    a - b
  );
  const windows = classifier.controllerKills.map((kill) => kill.fault.t - kill.durableBefore);

  // Graceful stops: how long each drain took, and whether it had a long job to finish.
  const terms = evidence.faults.filter((fault) => fault.kind === "worker-term");
  const drains = terms.flatMap((fault) => {
    const exit = evidence.exits.find((e) => e.pid === fault.pid);
    return exit ? [exit.t - fault.t] : [];
  }).sort((a, b) => a - b);
  const longRunning = new Set<number>();
  for (let run = 0; run < runs.count; run++) {
    const pid = runs.endpoint(run).pid;
    const start = runs.start(run);
    const end = runs.end(run);
    if (!(end - start >= LONG_JOB_MIN_MS)) continue;
    for (const fault of terms) {
      if (fault.pid === pid && start <= fault.t && end >= fault.t) longRunning.add(fault.t);
    }
  }
  const termTimeouts = evidence.termTimeouts.length;

  const crashes = evidence.exits.filter((exit) => !exit.expected).map((exit) => ({
    role: exit.role,
    name: exit.name,
    pid: exit.pid,
    code: exit.code,
    signal: exit.signal,
  }));

  const failures: string[] = [];
  if (acks.count === 0) failures.push("nothing was accepted");
  if (lost > 0) failures.push(`${lost} lost`);
  if (duplicates.avoidable > 0) failures.push(`${duplicates.avoidable} avoidable duplicates`);
  if (!given.drain.complete) failures.push(drainFailure(given, queued));
  const instances = given.settings.instances !== undefined && given.settings.instances > 1
    ? instanceFigures(evidence, given.settings.instances)
    : undefined;
  if (instances && instances.killsNotTakenOver > 0) {
    failures.push(`${instances.killsNotTakenOver} killed instances never taken over`);
  }
  if (termTimeouts > 0) failures.push(`${termTimeouts} SIGTERMed workers did not drain in time`);
  if (crashes.length > 0) {
    failures.push(`${crashes.length} crashed processes (${crashes.map((c) => c.name).join(", ")})`);
  }

  const kv = given.settings.remoteKv === undefined ? undefined : {
    faults: evidence.kvFaults.length,
    byKind: Object.fromEntries(
      KV_FAULT_KINDS.map((
        kind,
      ) => [kind, evidence.kvFaults.filter((f) => f.fault === kind).length]),
    ) as NonNullable<Summary["kv"]>["byKind"],
  };

  return {
    ...(instances ? { instances } : {}),
    ...(kv ? { kv } : {}),
    ok: failures.length === 0,
    failures,
    settings: given.settings,
    accepted: acks.count,
    ran,
    lost,
    lostExamples,
    queued: given.queued === undefined ? null : queued,
    queuedExamples,
    runs: { total: runs.count, unfinished, jobs: jobsRun.size, unmatchedEnds: runs.unmatchedEnds },
    duplicates: { ...duplicates, byFault },
    avoidable: { byDiagnosis, examples },
    observations: {
      duplicatesStartedBeforeNotice: startedBeforeNotice,
      runsAfterBindingEnded: afterBindingEnded,
      runsWhileDisconnected: whileDisconnected,
      stops: stops.length,
      stopsThatUnbound,
      endpointsRefused: runs.refused,
    },
    faults: { total: evidence.faults.length, byKind },
    gracefulStops: {
      count: terms.length,
      duringLongJob: longRunning.size,
      worstDrainMs: drains.length > 0 ? round(drains[drains.length - 1]) : null,
      timedOut: termTimeouts,
    },
    restarts: {
      count: samples.length,
      worstMs: measured.length > 0 ? measured[measured.length - 1] : null,
      medianMs: measured.length > 0 ? measured[Math.floor(measured.length / 2)] : null,
      withoutDelivery:
        samples.filter((sample) =>
          sample.ms === null && (sample.lifeMs === null || sample.lifeMs >= SHORT_LIFE_MS)
        ).length,
      cutShort:
        samples.filter((sample) =>
          sample.ms === null && sample.lifeMs !== null && sample.lifeMs < SHORT_LIFE_MS
        ).length,
      samples,
    },
    controller: {
      commits: durations.length,
      commitMsP50: durations.length > 0 ? round(durations[Math.floor(durations.length / 2)]) : null,
      commitMsMax: durations.length > 0 ? round(durations[durations.length - 1]) : null,
      worstUnconfirmedWindowMs: windows.length > 0 ? round(Math.max(...windows)) : null,
      terminalFailures: evidence.failures.length,
      selfRestarts: evidence.selfRestarts.length,
    },
    producer: { issued: acks.maxJob, retries: acks.retries, incarnations: acks.incarnations },
    drain: given.drain,
    crashes,
  };
}

/**
 * Takeovers: for each instance killed or stopped, how long until a survivor took it over (before
 * the next fault of the same process). A stop may end without one: a process stopped inside a
 * write to the shared SQLite file holds its lock, and no survivor can write meanwhile.
 */
function instanceFigures(
  evidence: ReturnType<typeof readEvidence>,
  count: number,
): NonNullable<Summary["instances"]> {
  const faults = evidence.faults.filter((fault) =>
    fault.kind === "instance-kill" || fault.kind === "instance-stop"
  );
  const samples = faults.map((fault) => {
    const id = evidence.instances.get(fault.pid)?.id;
    const next = faults.find((later) => later.pid === fault.pid && later.t > fault.t)?.t ??
      Infinity;
    const takeover = evidence.takeovers.find((t) => t.of === id && t.t >= fault.t && t.t < next);
    return {
      kind: fault.kind,
      pid: fault.pid,
      ms: takeover ? round(takeover.t - fault.t) : null,
      jobs: takeover?.jobs ?? null,
    };
  });
  const kills = samples.filter((s) => s.kind === "instance-kill");
  const measured = kills.flatMap((s) => s.ms === null ? [] : [s.ms]).sort((a, b) => a - b);
  return {
    count,
    takeovers: evidence.takeovers.length,
    fenced: evidence.fenced.length,
    killsNotTakenOver: kills.length - measured.length,
    stopsTakenOver: samples.filter((s) => s.kind === "instance-stop" && s.ms !== null).length,
    worstTakeoverMs: measured.at(-1) ?? null,
    medianTakeoverMs: measured.length > 0 ? measured[Math.floor(measured.length / 2)] : null,
    samples,
  };
}

/** Why the drain failed, and how many of the jobs it left were still queued. */
function drainFailure(given: VerifySettings, queued: number): string {
  const { drain, settings } = given;
  const still = given.queued === undefined ? "" : `, ${queued} still queued`;
  const jobs = `${drain.remaining} jobs${still}`;
  const s = (ms: number) => `${Math.round(ms / 1000)} s`;
  switch (drain.ended) {
    case "stalled":
      return `drain stalled: no job finished for ${settings.drainDeadlineS} s ` +
        `(after ${s(drain.ms)}; ${jobs})`;
    case "capped":
      return `drain still unfinished at its cap of ${s(drain.ms)} (${jobs})`;
    default:
      return `drain incomplete after ${s(drain.ms)} (${jobs})`;
  }
}

function round(ms: number): number {
  return Math.round(ms * 10) / 10;
}
