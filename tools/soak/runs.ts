/**
 * Every handler run of a soak, read back from the worker journals, kept compact: a 10-minute soak
 * at 1,000 jobs/s has over 600,000 runs, so they live in typed arrays (one entry per run) rather
 * than in objects.
 *
 * A run is a `start` line and, unless its process died or was stopped for good first, the `end`
 * line of the same job on the same endpoint of the same process. Beside the runs, each endpoint
 * (one endpoint name in one worker process) keeps its timeline: when it connected, disconnected
 * and adopted a binding, and every confirmation it sent (`ack` or `request`, cumulative, under the
 * binding it held then). A run's session is the session of the binding its endpoint held when
 * the handler started.
 *
 * @module
 */

import { basename } from "node:path";
import { journals } from "./evidence.ts";
import { readJournal } from "./journal.ts";
import { jobNumber, type SoakPaths, STALL_TICK_MS } from "./records.ts";

/** One endpoint name in one worker process, with its timeline. */
export interface Endpoint {
  readonly index: number;
  readonly pid: number;
  readonly worker: string;
  readonly name: string;
  /** Times of `disconnected` records, in order. */
  readonly disconnects: number[];
  /**
   * When the endpoint learned that its binding may have ended: its disconnections, and the
   * controller's `unbound` and `reset` frames, in order.
   */
  readonly notices: number[];
  /** Times of `connected` records, in order. */
  readonly connects: number[];
  /** Bindings adopted, in order. */
  readonly bindings: { t: number; session: string; binding: string }[];
  /** Confirmations sent, in order: when, up to which sequence, under which `session binding`. */
  readonly sent: { t: number[]; confirmed: number[]; binding: string[] };
}

