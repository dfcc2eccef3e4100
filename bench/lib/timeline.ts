/**
 * Frame timelines across processes, for `bench/tools/timeline.ts`: every process records the
 * frames its sockets handle within one window of wall-clock time, and the tool lines them up.
 *
 * A server records `in` when it starts handling a frame from a socket, `done` when that handler
 * returns and `out` when it sends a frame; a worker process records `in` when a `jobs` frame
 * arrives and `out` when it sends one. Times are the process's `performance.timeOrigin +
 * performance.now()` in ms (microseconds in the fraction), so the processes of one machine share
 * a clock to within a few microseconds.
 *
 * The analysis reads the server's turns from its own events: the runtimes hand a server every
 * frame that arrived together one after the other in one turn of the event loop (a few
 * microseconds apart), and write the frames it sent only once that turn is over. A handler
 * that starts more than {@linkcode TURN_GAP_MS} after the previous one returned starts a turn.
 *
 * @module
 */

import { now } from "./runtime.ts";
import { distribution } from "./stats.ts";

/** What happened to a frame. */
export type FrameEventKind = "in" | "done" | "out";

/** One frame event: when (ms, see the module text), which process and socket, what. */
export interface FrameEvent {
  readonly at: number;
  readonly process: string;
  readonly socket: number;
  readonly kind: FrameEventKind;
  /** The frame's length in characters (`done`: 0). */
  readonly chars: number;
}

/** Handlers this far apart (ms) are in different turns of the event loop. */
export const TURN_GAP_MS = 0.01;

/** A gap between turns this long (ms) or longer counts as long in {@linkcode TurnSummary}. */
export const LONG_GAP_MS = 0.2;

/** Records the frame events of one process that fall within an armed window. */
export class FrameRecorder {
  readonly process: string;
  #from = Infinity;
  #to = -Infinity;
  #events: FrameEvent[] = [];

  constructor(process: string) {
    this.process = process;
  }

  /** Record the events between `from` and `from + span` (ms, `now()` of `runtime.ts`). */
  arm(from: number, span: number): void {
    this.#from = from;
    this.#to = from + span;
    this.#events = [];
  }

  /** Whether the armed window is over. */
  get over(): boolean {
    return now() >= this.#to;
  }

  /** Note an event, if it falls within the window. */
  record(socket: number, kind: FrameEventKind, chars: number): void {
    const at = now();
    if (at < this.#from || at >= this.#to) return;
    this.#events.push({ at, process: this.process, socket, kind, chars });
  }

  /** The events of the window, and forget them. */
  take(): FrameEvent[] {
    const events = this.#events;
    this.#events = [];
    this.#from = Infinity;
    this.#to = -Infinity;
    return events;
  }
}

/** What a server's turns look like over a window. */
export interface TurnSummary {
  /** Turns in the window. */
  readonly turns: number;
  /** Frames handled a turn, mean. */
  readonly framesPerTurn: number;
  /** From a turn's first handler to its last one's return, µs: mean and p50. */
  readonly busyMean: number;
  readonly busyP50: number;
  /** From a turn's end to the next turn's first handler, µs: mean and p50. */
  readonly betweenMean: number;
  readonly betweenP50: number;
  readonly betweenP90: number;
  /** Share of the window in gaps between turns longer than {@linkcode LONG_GAP_MS}. */
  readonly longGapShare: number;
  /** Share of the window the server's handlers ran. */
  readonly busyShare: number;
  /** From a frame's arrival at a handler to the next frame sent on that socket, µs: p50. */
  readonly serviceP50: number;
  /** From a turn's end to the next frame arriving at a worker process, µs: p50. */
  readonly toWorkerP50: number;
  /** From a worker's frame sent to the server's next handler start, µs: p50. */
  readonly toServerP50: number;
}

/**
 * Summarize a window's events: `server` names the server's process, every other process is a
 * worker process; `span` is the window's length, ms.
 */
export function summarizeTurns(
  events: readonly FrameEvent[],
  server: string,
  span: number,
): TurnSummary {
  const sorted = [...events].sort((a, b) => a.at - b.at);
  const mine = sorted.filter((event) => event.process === server);
  const busy: number[] = [];
  const between: number[] = [];
  const turnEnds: number[] = [];
  const framesPerTurn: number[] = [];
  let frames = 0;
  let turnStart = -1;
  let lastDone = -1;
  const service: number[] = [];
  const arrived = new Map<number, number>();
  for (const event of mine) {
    if (event.kind === "in") {
      if (turnStart < 0) turnStart = event.at;
      else if (lastDone >= 0 && event.at - lastDone > TURN_GAP_MS) {
        busy.push((lastDone - turnStart) * 1000);
        between.push((event.at - lastDone) * 1000);
        turnEnds.push(lastDone);
        framesPerTurn.push(frames);
        frames = 0;
        turnStart = event.at;
      }
      frames += 1;
      if (!arrived.has(event.socket)) arrived.set(event.socket, event.at);
    } else if (event.kind === "done") {
      lastDone = event.at;
    } else {
      const at = arrived.get(event.socket);
      if (at !== undefined) service.push((event.at - at) * 1000);
      arrived.delete(event.socket);
    }
  }
  const theirs = sorted.filter((event) => event.process !== server);
  const toWorker: number[] = [];
  const toServer: number[] = [];
  let next = 0;
  for (const end of turnEnds) {
    while (next < theirs.length && (theirs[next].at < end || theirs[next].kind !== "in")) next++;
    if (next < theirs.length) toWorker.push((theirs[next].at - end) * 1000);
  }
  let serverIn = 0;
  const ins = mine.filter((event) => event.kind === "in");
  for (const event of theirs) {
    if (event.kind !== "out") continue;
    while (serverIn < ins.length && ins[serverIn].at < event.at) serverIn++;
    if (serverIn < ins.length) toServer.push((ins[serverIn].at - event.at) * 1000);
  }
  const sum = (samples: number[]) => samples.reduce((total, value) => total + value, 0);
  const mean = (samples: number[]) => samples.length === 0 ? 0 : sum(samples) / samples.length;
  const gaps = between.length === 0 ? undefined : distribution(between);
  const p50 = (samples: number[]) => samples.length === 0 ? 0 : distribution(samples).p50;
  return {
    turns: busy.length,
    framesPerTurn: mean(framesPerTurn),
    busyMean: mean(busy),
    busyP50: p50(busy),
    betweenMean: mean(between),
    betweenP50: gaps?.p50 ?? 0,
    betweenP90: gaps?.p90 ?? 0,
    longGapShare: sum(between.filter((gap) => gap >= LONG_GAP_MS * 1000)) / 1000 / span,
    busyShare: sum(busy) / 1000 / span,
    serviceP50: p50(service),
    toWorkerP50: p50(toWorker),
    toServerP50: p50(toServer),
  };
}
