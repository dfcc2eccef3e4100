/**
 * Prompt replies for protocol feature `heard`: every frame a worker sends is followed soon by a
 * frame back, so the worker's TCP stack gets its acknowledgment at once.
 *
 * Why: a client that leaves Nagle's algorithm on (Deno's `WebSocket` does) holds a small frame
 * while an earlier one is unacknowledged, and a server that sends nothing back acknowledges only
 * when its delayed-ACK timer fires (40 ms on Linux). A worker's `ack` after a top-up `request` the
 * pool could not fill then waits those 40 ms, and so does the last confirmation of every burst.
 * Any frame the controller sends carries the acknowledgment; when it has none to send, it sends
 * `heard`.
 *
 * When: the controller marks a link when a frame arrives and clears the mark when it sends on the
 * link. A link still marked at the end of the controller's run of handlers gets `heard` at once;
 * then, so that a stream of `done` frames does not draw one `heard` each, the links marked within
 * the next tick of the clock (a zero-delay timer) share one `heard` each when it fires.
 *
 * @module
 */

import type { Clock, TimerHandle } from "../core/clock.ts";

/** The `heard` frame: it has no fields. */
export const HEARD_FRAME = '{"type":"heard"}';

/**
 * The links that owe a reply, and the tick that holds back further replies. `C` is the
 * controller's connection; `post` runs a callback in the controller's turn; `reply` sends
 * {@linkcode HEARD_FRAME} on a connection.
 *
 * @example
 * ```ts
 * import { HeardReplies } from "./heard_replies.ts";
 * import { SimulatedClock } from "../core/clock.ts";
 *
 * const clock = new SimulatedClock();
 * const sent: string[] = [];
 * const replies = new HeardReplies<string>(clock, (run) => run(), (link) => sent.push(link));
 * replies.received("w1");
 * replies.settle(); // nothing else went to w1: it hears now
 * replies.received("w1");
 * replies.received("w1");
 * replies.settle(); // held back for a tick
 * clock.advance(0);
 * console.assert(sent.join() === "w1,w1");
 * replies.stop();
 * ```
 */
export class HeardReplies<C> {
  readonly #clock: Clock;
  readonly #post: (run: () => void) => void;
  readonly #reply: (connection: C) => void;
  readonly #owing = new Set<C>();
  #hold: TimerHandle | undefined;

  constructor(clock: Clock, post: (run: () => void) => void, reply: (connection: C) => void) {
    this.#clock = clock;
    this.#post = post;
    this.#reply = reply;
  }

  /** A frame arrived on `connection` (one whose worker agreed to `heard`). */
  received(connection: C): void {
    this.#owing.add(connection);
  }

  /** A frame was sent on `connection` (it carries the acknowledgment), or the link closed. */
  answered(connection: C): void {
    this.#owing.delete(connection);
  }

  /** The end of the controller's run of handlers: reply now unless a tick holds replies back. */
  settle(): void {
    if (this.#owing.size === 0 || this.#hold) return;
    this.#replyAll();
  }

  /** Cancel the pending tick (the controller closes). */
  stop(): void {
    this.#hold?.cancel();
    this.#hold = undefined;
    this.#owing.clear();
  }

  #replyAll(): void {
    for (const connection of this.#owing) this.#reply(connection);
    this.#owing.clear();
    this.#hold = this.#clock.setTimeout(() => this.#post(this.#onTick), 0);
  }

  readonly #onTick = () => {
    this.#hold = undefined;
    if (this.#owing.size > 0) this.#replyAll();
  };
}