/** A growable typed array. */
class Column<A extends Int32Array | Float64Array> {
  #data: A;
  constructor(readonly make: (size: number) => A) {
    this.#data = make(1024);
  }
  get data(): A {
    return this.#data;
  }
  set(index: number, value: number): void {
    if (index >= this.#data.length) {
      const grown = this.make(this.#data.length * 2);
      grown.set(this.#data);
      this.#data = grown;
    }
    this.#data[index] = value;
  }
}

/** The runs of a soak. */
export class Runs {
  count = 0;
  readonly #job = new Column((n) => new Int32Array(n));
  readonly #endpoint = new Column((n) => new Int32Array(n));
  readonly #session = new Column((n) => new Int32Array(n));
  readonly #start = new Column((n) => new Float64Array(n));
  readonly #end = new Column((n) => new Float64Array(n));
  readonly #seq = new Column((n) => new Float64Array(n));
  readonly #binding: string[] = [];
  /** The first run of each job number (-1: none); later runs of a job are in `more`. */
  #first = new Int32Array(1024).fill(-1);
  readonly more = new Map<number, number[]>();
  readonly endpoints: Endpoint[] = [];
  /** Each worker process's event-loop stalls, in order: [from, to] pairs. */
  readonly #stalls = new Map<number, number[]>();
  /** When each worker process wrote each of its records, in order: when it was seen running. */
  readonly #seen = new Map<number, number[]>();
  readonly sessions: string[] = [];
  readonly #sessionIndex = new Map<string, number>();
  /** Lines whose MessageID is not one of the soak's. */
  foreign = 0;
  /** `end` lines without a matching `start`. */
  unmatchedEnds = 0;
  /** Endpoints whose registration was refused for good (`refused` lines). */
  refused = 0;

  job(run: number): number {
    return this.#job.data[run];
  }
  endpoint(run: number): Endpoint {
    return this.endpoints[this.#endpoint.data[run]];
  }
  session(run: number): string | undefined {
    const index = this.#session.data[run];
    return index < 0 ? undefined : this.sessions[index];
  }
  binding(run: number): string {
    return this.#binding[run];
  }
  start(run: number): number {
    return this.#start.data[run];
  }
  /** NaN when the run never ended. */
  end(run: number): number {
    return this.#end.data[run];
  }
  /** The job's sequence in the run's binding (NaN when the journal did not say). */
  seq(run: number): number {
    return this.#seq.data[run];
  }

  /**
   * When the worker sent the confirmation of `run` (the first `ack` or `request` after it ended
   * that confirmed its sequence under the same binding), or undefined if it never did.
   */
  confirmationSent(run: number): number | undefined {
    const end = this.end(run);
    const seq = this.seq(run);
    if (Number.isNaN(end) || Number.isNaN(seq)) return undefined;
    const sent = this.endpoint(run).sent;
    const key = `${this.session(run)} ${this.binding(run)}`;
    let low = 0, high = sent.t.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (sent.t[mid] < end) low = mid + 1;
      else high = mid;
    }
    for (let i = low; i < sent.t.length && sent.binding[i] === key; i++) {
      if (sent.confirmed[i] >= seq) return sent.t[i];
    }
    return undefined;
  }

  /** Every run of job `n`, in the order they were read. */
  runsOf(n: number): number[] {
    if (n >= this.#first.length || this.#first[n] < 0) return [];
    return [this.#first[n], ...(this.more.get(n) ?? [])];
  }

  /** Whether job `n` has a run that ended. */
  ran(n: number): boolean {
    return this.runsOf(n).some((run) => !Number.isNaN(this.end(run)));
  }

  /** How long, within [from, to], worker process `pid` could not run its timers, ms. */
  stalled(pid: number, from: number, to: number): number {
    const stalls = this.#stalls.get(pid);
    if (!stalls || to <= from) return 0;
    let total = 0;
    for (let i = 0; i < stalls.length; i += 2) {
      if (stalls[i] >= to) break;
      total += Math.max(0, Math.min(stalls[i + 1], to) - Math.max(stalls[i], from));
    }
    return total;
  }

  /** When worker process `pid` last wrote a record at or before `at` (undefined: never). */
  lastSeen(pid: number, at: number): number | undefined {
    const seen = this.#seen.get(pid);
    if (!seen) return undefined;
    let low = 0, high = seen.length;
    while (low < high) {
      const mid = (low + high) >> 1;
      if (seen[mid] <= at) low = mid + 1;
      else high = mid;
    }
    return low > 0 ? seen[low - 1] : undefined;
  }

  /** Job numbers with more than one run. */
  *repeated(): Iterable<number> {
    yield* this.more.keys();
  }

  /** The index of `session` in `sessions` (what `sessionColumn` holds), if any run had it. */
  sessionIndex(session: string): number | undefined {
    return this.#sessionIndex.get(session);
  }

  /** The session index of each run (-1: unknown). */
  get sessionColumn(): Int32Array {
    return this.#session.data;
  }

  /** Read every worker journal of a soak. */
  static read(paths: SoakPaths): Runs {
    const runs = new Runs();
    for (const file of journals(paths.workers)) runs.#readFile(file);
    return runs;
  }

  #readFile(file: string): void {
    const worker = basename(file).split(".")[0];
    const byName = new Map<string, Endpoint>();
    const endpointOf = (name: string, pid: number): Endpoint => {
      let endpoint = byName.get(name);
      if (!endpoint) {
        endpoint = {
          index: this.endpoints.length,
          pid,
          worker,
          name,
          disconnects: [],
          notices: [],
          connects: [],
          bindings: [],
          sent: { t: [], confirmed: [], binding: [] },
        };
        this.endpoints.push(endpoint);
        byName.set(name, endpoint);
      }
      return endpoint;
    };
    const currentSession = new Map<string, number>();
    const currentBinding = new Map<string, string>();
    readJournal(file, (r) => {
      const ep = r.ep as string;
      const pid = r.pid as number;
      const t = r.t as number;
      let seen = this.#seen.get(pid);
      if (!seen) this.#seen.set(pid, seen = []);
      seen.push(t); // one process a file: in the order it wrote them
      switch (r.ev) {
        case "start": {
          const n = jobNumber(r.id as string);
          if (n < 0) return void (this.foreign += 1);
          const endpoint = endpointOf(ep, pid);
          const seq = typeof r.s === "number" ? r.s : Number.NaN;
          this.#add(n, endpoint.index, currentSession.get(ep) ?? -1, r.b as string, seq, t);
          break;
        }
        case "end": {
          const n = jobNumber(r.id as string);
          if (n < 0) return;
          const endpoint = endpointOf(ep, pid);
          const runs = this.runsOf(n);
          let matched = false;
          for (let i = runs.length - 1; i >= 0; i--) {
            const run = runs[i];
            if (this.#endpoint.data[run] === endpoint.index && Number.isNaN(this.end(run))) {
              this.#end.set(run, t);
              matched = true;
              break;
            }
          }
          if (!matched) this.unmatchedEnds += 1;
          break;
        }
        case "connected":
          endpointOf(ep, pid).connects.push(t);
          break;
        case "disconnected":
          endpointOf(ep, pid).disconnects.push(t);
          endpointOf(ep, pid).notices.push(t);
          break;
        case "told":
          endpointOf(ep, pid).notices.push(t);
          break;
        case "bound": {
          const session = r.session as string;
          endpointOf(ep, pid).bindings.push({ t, session, binding: r.binding as string });
          currentSession.set(ep, this.#internSession(session));
          currentBinding.set(ep, `${session} ${r.binding}`);
          break;
        }
        case "refused":
          this.refused += 1;
          break;
        case "stall": {
          // The held-up time began at most one tick before the late tick was due, and not
          // before the stall recorded last ended.
          const list = this.#stalls.get(pid) ?? [];
          const from = t - (r.ms as number) - STALL_TICK_MS;
          list.push(Math.max(from, list.length > 0 ? list[list.length - 1] : from), t);
          this.#stalls.set(pid, list);
          break;
        }
        case "sent": {
          const sent = endpointOf(ep, pid).sent;
          sent.t.push(t);
          sent.confirmed.push(r.c as number);
          sent.binding.push(currentBinding.get(ep) ?? "");
          break;
        }
      }
    });
  }

  #internSession(session: string): number {
    let index = this.#sessionIndex.get(session);
    if (index === undefined) {
      index = this.sessions.length;
      this.sessions.push(session);
      this.#sessionIndex.set(session, index);
    }
    return index;
  }

  #add(
    n: number,
    endpoint: number,
    session: number,
    binding: string,
    seq: number,
    start: number,
  ): void {
    const run = this.count++;
    this.#seq.set(run, seq);
    this.#job.set(run, n);
    this.#endpoint.set(run, endpoint);
    this.#session.set(run, session);
    this.#start.set(run, start);
    this.#end.set(run, Number.NaN);
    this.#binding[run] = binding;
    if (n >= this.#first.length) {
      const grown = new Int32Array(Math.max(n + 1, this.#first.length * 2)).fill(-1);
      grown.set(this.#first);
      this.#first = grown;
    }
    if (this.#first[n] < 0) this.#first[n] = run;
    else {
      const list = this.more.get(n);
      if (list) list.push(run);
      else this.more.set(n, [run]);
    }
  }
}
