/**
 * What the soak's journals hold: one record type per process role, and where each journal lives
 * in the output directory.
 *
 * ```
 * <out>/soak.jsonl                  the orchestrator: spawns, exits, faults, phases
 * <out>/controller/<pid>.jsonl      each controller (or instance) incarnation: ready, bindings,
 *                                   commits; with --instances, takeovers and fencing too
 * <out>/producer/<pid>.jsonl        each producer incarnation: batches sent and acknowledged
 * <out>/workers/<name>.<pid>.jsonl  each worker process: handler starts and ends, connections
 * <out>/logs/<role>.<pid>.log       each process's stderr
 * <out>/kv/soak.kv                  the controller's (or the instances' shared) Deno KV file
 * <out>/summary.json                the verdict
 * ```
 *
 * One file per process: a process killed mid-write can only tear the last line of its own file.
 * MessageIDs are `j<n>` with n = 1, 2, 3... in the order the producer issues them, so the
 * verifier can index jobs by number.
 *
 * @module
 */

import { join } from "node:path";

/** The orchestrator's journal. */
export type SoakRecord =
  | { ev: "phase"; phase: string; t: number }
  | {
    ev: "spawn";
    role: Role;
    name: string;
    runtime: Runtime;
    pid: number;
    t: number;
  }
  | {
    ev: "exit";
    role: Role;
    name: string;
    pid: number;
    code: number | null;
    signal: string | null;
    expected: boolean;
    t: number;
  }
  | FaultRecord
  | { ev: "cont"; name: string; pid: number; t: number }
  /** A SIGTERMed worker had not exited by its drain deadline: it was SIGKILLed. */
  | { ev: "term-timeout"; pid: number; t: number }
  | { ev: "drain"; complete: boolean; remaining: number; ms: number; t: number };

/** The process roles. */
export type Role = "controller" | "worker" | "producer";
/** The runtimes a worker runs on. */
export type Runtime = "deno" | "bun";

/** The kinds of fault the orchestrator injects with one controller. */
export const FAULT_KINDS = [
  "worker-kill",
  "worker-term",
  "worker-stop",
  "controller-kill",
  "tcp-cut",
  "producer-kill",
] as const;
/** The kinds of fault the orchestrator injects with several instances (`--instances N`). */
export const SHARED_FAULT_KINDS = [
  "worker-kill",
  "worker-term",
  "worker-stop",
  "instance-kill",
  "instance-stop",
  "tcp-cut",
  "producer-kill",
] as const;
/** One kind of fault. */
export type FaultKind = typeof FAULT_KINDS[number] | typeof SHARED_FAULT_KINDS[number];
/** Every kind of fault, in either mode. */
export const ALL_FAULT_KINDS: readonly FaultKind[] = [
  ...FAULT_KINDS,
  "instance-kill",
  "instance-stop",
];

/** The kinds of fault of a soak with `instances` instances (1: one controller). */
export function faultKindsOf(instances: number | undefined): readonly FaultKind[] {
  return (instances ?? 1) > 1 ? SHARED_FAULT_KINDS : FAULT_KINDS;
}

/** One injected fault, written just before the signal is sent or the connections are cut. */
export interface FaultRecord {
  readonly ev: "fault";
  readonly kind: FaultKind;
  /** The worker name (worker faults), "controller", the instance name or "producer". */
  readonly target: string;
  readonly pid: number;
  readonly t: number;
  /** worker-stop, instance-stop: how long the process stays stopped, ms. */
  readonly ms?: number;
  /** tcp-cut: how many proxied connections were cut. */
  readonly connections?: number;
}

