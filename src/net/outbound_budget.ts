/**
 * One budget for the bytes all of an app's WebSockets hold unsent (`maxPinnedBytes`).
 *
 * Each socket's own backlog is bounded (`maxBufferedBytes`, 8 MiB: past it the socket is
 * dropped), but many sockets that stopped reading could each stay just under it: 64 sockets of
 * one worker credential would pin half a gigabyte. So the backlogs are also summed:
 *
 * 1. Every socket registers how to read its backlog (queued in the edge plus buffered in the
 *    runtime) and how to drop it.
 * 2. Every {@linkcode SWEEP_INTERVAL} the budget reads them all. A socket whose backlog has
 *    stayed above {@linkcode STALL_BYTES} since a sweep is *stalled* from that sweep on; one that
 *    came below it is not (a peer that reads drains its backlog within milliseconds).
 * 3. When the total passes the budget, stalled sockets are dropped, the one stalled longest
 *    first, each only once it has been stalled for {@linkcode STALL_GRACE} (a burst to a reading
 *    peer is not a stall), until the total is back under the budget.
 * 4. Whatever the total, a stalled socket whose backlog has not shrunk at all for
 *    {@linkcode STALL_TIMEOUT} is dropped: its peer stopped reading (or its process is stopped),
 *    and what it pins should not wait for others to spend the budget. A slow reader shrinks its
 *    backlog between sweeps and is left alone.
 *
 * The sweep runs only while sockets are registered, and never keeps a process alive.
 *
 * @module
 */

/** How often the backlogs are read, ms. */
export const SWEEP_INTERVAL = 100;
/** A backlog at or below this many bytes is draining, not stalled. */
export const STALL_BYTES = 64 * 1024;
/** A socket is dropped for the budget only after it has been stalled this long, ms. */
export const STALL_GRACE = 1000;
/** A stalled socket whose backlog has not shrunk for this long is dropped, whatever the total, ms. */
export const STALL_TIMEOUT = 10_000;

/** Why a socket was dropped: the budget was spent, or its backlog stopped shrinking. */
export type DropCause = "server-budget" | "stalled";

/** A socket as the budget sees it. */
export interface BudgetedSocket {
  /** Bytes it holds unsent now. */
  pinned(): number;
  /** Drop it; `total` is what all sockets held at the sweep. */
  drop(cause: DropCause, total: number): void;
}

interface Stall {
  readonly since: number;
  pinned: number;
  shrankAt: number;
}

/**
 * The shared budget.
 *
 * @example
 * ```ts
 * import { OutboundBudget } from "./outbound_budget.ts";
 * const budget = new OutboundBudget(1024);
 * const leave = budget.join({ pinned: () => 0, drop() {} });
 * leave();
 * ```
 */
export class OutboundBudget {
  readonly #limit: number;
  readonly #now: () => number;
  /** Each socket's stall: since when, its backlog last sweep, when it last shrank. */
  readonly #sockets = new Map<BudgetedSocket, Stall | undefined>();
  #timer: ReturnType<typeof setInterval> | undefined;

  /** A budget of `limit` bytes; `now` gives the time in ms (default `performance.now`). */
  constructor(limit: number, now: () => number = () => performance.now()) {
    this.#limit = limit;
    this.#now = now;
  }

  /** The budget, bytes. */
  get limit(): number {
    return this.#limit;
  }

  /** Count `socket` in; the returned function counts it out (idempotent). */
  join(socket: BudgetedSocket): () => void {
    this.#sockets.set(socket, undefined);
    if (!this.#timer) {
      this.#timer = setInterval(() => this.sweep(), SWEEP_INTERVAL);
      (this.#timer as { unref?: () => void }).unref?.();
    }
    return () => {
      if (!this.#sockets.delete(socket) || this.#sockets.size > 0) return;
      clearInterval(this.#timer);
      this.#timer = undefined;
    };
  }

  /** Read every backlog and drop stalled sockets while the total is over the budget. */
  sweep(): void {
    const now = this.#now();
    let total = 0;
    const stalled: [BudgetedSocket, number, number][] = [];
    const stuck: [BudgetedSocket, number][] = [];
    for (const [socket, stall] of this.#sockets) {
      const pinned = socket.pinned();
      total += pinned;
      if (pinned <= STALL_BYTES) {
        this.#sockets.set(socket, undefined);
        continue;
      }
      if (!stall) {
        this.#sockets.set(socket, { since: now, pinned, shrankAt: now });
        continue;
      }
      if (pinned < stall.pinned) stall.shrankAt = now;
      stall.pinned = pinned;
      if (now - stall.shrankAt >= STALL_TIMEOUT) stuck.push([socket, pinned]);
      else if (now - stall.since >= STALL_GRACE) stalled.push([socket, stall.since, pinned]);
    }
    // What a socket held is read before it is dropped: a dropped socket's queue is empty.
    for (const [socket, pinned] of stuck) {
      this.#sockets.delete(socket);
      socket.drop("stalled", total);
      total -= pinned;
    }
    if (total > this.#limit) {
      stalled.sort((a, b) => a[1] - b[1]);
      for (const [socket, , pinned] of stalled) {
        if (total <= this.#limit) break;
        this.#sockets.delete(socket);
        socket.drop("server-budget", total);
        total -= pinned;
      }
    }
    if (this.#sockets.size === 0) {
      clearInterval(this.#timer);
      this.#timer = undefined;
    }
  }
}
