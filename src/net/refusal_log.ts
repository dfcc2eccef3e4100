/**
 * The server's log of what it refused: a worker whose token expired, a client with the wrong
 * secret, an upgrade for a flow the server does not serve. Each refusal is worth one `info` line,
 * so that whoever runs the server sees why a worker cannot join; but a worker retrying in a loop,
 * or someone probing, must not fill the log. So:
 *
 * 1. A refusal is keyed by what was refused, why, and where it came from (the client address,
 *    when the runtime gives one).
 * 2. The first refusal of a key in a minute is logged, saying that repeats are held back; the
 *    rest of that minute's are counted, and the next line of the key says how many there were.
 * 3. At most {@linkcode MAX_LINES_A_MINUTE} lines a minute in all: past that, one line says that
 *    refusals are no longer logged until the minute is over. The keys remembered are bounded too.
 *
 * @module
 */

import type { Logger } from "../core/logger.ts";
import { RecentMap } from "../core/recent_map.ts";

/** How long repeats of one refusal are held back, ms. */
export const REFUSAL_LOG_WINDOW = 60_000;
/** Lines logged in one window at most, whatever the keys. */
export const MAX_LINES_A_MINUTE = 100;
/** Keys remembered at once. */
const MAX_KEYS = 1024;

interface KeyState {
  /** When the key's current window began. */
  since: number;
  /** Refusals held back in it. */
  held: number;
}

/**
 * Rate-limited `info` lines for refused requests.
 *
 * @example
 * ```ts
 * import { RefusalLog } from "./refusal_log.ts";
 * const lines: string[] = [];
 * const logger = { error() {}, warn() {}, info: (m: string) => void lines.push(m), debug() {} };
 * let now = 0;
 * const log = new RefusalLog(logger, () => now);
 * log.refused("worker upgrade", "expired", "10.0.0.7");
 * log.refused("worker upgrade", "expired", "10.0.0.7"); // held back
 * now = 60_000;
 * log.refused("worker upgrade", "expired", "10.0.0.7");
 * console.assert(lines.length === 2 && lines[1].includes("1 more"));
 * ```
 */
export class RefusalLog {
  readonly #logger: Logger;
  readonly #now: () => number;
  readonly #keys = new RecentMap<string, KeyState>(MAX_KEYS);
  #windowStart = -Infinity;
  #lines = 0;

  /** Creates a log writing to `logger`; `now` gives the time in ms (default `Date.now`). */
  constructor(logger: Logger, now: () => number = Date.now) {
    this.#logger = logger;
    this.#now = now;
  }

  /** `what` (a route, "worker upgrade") was refused for `reason`, from `source` if known. */
  refused(what: string, reason: string, source: string | undefined): void {
    const now = this.#now();
    const key = `${what}\u0000${reason}\u0000${source ?? ""}`;
    const state = this.#keys.get(key);
    if (state && now - state.since < REFUSAL_LOG_WINDOW) {
      state.held += 1;
      return;
    }
    if (now - this.#windowStart >= REFUSAL_LOG_WINDOW) {
      this.#windowStart = now;
      this.#lines = 0;
    }
    if (this.#lines > MAX_LINES_A_MINUTE) return;
    this.#lines += 1;
    if (this.#lines > MAX_LINES_A_MINUTE) {
      this.#logger.info(
        `refused more than ${MAX_LINES_A_MINUTE} kinds of request within a minute; ` +
          "further refusals are not logged until it is over",
      );
      return;
    }
    const held = state?.held ?? 0;
    if (state) this.#keys.delete(key);
    this.#keys.set(key, { since: now, held: 0 });
    const from = source ? ` from ${source}` : "";
    const before = held > 0 ? `; ${held} more like it in the last minute` : "";
    this.#logger.info(
      `refused ${what}${from}: ${reason}${before} (repeats within a minute are not logged)`,
    );
  }
}