/** A controller (or instance) incarnation's journal. */
export type ControllerRecord =
  | {
    ev: "ready";
    pid: number;
    session: string;
    /** With --instances: the instance's name (its slot) and its id in the shared flow. */
    name?: string;
    instance?: string;
    /** Jobs reloaded from the queue. */
    loaded: number;
    modulesLoaded: number;
    kvOpened: number;
    listening: number;
    t: number;
  }
  | { ev: "bound"; pid: number; session: string; ep: string; binding: string; t: number }
  | {
    ev: "unbound";
    pid: number;
    session: string;
    ep: string;
    binding: string;
    reason: string;
    requeued: number;
    t: number;
  }
  | { ev: "requeued"; pid: number; session: string; ep: string; ids: string[]; t: number }
  /** The controller applied a worker's confirmation of this job (not yet durable). */
  | { ev: "confirmed"; pid: number; id: string; t: number }
  | { ev: "restarted"; pid: number; session: string; cause: string; t: number }
  | { ev: "failed"; pid: number; stage: string; error: string; t: number }
  /** With --instances: this instance took over `of` (an instance id), putting `jobs` back. */
  | { ev: "takeover"; pid: number; of: string; jobs: number; expiredAt: number; t: number }
  /** With --instances: another instance took this one over. */
  | { ev: "fenced"; pid: number; t: number }
  /**
   * With --kv-faults: the `commit`-th commit of this instance's `RemoteKv` meets `fault`
   * (written when `commit()` is called; see `remote_kv.ts`).
   */
  | {
    ev: "kv-fault";
    pid: number;
    fault: "lost-answer" | "locked" | "slow";
    commit: number;
    t: number;
  }
  | {
    /** A durable commit that succeeded: started at `s`, done at `e`. */
    ev: "commit";
    pid: number;
    s: number;
    e: number;
    stores: number;
    accepts: number;
    confirms: number;
    /** It may have left queued confirmations for the next commit. */
    full: boolean;
  };

/** A producer incarnation's journal. Batches are inclusive ranges of job numbers. */
export type ProducerRecord =
  | { ev: "start"; pid: number; resume: [number, number][]; next: number; t: number }
  | { ev: "send"; from: number; to: number; attempt: number; t: number }
  | { ev: "ack"; from: number; to: number; t: number }
  | { ev: "retry"; from: number; to: number; why: string; t: number };

/**
 * A worker process's stall detector ticks this often, ms: a tick that comes late shows that the
 * process's timers could not run.
 */
export const STALL_TICK_MS = 5;
/** A tick at least this late is journaled as a `stall`, ms (smaller delays are timer jitter). */
export const STALL_MIN_LATE_MS = 3;

/** A worker process's journal. `ep` is the endpoint name (`w2` or `w2#3`). */
export type WorkerRecord =
  | {
    ev: "ready";
    worker: string;
    pid: number;
    runtime: Runtime;
    concurrency: number;
    t: number;
  }
  | { ev: "connected"; ep: string; pid: number; t: number }
  | { ev: "disconnected"; ep: string; pid: number; code: number; t: number }
  | { ev: "bound"; ep: string; pid: number; session: string; binding: string; t: number }
  /** A handler started; `b` is the binding the endpoint held, `s` the job's sequence in it. */
  | { ev: "start"; id: string; ep: string; pid: number; b: string; s: number; t: number }
  | { ev: "end"; id: string; ep: string; pid: number; t: number }
  /** An `ack` or `request` confirming up to sequence `c` was handed to the socket. */
  | { ev: "sent"; ep: string; pid: number; c: number; t: number }
  /** The controller told the endpoint its binding ended (an `unbound` or `reset` frame). */
  | { ev: "told"; ep: string; pid: number; what: "unbound" | "reset"; t: number }
  /** The endpoint's registration was refused and it stopped for good. */
  | { ev: "refused"; ep: string; pid: number; error: string; t: number }
  /**
   * A tick of the stall detector came `ms` late at `t`: the process's timers could not run for at
   * least `ms` and at most `ms` + {@linkcode STALL_TICK_MS} before `t` (its event loop was held up,
   * starting at some time after the tick before).
   */
  | { ev: "stall"; pid: number; ms: number; t: number };

/** Where the journals of a soak live. */
export class SoakPaths {
  constructor(readonly out: string) {}

  get soak(): string {
    return join(this.out, "soak.jsonl");
  }
  get controllers(): string {
    return join(this.out, "controller");
  }
  get producers(): string {
    return join(this.out, "producer");
  }
  get workers(): string {
    return join(this.out, "workers");
  }
  get logs(): string {
    return join(this.out, "logs");
  }
  get kv(): string {
    return join(this.out, "kv", "soak.kv");
  }
  get summary(): string {
    return join(this.out, "summary.json");
  }
}

/** The MessageID of job number `n`. */
export function messageId(n: number): string {
  return `j${n}`;
}

/** The job number of a MessageID, or -1 when it is not one of the soak's. */
export function jobNumber(id: string): number {
  if (id.charCodeAt(0) !== 106 /* j */) return -1;
  const n = Number(id.slice(1));
  return Number.isSafeInteger(n) && n > 0 ? n : -1;
}
