/**
 * Admission at the network edge: how many connections the server holds in total, from one
 * client address, and per worker credential, checked before any work is done for a request.
 *
 * A *connection* here is what the app can see: an HTTP request being answered, or a WebSocket
 * from its upgrade to its close. Each admitted one holds a {@linkcode Lease}; releasing it
 * (exactly once, whatever ends the connection) gives the place back. Refusals are cheap: two map
 * lookups and no allocation.
 *
 * The per-credential cap bounds what one worker token can hold: every endpoint it opens is a
 * binding with its own demand window, so without a cap one token could open hundreds of
 * endpoints and hoard a proportional share of the pool. A credential's endpoints also share one
 * frame budget (a token bucket), so spreading a flood over many sockets gains nothing, and a
 * credential caught flooding is refused new sockets for a cool-down, so reconnecting to flood
 * again gains nothing either.
 *
 * @module
 */

import { TokenBucket } from "./token_bucket.ts";

/** Limits of an {@linkcode Admission}. */
export interface AdmissionLimits {
  /** Connections in total. */
  readonly maxConnections: number;
  /** Connections from one client address. */
  readonly maxConnectionsPerIp: number;
  /** WebSockets per worker credential (the token's `worker` claim). */
  readonly maxEndpointsPerWorker: number;
  /** Frames a second all WebSockets of one worker credential may send together (also the burst). */
  readonly frameRatePerWorker: number;
}

/** A place held by one connection; `release` is idempotent. */
export interface Lease {
  /** Give the place back. */
  release(): void;
}

/** Why a connection was not admitted. */
export type AdmissionRefusal =
  | "too-many-connections"
  | "too-many-from-address"
  | "too-many-endpoints"
  | "cooling-down";

/** What one worker credential holds now. */
interface Credential {
  connections: number;
  readonly frames: TokenBucket;
  /** Refuse new sockets until this time (Date.now() ms). */
  coolUntil: number;
}

/**
 * Counts connections against {@linkcode AdmissionLimits}.
 *
 * @example
 * ```ts
 * import { Admission } from "./admission.ts";
 * const admission = new Admission({
 *   maxConnections: 10,
 *   maxConnectionsPerIp: 1,
 *   maxEndpointsPerWorker: 5,
 *   frameRatePerWorker: 10_000,
 * });
 * const lease = admission.connection("10.0.0.1");
 * console.assert(typeof lease === "object");
 * console.assert(admission.connection("10.0.0.1") === "too-many-from-address");
 * if (typeof lease === "object") lease.release();
 * console.assert(typeof admission.connection("10.0.0.1") === "object");
 * ```
 */
export class Admission {
  readonly #limits: AdmissionLimits;
  #total = 0;
  readonly #perAddress = new Map<string, number>();
  readonly #credentials = new Map<string, Credential>();

  /** An admission with nothing admitted yet. */
  constructor(limits: AdmissionLimits) {
    this.#limits = limits;
  }

  /** Connections held now. */
  get connections(): number {
    return this.#total;
  }

  /** Admit a connection from `address` (undefined: unknown, counted in the total only). */
  connection(address: string | undefined): Lease | AdmissionRefusal {
    if (this.#total >= this.#limits.maxConnections) return "too-many-connections";
    if (address !== undefined) {
      const held = this.#perAddress.get(address) ?? 0;
      if (held >= this.#limits.maxConnectionsPerIp) return "too-many-from-address";
      this.#perAddress.set(address, held + 1);
    }
    this.#total += 1;
    return once(() => {
      this.#total -= 1;
      if (address !== undefined) decrement(this.#perAddress, address);
    });
  }

  /**
   * Admit one more endpoint (WebSocket) for the worker credential `worker`; its lease carries the
   * credential's shared frame budget (`take()` a token per frame).
   */
  endpoint(worker: string): (Lease & { takeFrame(): boolean }) | AdmissionRefusal {
    let credential = this.#credentials.get(worker);
    if (credential && credential.coolUntil > Date.now()) return "cooling-down";
    if (credential && credential.connections >= this.#limits.maxEndpointsPerWorker) {
      return "too-many-endpoints";
    }
    if (!credential) {
      const rate = this.#limits.frameRatePerWorker;
      credential = {
        connections: 0,
        frames: new TokenBucket(rate, rate, performance.now()),
        coolUntil: 0,
      };
      this.#credentials.set(worker, credential);
    }
    credential.connections += 1;
    const held = credential;
    const lease = once(() => {
      held.connections -= 1;
      this.#forgetIdle(worker, held);
    });
    return { release: lease.release, takeFrame: () => held.frames.take(performance.now()) };
  }

  /** Refuse new sockets of `worker` for `ms` (it was caught flooding). */
  coolDown(worker: string, ms: number): void {
    const now = Date.now();
    // Records of credentials that hold nothing and whose cool-down is over go now.
    for (const [name, credential] of this.#credentials) {
      if (credential.connections === 0 && credential.coolUntil <= now) {
        this.#credentials.delete(name);
      }
    }
    const credential = this.#credentials.get(worker);
    if (credential) credential.coolUntil = Math.max(credential.coolUntil, now + ms);
  }

  /** Drop a credential's record once it holds nothing, unless it is cooling down. */
  #forgetIdle(worker: string, credential: Credential): void {
    if (credential.connections > 0 || this.#credentials.get(worker) !== credential) return;
    if (credential.coolUntil <= Date.now()) this.#credentials.delete(worker);
  }
}

function once(body: () => void): Lease {
  let released = false;
  return {
    release() {
      if (released) return;
      released = true;
      body();
    },
  };
}

function decrement(counts: Map<string, number>, key: string): void {
  const held = counts.get(key) ?? 0;
  if (held <= 1) counts.delete(key);
  else counts.set(key, held - 1);
}
