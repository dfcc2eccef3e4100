/**
 * The evidence besides the workers' runs, read back from the journals of a soak: what the
 * orchestrator did (spawns, exits, faults, SIGCONTs), what the controller incarnations recorded
 * (sessions, bindings ended, durable commits), and what the producer got acknowledged.
 *
 * Everything here is read from files, so a kept run can be verified again
 * (`deno task soak --verify DIR`).
 *
 * @module
 */

import { existsSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { readJournal } from "./journal.ts";
import { type FaultRecord, jobNumber, type Role, type SoakPaths } from "./records.ts";

/** A process start, from the orchestrator's journal. */
export interface Spawn {
  readonly role: Role;
  readonly name: string;
  readonly runtime: string;
  readonly pid: number;
  readonly t: number;
}

/** A process exit, from the orchestrator's journal. */
export interface Exit {
  readonly role: Role;
  readonly name: string;
  readonly pid: number;
  readonly code: number | null;
  readonly signal: string | null;
  readonly expected: boolean;
  readonly t: number;
}

/** A binding the controller ended. */
export interface Unbind {
  readonly pid: number;
  readonly session: string;
  readonly ep: string;
  readonly binding: string;
  readonly reason: string;
  readonly requeued: number;
  readonly t: number;
}

/** A durable commit that succeeded. */
export interface Commit {
  readonly s: number;
  readonly e: number;
  readonly stores: number;
  readonly accepts: number;
  readonly confirms: number;
  /** It may have left queued confirmations for the next commit. */
  readonly full: boolean;
}

/** What the orchestrator and the controller recorded. */
export interface Evidence {
  readonly spawns: Spawn[];
  readonly exits: Exit[];
  readonly faults: FaultRecord[];
  /** Workers SIGKILLed after a SIGTERM they did not drain from in time: when, by pid. */
  readonly termTimeouts: { pid: number; t: number }[];
  /** SIGCONTs sent, by pid. */
  readonly conts: Map<number, number[]>;
  readonly phases: Map<string, number>;
  /** The sessions of each controller pid (its first, then any internal restarts). */
  readonly sessions: Map<number, string[]>;
  /** When each controller pid loaded its modules, opened its KV file, listened, was ready. */
  readonly ready: Map<
    number,
    { modulesLoaded: number; kvOpened: number; listening: number; t: number; loaded: number }
  >;
  readonly unbinds: Unbind[];
  /** Successful commits by controller pid, in order. */
  readonly commits: Map<number, Commit[]>;
  readonly failures: { pid: number; stage: string; error: string; t: number }[];
  /** Restarts of a controller inside its process (its durable writes kept failing). */
  readonly selfRestarts: { pid: number; session: string; t: number }[];
  /** When each controller pid applied a confirmation of a job, for the jobs asked about. */
  readonly applied: Map<number, { pid: number; t: number }[]>;
  /** When a controller session requeued a job (a binding ended), for the jobs asked about. */
  readonly requeued: Map<number, { session: string; t: number }[]>;
  /** With --instances: each instance pid's slot name and instance id. */
  readonly instances: Map<number, { name: string; id: string }>;
  /** With --instances: the takeovers, by the pid that made them. */
  readonly takeovers: { pid: number; of: string; jobs: number; t: number }[];
  /** With --instances: instances that found themselves taken over. */
  readonly fenced: { pid: number; t: number }[];
  /** With --kv-faults: the commit faults each instance's `RemoteKv` injected. */
  readonly kvFaults: { pid: number; fault: string; commit: number; t: number }[];
}

/** What the producer got acknowledged. */
export interface Acknowledgements {
  /** acked[n] = 1 when job n was acknowledged (a 2xx answer to a batch holding it). */
  readonly acked: Uint8Array;
  readonly count: number;
  /** The highest job number issued. */
  readonly maxJob: number;
  /** Send attempts of each batch (first job number → attempt times). */
  readonly attempts: Map<number, number[]>;
  /** Batches (from, to), sorted by `from`. */
  readonly batches: [number, number][];
  readonly retries: number;
  readonly incarnations: number;
}

/**
 * Read the orchestrator's and the controller incarnations' journals; confirmations are kept for
 * the job numbers in `jobs` only (the jobs that ran more than once).
 */
export function readEvidence(paths: SoakPaths, jobs: ReadonlySet<number> = new Set()): Evidence {
  const evidence: Evidence = {
    spawns: [],
    exits: [],
    faults: [],
    termTimeouts: [],
    conts: new Map(),
    phases: new Map(),
    sessions: new Map(),
    ready: new Map(),
    unbinds: [],
    commits: new Map(),
    failures: [],
    selfRestarts: [],
    applied: new Map(),
    requeued: new Map(),
    instances: new Map(),
    takeovers: [],
    fenced: [],
    kvFaults: [],
  };
  readJournal(paths.soak, (r) => {
    if (r.ev === "spawn") evidence.spawns.push(r as unknown as Spawn);
    else if (r.ev === "exit") evidence.exits.push(r as unknown as Exit);
    else if (r.ev === "fault") evidence.faults.push(r as unknown as FaultRecord);
    else if (r.ev === "phase") evidence.phases.set(r.phase as string, r.t as number);
    else if (r.ev === "cont") push(evidence.conts, r.pid as number, r.t as number);
    else if (r.ev === "term-timeout") {
      evidence.termTimeouts.push({ pid: r.pid as number, t: r.t as number });
    }
  });
  for (const file of journals(paths.controllers)) {
    readJournal(file, (r) => {
      const pid = r.pid as number;
      switch (r.ev) {
        case "ready":
          evidence.ready.set(pid, {
            modulesLoaded: r.modulesLoaded as number,
            kvOpened: r.kvOpened as number,
            listening: r.listening as number,
            t: r.t as number,
            loaded: r.loaded as number,
          });
          addSession(evidence, pid, r.session as string);
          if (typeof r.instance === "string") {
            evidence.instances.set(pid, { name: r.name as string, id: r.instance });
          }
          break;
        case "takeover":
          evidence.takeovers.push({
            pid,
            of: r.of as string,
            jobs: r.jobs as number,
            t: r.t as number,
          });
          break;
        case "fenced":
          evidence.fenced.push({ pid, t: r.t as number });
          break;
        case "kv-fault":
          evidence.kvFaults.push({
            pid,
            fault: r.fault as string,
            commit: r.commit as number,
            t: r.t as number,
          });
          break;
        case "restarted":
          addSession(evidence, pid, r.session as string);
          evidence.selfRestarts.push({ pid, session: r.session as string, t: r.t as number });
          break;
        case "unbound":
          evidence.unbinds.push(r as unknown as Unbind);
          break;
        case "commit":
          push(evidence.commits, pid, r as unknown as Commit);
          break;
        case "confirmed": {
          const n = jobNumber(r.id as string);
          if (jobs.has(n)) push(evidence.applied, n, { pid, t: r.t as number });
          break;
        }
        case "requeued":
          for (const id of r.ids as string[]) {
            const n = jobNumber(id);
            if (jobs.has(n)) {
              push(evidence.requeued, n, { session: r.session as string, t: r.t as number });
            }
          }
          break;
        case "failed":
          evidence.failures.push(r as unknown as Evidence["failures"][number]);
          break;
      }
    });
  }
  evidence.faults.sort((a, b) => a.t - b.t);
  evidence.unbinds.sort((a, b) => a.t - b.t);
  return evidence;
}

/** Read every producer incarnation's journal. */
export function readAcknowledgements(paths: SoakPaths): Acknowledgements {
  const ranges: [number, number][] = [];
  const attempts = new Map<number, number[]>();
  const batches = new Map<number, number>();
  let maxJob = 0;
  let retries = 0;
  let incarnations = 0;
  for (const file of journals(paths.producers)) {
    incarnations += 1;
    readJournal(file, (r) => {
      if (r.ev === "send") {
        const from = r.from as number;
        const to = r.to as number;
        push(attempts, from, r.t as number);
        batches.set(from, to);
        maxJob = Math.max(maxJob, to);
      } else if (r.ev === "ack") {
        ranges.push([r.from as number, r.to as number]);
      } else if (r.ev === "retry") {
        retries += 1;
      }
    });
  }
  const acked = new Uint8Array(maxJob + 1);
  let count = 0;
  for (const [from, to] of ranges) {
    for (let n = from; n <= to; n++) {
      if (acked[n] === 0) count += 1;
      acked[n] = 1;
    }
  }
  return {
    acked,
    count,
    maxJob,
    attempts,
    batches: [...batches].sort((a, b) => a[0] - b[0]),
    retries,
    incarnations,
  };
}

/** The first job number of the batch holding job `n`, or undefined. */
export function batchOf(acks: Acknowledgements, n: number): number | undefined {
  const batches = acks.batches;
  let low = 0, high = batches.length - 1;
  while (low <= high) {
    const mid = (low + high) >> 1;
    const [from, to] = batches[mid];
    if (n < from) high = mid - 1;
    else if (n > to) low = mid + 1;
    else return from;
  }
  return undefined;
}

/** The `.jsonl` files of a directory, sorted. */
export function journals(dir: string): string[] {
  if (!existsSync(dir)) return [];
  return readdirSync(dir).filter((name) => name.endsWith(".jsonl")).sort().map((name) =>
    join(dir, name)
  );
}

function addSession(evidence: Evidence, pid: number, session: string): void {
  const sessions = evidence.sessions.get(pid) ?? [];
  if (!sessions.includes(session)) sessions.push(session);
  evidence.sessions.set(pid, sessions);
}

function push<K, V>(map: Map<K, V[]>, key: K, value: V): void {
  const list = map.get(key);
  if (list) list.push(value);
  else map.set(key, [value]);
}
