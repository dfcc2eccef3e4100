/**
 * Why a job ran more than once: the rules that excuse a duplicate by a fault, and what is left,
 * the avoidable ones.
 *
 * A job's runs are taken in the order they started; every run after the first is a duplicate.
 * A duplicate is **excused** when an earlier run of the same job (not already used to excuse
 * another) lost its confirmation to a fault F that took the job away before the duplicate
 * started. A run loses its confirmation to F when one of these holds (the F that took the job away
 * first decides):
 *
 * **running** — the handler was running when F hit its worker: it started before F and had not
 * finished by then; or it started after F but before its endpoint could know, that is before the
 * endpoint recorded the disconnection F caused or the controller's word that its binding ended (a
 * job taken from the buffer in the event-loop turn of a SIGCONT, or in the tens of milliseconds a
 * killed controller's sockets take to close; when F stopped the worker's instance, not before
 * that instance runs again either: a worker resumed first runs what it holds, unaware). Such a late starter is a duplicate by itself,
 * whether it started before or after the redelivery.
 *
 * **ack-delay** — the confirmation had not reached the controller when F came: the handler
 * finished less than the ack delay (`--ack-delay`, default 10 ms) before F (a worker may hold a
 * confirmation that long; time its event loop was stalled, as it records, does not count, nor
 * does one hold-up too short for its stall detector to record ({@linkcode UNRECORDED_STALL_MS}), and F
 * being a SIGKILL, neither does the time after the worker's last record: a stall in progress is
 * recorded only once it is over), or, F being a TCP cut, the worker sent it less than
 * `TRANSIT_MS` before (the cut dropped it on its way).
 *
 * **unconfirmed-at-controller-kill** — F killed the controller that delivered the run after the
 * run's confirmation had left its worker, and that confirmation was not durable. Both ends are
 * journaled: the worker records each `ack` and `request` it hands to its socket, the controller
 * each confirmation it applies and each durable commit. A confirmation the controller applied
 * after B, the start of its last completed commit (walking back past commits that may have left
 * queued confirmations out: those at the queue's operation limit, and retried ones), was not yet
 * written, since a commit carries every confirmation applied before it started; one it never
 * applied was still on its way or waiting to be read (a controller busy with a backlog reads
 * some sockets late; nothing could have saved such a confirmation). One applied before B is not
 * excused: the controller should have written it. The run's binding may have ended before F (its
 * worker died and came back): that changes nothing for a confirmation the controller had taken
 * before the binding ended (it left the worker before then, and the binding's end did not
 * requeue the job), which still waited for its durable write when F came.
 *
 * The faults F of a run: a SIGKILL of its worker process; a SIGSTOP of it long enough that the
 * controller ended the endpoint's binding (the controller's journal shows the unbinding during the
 * stop or just after the SIGCONT; the job was taken at the unbinding); a TCP cut of its worker's
 * connections; a SIGKILL of the controller incarnation that delivered it (the run's session is
 * one of that incarnation's). A worker stopped when F came could last act when its stop began:
 * "finished by then" and the windows above are measured from there.
 *
 * With several instances (`--instances`), an instance's SIGKILL counts as a controller kill of
 * the instance that delivered the run, and so does an instance's SIGSTOP (another instance may
 * take its jobs over meanwhile; the stopped one could last act when its stop began, and its
 * workers notice it only after its SIGCONT, when it finds itself fenced and exits). A stopped
 * instance cannot read what its workers send: a confirmation sent while it was stopped counts as
 * not durable (`unconfirmed-at-controller-kill`), whatever happens at its SIGCONT. An instance
 * does not journal the confirmations it applies, so for its runs a confirmation that left the
 * worker before the fault counts as not durable too.
 *
 * Anything else is **avoidable**. A run that started while its endpoint was disconnected, or after
 * its binding had ended (the controller unbound it, or the controller that delivered it was gone)
 * and after its endpoint noticed, is never excused: it should not have run at all.
 *
 * Times from different processes are compared with `CLOCK_SLACK_MS` of tolerance; times from one
 * worker's own journal exactly.
 *
 * @module
 */

import type { Acknowledgements, Commit, Evidence } from "./evidence.ts";
import { batchOf } from "./evidence.ts";
import { type FaultRecord, STALL_MIN_LATE_MS, STALL_TICK_MS } from "./records.ts";
import type { Endpoint, Runs } from "./runs.ts";

/** Clock differences between the soak's processes, ms. */
export const CLOCK_SLACK_MS = 2;
/** How long a confirmation may still be on its way through the proxy when a cut drops it, ms. */
export const TRANSIT_MS = 50;
/**
 * The longest hold-up of a worker's timers that its stall detector does not record, ms: a block
 * that starts just after a tick delays the next by its length less one tick, and a delay below
 * the threshold is not journaled.
 */
export const UNRECORDED_STALL_MS = STALL_TICK_MS + STALL_MIN_LATE_MS;
/** An endpoint notices a fault's disconnection within this long (after its SIGCONT), ms. */
export const NOTICE_WINDOW_MS = 1000;
/** The controller may end a stopped worker's binding this long after its SIGCONT, ms. */
export const STOP_UNBIND_SLACK_MS = 250;

/** Why a duplicate happened. */
export type Cause = "running" | "ack-delay" | "unconfirmed-at-controller-kill" | "avoidable";

/** A fault that cost a run its confirmation. */
export interface Excuse {
  readonly cause: Exclude<Cause, "avoidable">;
  readonly fault: FaultRecord;
  /** When the job was taken from the run: a redelivery cannot start before this. */
  readonly at: number;
  /**
   * The run started after the fault, before its endpoint noticed it: a duplicate by itself,
   * whichever run of the job came first.
   */
  readonly beforeNotice: boolean;
}

interface Stop {
  readonly fault: FaultRecord;
  readonly from: number;
  /** The SIGCONT, or the process's end if it never came. */
  readonly to: number;
}

/** A controller kill (or an instance kill or stop), with what is known of its durable writes. */
export interface ControllerKill {
  readonly fault: FaultRecord;
  readonly sessions: ReadonlySet<string>;
  /** Confirmations that reached the controller after this were not durable at the kill. */
  readonly durableBefore: number;
  /** An instance stop: when it was resumed (its workers could notice it only from then on). */
  readonly resumedAt?: number;
}

/** The faults that end the controller (or instance) that delivered a run. */
const CONTROLLER_FAULTS: ReadonlySet<string> = new Set([
  "controller-kill",
  "instance-kill",
  "instance-stop",
]);

/** Applies the rules to the runs of one soak. */
export class Classifier {
  readonly #runs: Runs;
  readonly #ackDelay: number;
  readonly #byPid = new Map<number, { kills: FaultRecord[]; cuts: FaultRecord[]; stops: Stop[] }>();
  readonly #controllerKills: ControllerKill[] = [];
  /** Unbind times by endpoint name. */
  readonly #unbindsOf = new Map<string, number[]>();
  /** When each binding ended (`session ep binding`). */
  readonly #bindingEnd = new Map<string, number>();
  /** When each session's controller died. */
  readonly #sessionEnd = new Map<string, number>();
  readonly #sessionsOfPid: Map<number, string[]>;
  readonly #selfRestarts: Evidence["selfRestarts"];
  readonly #applied: Evidence["applied"];
  readonly #requeued: Evidence["requeued"];
  /** Instances journal a confirmation only once a commit wrote it. */
  readonly #instancePids: ReadonlySet<number>;

  constructor(evidence: Evidence, runs: Runs, ackDelay: number) {
    this.#runs = runs;
    this.#ackDelay = ackDelay;
    this.#sessionsOfPid = evidence.sessions;
    this.#selfRestarts = evidence.selfRestarts;
    this.#applied = evidence.applied;
    this.#requeued = evidence.requeued;
    this.#instancePids = new Set(evidence.instances.keys());
    const exitOf = new Map(evidence.exits.map((exit) => [exit.pid, exit.t]));
    const spawnOf = new Map(evidence.spawns.map((spawn) => [spawn.pid, spawn.t]));
    for (const unbind of evidence.unbinds) {
      const list = this.#unbindsOf.get(unbind.ep) ?? [];
      list.push(unbind.t);
      this.#unbindsOf.set(unbind.ep, list);
      const key = `${unbind.session} ${unbind.ep} ${unbind.binding}`;
      if (!this.#bindingEnd.has(key)) this.#bindingEnd.set(key, unbind.t);
    }
    // A session ends when its controller dies, or restarts itself under a new session.
    for (const [pid, sessions] of evidence.sessions) {
      const died = evidence.faults.find((f) =>
        (f.kind === "controller-kill" || f.kind === "instance-kill") && f.pid === pid
      )?.t ?? exitOf.get(pid);
      sessions.forEach((session, i) => {
        const next = evidence.selfRestarts.find((r) =>
          r.session === sessions[i + 1]
        )?.t;
        const end = next ?? died;
        if (end !== undefined) this.#sessionEnd.set(session, end);
      });
    }
    for (const fault of evidence.faults) {
      if (CONTROLLER_FAULTS.has(fault.kind)) {
        const resumedAt = fault.kind === "instance-stop"
          ? evidence.conts.get(fault.pid)?.find((t) => t >= fault.t) ?? exitOf.get(fault.pid)
          : undefined;
        this.#controllerKills.push({
          fault,
          sessions: new Set(evidence.sessions.get(fault.pid) ?? []),
          durableBefore: durableBoundary(
            (evidence.commits.get(fault.pid) ?? []).filter((commit) => commit.e <= fault.t),
            spawnOf.get(fault.pid) ?? fault.t,
          ),
          ...(resumedAt === undefined ? {} : { resumedAt }),
        });
        continue;
      }
      // A graceful stop excuses nothing: its running jobs finish and are confirmed.
      if (fault.kind === "producer-kill" || fault.kind === "worker-term") continue;
      const entry = this.#byPid.get(fault.pid) ?? { kills: [], cuts: [], stops: [] };
      this.#byPid.set(fault.pid, entry);
      if (fault.kind === "worker-kill") entry.kills.push(fault);
      else if (fault.kind === "tcp-cut") entry.cuts.push(fault);
      else {
        const cont = evidence.conts.get(fault.pid)?.find((t) => t >= fault.t);
        const to = cont ?? exitOf.get(fault.pid) ?? fault.t + (fault.ms ?? 0);
        entry.stops.push({ fault, from: fault.t, to });
      }
    }
  }

  /** The controller kills, with the bound each puts on durable confirmations. */
  get controllerKills(): readonly ControllerKill[] {
    return this.#controllerKills;
  }

  /** When the binding that handed out `run` ended (Infinity: never, as far as anyone recorded). */
  bindingEnded(run: number): number {
    const runs = this.#runs;
    const session = runs.session(run);
    if (session === undefined) return Infinity;
    const ep = runs.endpoint(run).name;
    const unbound = this.#bindingEnd.get(`${session} ${ep} ${runs.binding(run)}`) ?? Infinity;
    return Math.min(unbound, this.#sessionEnd.get(session) ?? Infinity);
  }

  /** Whether `run` started while its endpoint was disconnected (the worker's own records). */
  startedDisconnected(run: number): boolean {
    const endpoint = this.#runs.endpoint(run);
    const start = this.#runs.start(run);
    const lastDisconnect = lastBefore(endpoint.disconnects, start);
    const lastConnect = lastBefore(endpoint.connects, start);
    return lastDisconnect !== undefined &&
      (lastConnect === undefined || lastConnect < lastDisconnect);
  }

  /** The earliest fault that cost `run` its confirmation, if any. */
  excuse(run: number): Excuse | undefined {
    // A run started while its endpoint was disconnected should not have started at all.
    if (this.startedDisconnected(run)) return undefined;
    const runs = this.#runs;
    const endpoint = runs.endpoint(run);
    const start = runs.start(run);
    const end = runs.end(run);
    const ended = !Number.isNaN(end);
    const S = CLOCK_SLACK_MS;
    const ackDelay = this.#ackDelay;
    const detached = this.bindingEnded(run);
    const faults = this.#byPid.get(endpoint.pid);
    let best: Excuse | undefined;
    const consider = (
      cause: Excuse["cause"],
      fault: FaultRecord,
      at: number,
      beforeNotice = false,
    ) => {
      // It had no binding left to lose, unless its controller had taken its confirmation before
      // the binding ended: then the confirmation waited for a durable write, binding or not.
      const taken = cause === "unconfirmed-at-controller-kill" && this.#keptPastUnbinding(run);
      if (fault.t > detached + S && !taken) return;
      // The fault that took the job away first decides: a stop's job goes only when the
      // controller unbinds the worker, which may be after a later fault took it elsewhere.
      if (!best || at < best.at || (at === best.at && fault.t < best.fault.t)) {
        best = { cause, fault, at, beforeNotice };
      }
    };
    /**
     * Fault `fault` hit this run's worker at `t` and took the job from it at `at`. A worker
     * stopped (SIGSTOP) at `t` could last act when its stop began, and notices the fault only
     * after its SIGCONT. `noticeable`: the worker hears of the fault by its connection closing.
     * `durableBefore`: for a controller kill, the bound on its durable confirmations.
     */
    const hit = (
      fault: FaultRecord,
      t: number,
      at: number,
      noticeable: boolean,
      kill?: ControllerKill,
    ) => {
      const cut = fault.kind === "tcp-cut";
      const stop = faults?.stops.find((stop) => stop.from <= t && stop.to >= t);
      const last = stop ? stop.from : t;
      if (start <= t + S && (!ended || end >= last - S)) return consider("running", fault, at);
      // The worker notices once both it and a stopped instance run again: a worker resumed
      // while its instance is still stopped starts what it had buffered (the instance's lease
      // may have lapsed and its jobs gone elsewhere meanwhile), and cannot know.
      const from = Math.max(stop ? stop.to : t, kill?.resumedAt ?? t);
      if (
        noticeable && start > t && detached < Infinity &&
        start <= this.#notice(endpoint, t, from) // the worker's clock: no slack
      ) return consider("running", fault, at, true);
      if (!ended) return;
      const sent = runs.confirmationSent(run);
      if (kill?.resumedAt !== undefined) {
        // A stopped instance: what its workers sent meanwhile waited, unread, for its SIGCONT.
        if (sent !== undefined && sent >= t - S && sent <= kill.resumedAt + S) {
          return consider("unconfirmed-at-controller-kill", fault, at);
        }
      }
      if (kill && this.#notDurable(run, kill, last)) {
        return consider("unconfirmed-at-controller-kill", fault, at);
      }
      // The ack delay counts only while the worker could run: stalls of its event loop extend it.
      // A stall is recorded once it is over, so a SIGKILL cuts one in progress short unrecorded:
      // a worker still holding the confirmation is known to have run only until its last record.
      const ran = fault.kind === "worker-kill" && !stop && !(sent !== undefined && sent <= t)
        ? Math.max(end, runs.lastSeen(endpoint.pid, t) ?? end)
        : last;
      const held = ackDelay + UNRECORDED_STALL_MS + runs.stalled(endpoint.pid, end, ran);
      if (end >= ran - held - S && end < last - S) return consider("ack-delay", fault, at);
      if (cut) {
        if (sent !== undefined && sent >= t - TRANSIT_MS && sent < t + S) {
          return consider("ack-delay", fault, at); // the cut dropped it on its way
        }
      }
    };

    for (const fault of faults?.kills ?? []) hit(fault, fault.t, fault.t, false);
    for (const fault of faults?.cuts ?? []) hit(fault, fault.t, fault.t, true);
    for (const stop of faults?.stops ?? []) {
      const unbound = this.#unbindsOf.get(endpoint.name)?.find((t) =>
        t >= stop.from - S && t <= stop.to + STOP_UNBIND_SLACK_MS
      );
      if (unbound !== undefined) hit(stop.fault, stop.from, unbound, true); // else it survived
    }
    const session = runs.session(run);
    for (const kill of this.#controllerKills) {
      if (session === undefined || !kill.sessions.has(session)) continue;
      hit(kill.fault, kill.fault.t, kill.fault.t, true, kill);
    }
    return best;
  }

  /**
   * Whether the confirmation of `run` had left its worker before `kill` (the worker could last
   * act at `last`) and was not durable: the controller applied it after the start of its last
   * completed commit, or never applied it (it was still on its way, or waiting to be read).
   */
  #notDurable(run: number, kill: ControllerKill, last: number): boolean {
    const applied = this.appliedBy(run, kill);
    if (applied !== undefined) return applied >= kill.durableBefore;
    const sent = this.#runs.confirmationSent(run);
    return sent !== undefined && sent < last + CLOCK_SLACK_MS;
  }

  /**
   * Whether the controller that delivered `run` had taken its confirmation when the run's binding
   * ended: the confirmation left the worker before that, and the controller did not requeue the
   * job after the run started (a binding's end requeues what was still in flight on it).
   */
  #keptPastUnbinding(run: number): boolean {
    const runs = this.#runs;
    const sent = runs.confirmationSent(run);
    const session = runs.session(run);
    if (sent === undefined || session === undefined) return false;
    if (!(sent < this.bindingEnded(run) - CLOCK_SLACK_MS)) return false;
    const start = runs.start(run);
    return !this.#requeued.get(runs.job(run))?.some((r) =>
      r.session === session && r.t >= start - CLOCK_SLACK_MS
    );
  }

  /**
   * When the controller killed by `kill` applied the confirmation of `run`'s job, if it did
   * (anything in a dead controller's journal happened before it died).
   */
  appliedBy(run: number, kill: ControllerKill): number | undefined {
    return this.#applied.get(this.#runs.job(run))?.find((a) => a.pid === kill.fault.pid)?.t;
  }

  /**
   * When `endpoint` noticed a fault at `t`: its first disconnection, or `unbound` or `reset` frame,
   * from `t` on, if within `NOTICE_WINDOW_MS` of `from`; otherwise `t`.
   */
  #notice(endpoint: Endpoint, t: number, from: number): number {
    const d = endpoint.notices.find((time) => time >= t - CLOCK_SLACK_MS);
    return d !== undefined && d <= from + NOTICE_WINDOW_MS ? d : t;
  }

  /**
   * Match the duplicates of job `n` with excuses: each run after the first takes the earliest
   * unused excuse of an earlier run whose fault came before it started; failing that, a run that
   * started after a fault but before its endpoint noticed it is excused by itself (it came after
   * the job's redelivery, which would have excused the redelivery the other way round). Returns,
   * for each duplicate run, its cause and the run whose excuse it took (for an avoidable one,
   * the run just before it).
   */
  duplicates(n: number): { run: number; cause: Cause; excuse?: Excuse; previous: number }[] {
    const runs = this.#runs;
    const order = runs.runsOf(n).sort((a, b) => runs.start(a) - runs.start(b));
    const excuses = order.map((run) => this.excuse(run));
    const used = new Set<number>();
    const result: { run: number; cause: Cause; excuse?: Excuse; previous: number }[] = [];
    for (let k = 1; k < order.length; k++) {
      const start = runs.start(order[k]);
      let chosen = -1;
      for (let j = 0; j < k; j++) {
        const excuse = excuses[j];
        if (used.has(j) || !excuse || excuse.at > start + CLOCK_SLACK_MS) continue;
        if (chosen < 0 || excuse.at < excuses[chosen]!.at) chosen = j;
      }
      if (chosen < 0 && excuses[k]?.beforeNotice) chosen = k;
      if (chosen >= 0) {
        used.add(chosen);
        const excuse = excuses[chosen]!;
        result.push({ run: order[k], cause: excuse.cause, excuse, previous: order[chosen] });
      } else {
        result.push({ run: order[k], cause: "avoidable", previous: order[k - 1] });
      }
    }
    return result;
  }

  /**
   * The apparent cause of an avoidable duplicate `run` whose previous run is `previous`, in
   * words, for the lead reading the summary.
   */
  diagnose(run: number, previous: number, acks: Acknowledgements): string {
    const runs = this.#runs;
    const S = CLOCK_SLACK_MS;
    for (const [which, r] of [["the duplicate", run], ["the earlier run", previous]] as const) {
      if (this.bindingEnded(r) < runs.start(r) - S) {
        return `${which} started after its binding had ended`;
      }
      if (this.startedDisconnected(r)) {
        return `${which} started while its endpoint was disconnected`;
      }
    }
    const start = runs.start(run);
    const session = runs.session(previous);
    const pid = [...this.#sessionsOfPid].find(([, sessions]) =>
      session !== undefined && sessions.includes(session)
    )?.[0];
    if (
      this.#selfRestarts.some((r) => r.pid === pid && r.t > runs.start(previous) && r.t < start)
    ) return "the controller restarted itself (its durable writes kept failing) meanwhile";
    const end = runs.end(previous);
    if (Number.isNaN(end)) return "the earlier run never finished, and no fault explains it";
    const kill = this.#controllerKills.find((k) =>
      k.fault.t > end && k.fault.t < start && session !== undefined && k.sessions.has(session)
    );
    const sent = runs.confirmationSent(previous);
    if (kill) {
      const batch = batchOf(acks, runs.job(run));
      const resent = batch !== undefined &&
        (acks.attempts.get(batch) ?? []).some((t) => t > kill.fault.t && t < start);
      if (resent) {
        return "finished before a controller kill; the producer resubmitted it after the restart";
      }
      if (this.appliedBy(previous, kill) !== undefined) {
        return "the controller applied its confirmation before its last commit but never wrote it";
      }
      if (sent !== undefined && sent < kill.fault.t) {
        return this.#instancePids.has(kill.fault.pid)
          ? "its confirmation left the worker well before an instance's end, never written"
          : "its confirmation left the worker well before a controller kill, never applied";
      }
      return "its worker still held its confirmation at a controller kill, long after it finished";
    }
    const faults = this.#byPid.get(runs.endpoint(previous).pid);
    const workerFault = [
      ...faults?.kills ?? [],
      ...faults?.cuts ?? [],
      ...(faults?.stops ?? []).map((s) => s.fault),
    ].find((fault) => fault.t > end && fault.t < start);
    if (workerFault) {
      return sent !== undefined && sent < workerFault.t
        ? "its confirmation left the worker before a fault of its worker, yet it was requeued"
        : "its worker still held its confirmation at a fault of its worker, long after it finished";
    }
    return "unexplained";
  }
}

/**
 * The start of a killed controller's last completed commit (every commit in its journal
 * completed before it died), walking back past commits that may have left queued confirmations
 * for the next one; `spawnedAt` when none.
 */
export function durableBoundary(commits: readonly Commit[], spawnedAt: number): number {
  let i = commits.length - 1;
  while (i >= 0 && commits[i].full) i--;
  return i >= 0 ? commits[i].s : spawnedAt;
}

function lastBefore(times: readonly number[], t: number): number | undefined {
  let low = 0, high = times.length - 1, found: number | undefined;
  while (low <= high) {
    const mid = (low + high) >> 1;
    if (times[mid] <= t) {
      found = times[mid];
      low = mid + 1;
    } else high = mid - 1;
  }
  return found;
}
