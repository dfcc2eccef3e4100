/**
 * The dashboard's live streams (`GET /events`, server-sent events): one snapshot built per tick
 * and the same text sent to every viewer, with every resource bounded.
 *
 * - **One timer, only while someone watches.** The first stream starts the ticks, the last one
 *   to end stops them. A tick builds one snapshot (`snapshot.ts`); building it is measured, and
 *   the next tick waits twenty times as long when that is more than the interval, so the
 *   dashboard takes at most a twentieth of the server's time however large the flow.
 * - **Never waiting for a viewer.** Each stream has at most one write outstanding. A viewer
 *   whose previous snapshot is still unwritten (it does not read, or reads slowly) skips the
 *   new one; after ten skipped in a row its stream is cut. Memory per viewer: one snapshot.
 * - **Unchanged snapshots are not sent again**; a comment line goes out instead every 15 s
 *   (a heartbeat, so proxies and Bun's idle timeout keep the connection).
 * - **Caps**: streams in total, per client address and per credential; refused with 429
 *   before the stream opens.
 * - **Credentials**: a stream ends at its credential's expiry (event `end`, reason `expired`),
 *   and when re-authenticating the request (every `recheckInterval`) fails (`revoked`).
 * - **Endings**: the controller closed (`closed`), the server closing (`closeAll`), the viewer
 *   gone. A stream that cannot end politely within 5 s is aborted.
 *
 * Events on the stream: `snapshot` (data: the snapshot's JSON) and `end` (data:
 * `{"reason": ...}`), plus comment lines.
 *
 * @module
 */

import type { SSEStreamingApi } from "hono/streaming";

/** Where snapshots come from. */
export interface SnapshotProvider {
  /** Whether the flow is closed for good (every stream ends). */
  readonly closed: boolean;
  /** Anything asynchronous a snapshot needs (bounded in time). */
  prepare(): Promise<void>;
  /** The snapshot now, as JSON text. */
  build(): string;
}

/** Limits of the live streams. */
export interface LiveStreamLimits {
  /** Ticks at least this far apart, ms. */
  readonly interval: number;
  /** Streams in total. */
  readonly maxStreams: number;
  /** Streams per client address, and per credential. */
  readonly maxStreamsPerClient: number;
  /** Re-authenticate each stream this often, ms (0: never). */
  readonly recheckInterval: number;
}

/** Who opens a stream. */
export interface StreamClient {
  /** The client address, when known. */
  readonly address: string | undefined;
  /** The credential (the token), for the per-credential cap; absent: none is applied. */
  readonly credential?: string;
  /** When the credential expires, Unix ms. */
  readonly expiresAt?: number;
  /** Whether the credential is still valid (re-run every `recheckInterval`). */
  readonly recheck?: () => Promise<boolean>;
}

/** Why a stream was refused. */
export type StreamRefusal =
  | "too-many-streams"
  | "too-many-streams-from-address"
  | "too-many-streams-for-credential";

/** Why a stream ended. */
export type StreamEnd = "expired" | "revoked" | "closed" | "slow" | "gone";

/** A place held by an admitted stream. */
export interface StreamPlace {
  /** Give it back (idempotent). */
  release(): void;
}

interface Subscriber {
  readonly stream: SSEStreamingApi;
  readonly client: StreamClient;
  readonly place: StreamPlace;
  readonly done: () => void;
  writing: boolean;
  skipped: number;
  lastText: string;
  lastWrite: number;
  checkedAt: number;
  checking: boolean;
  ended: boolean;
  expiry: ReturnType<typeof setTimeout> | undefined;
}

/** Snapshots a viewer may leave unwritten in a row before its stream is cut. */
const MAX_SKIPPED = 10;
const HEARTBEAT = 15_000;
/** A stream that has not ended politely this long after being told to is aborted, ms. */
const END_GRACE = 5000;
/** The dashboard's share of the server's time, at most. */
const BUSY_SHARE = 20;
const MAX_TIMER = 2 ** 31 - 1;

/**
 * The live streams of one app.
 *
 * @example Refused past the per-client cap
 * ```ts
 * import { LiveStreams } from "./live_stream.ts";
 * const streams = new LiveStreams(
 *   { closed: false, prepare: () => Promise.resolve(), build: () => "{}" },
 *   { interval: 1000, maxStreams: 10, maxStreamsPerClient: 1, recheckInterval: 0 },
 * );
 * const place = streams.admit({ address: "10.0.0.1", credential: "t" });
 * console.assert(typeof place === "object");
 * console.assert(streams.admit({ address: "10.0.0.1", credential: "u" }) === "too-many-streams-from-address");
 * if (typeof place === "object") place.release();
 * ```
 */
export class LiveStreams {
  readonly #source: SnapshotProvider;
  readonly #limits: LiveStreamLimits;
  readonly #subscribers = new Set<Subscriber>();
  readonly #perAddress = new Map<string, number>();
  readonly #perCredential = new Map<string, number>();
  #held = 0;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #ticking = false;
  #latest: { text: string; at: number } | undefined;

  /** Streams of snapshots from `source`, within `limits`. */
  constructor(source: SnapshotProvider, limits: LiveStreamLimits) {
    this.#source = source;
    this.#limits = limits;
  }

  /** Streams open now. */
  get size(): number {
    return this.#subscribers.size;
  }

  /** Take a place for a new stream, or say why not. */
  admit(client: StreamClient): StreamPlace | StreamRefusal {
    const limits = this.#limits;
    if (this.#held >= limits.maxStreams) return "too-many-streams";
    const { address, credential } = client;
    if (
      address !== undefined && (this.#perAddress.get(address) ?? 0) >= limits.maxStreamsPerClient
    ) {
      return "too-many-streams-from-address";
    }
    if (
      credential !== undefined &&
      (this.#perCredential.get(credential) ?? 0) >= limits.maxStreamsPerClient
    ) {
      return "too-many-streams-for-credential";
    }
    this.#held += 1;
    if (address !== undefined) increment(this.#perAddress, address, 1);
    if (credential !== undefined) increment(this.#perCredential, credential, 1);
    let released = false;
    return {
      release: () => {
        if (released) return;
        released = true;
        this.#held -= 1;
        if (address !== undefined) increment(this.#perAddress, address, -1);
        if (credential !== undefined) increment(this.#perCredential, credential, -1);
      },
    };
  }

  /** Serve snapshots on `stream` until it ends; resolves then (the place is released). */
  serve(stream: SSEStreamingApi, client: StreamClient, place: StreamPlace): Promise<void> {
    return new Promise<void>((done) => {
      const subscriber: Subscriber = {
        stream,
        client,
        place,
        done,
        writing: false,
        skipped: 0,
        lastText: "",
        lastWrite: 0,
        checkedAt: Date.now(),
        checking: false,
        ended: false,
        expiry: undefined,
      };
      this.#subscribers.add(subscriber);
      stream.onAbort(() => this.#end(subscriber, "gone"));
      if (stream.aborted) return this.#end(subscriber, "gone");
      if (client.expiresAt !== undefined) this.#watchExpiry(subscriber, client.expiresAt);
      // A new viewer gets a snapshot at once: the latest if fresh, else a tick now.
      const latest = this.#latest;
      if (latest && Date.now() - latest.at < this.#limits.interval) {
        this.#send(subscriber, latest.text, Date.now());
        this.#schedule(this.#limits.interval);
      } else {
        this.#schedule(0);
      }
    });
  }

  /** End every stream (the server is closing). */
  closeAll(reason: StreamEnd = "closed"): void {
    for (const subscriber of [...this.#subscribers]) this.#end(subscriber, reason);
  }

  #schedule(delay: number): void {
    if (this.#subscribers.size === 0 || this.#ticking) return;
    if (this.#timer !== undefined) {
      if (delay > 0) return;
      clearTimeout(this.#timer);
    }
    this.#timer = setTimeout(() => {
      this.#timer = undefined;
      this.#tick().catch((error) => console.error("workpull: a dashboard tick failed", error));
    }, delay);
  }

  async #tick(): Promise<void> {
    if (this.#subscribers.size === 0) return;
    if (this.#source.closed) return this.closeAll("closed");
    this.#ticking = true;
    let spent = 0;
    try {
      await this.#source.prepare();
      const started = performance.now();
      const text = this.#source.build();
      spent = performance.now() - started;
      const now = Date.now();
      this.#latest = { text, at: now };
      for (const subscriber of [...this.#subscribers]) {
        this.#recheck(subscriber, now);
        if (!subscriber.ended) this.#send(subscriber, text, now);
      }
    } finally {
      this.#ticking = false;
    }
    this.#schedule(Math.max(this.#limits.interval, BUSY_SHARE * spent));
  }

  #send(subscriber: Subscriber, text: string, now: number): void {
    if (subscriber.writing) {
      if (++subscriber.skipped >= MAX_SKIPPED) this.#end(subscriber, "slow");
      return;
    }
    const unchanged = text === subscriber.lastText;
    if (unchanged && now - subscriber.lastWrite < HEARTBEAT) return;
    subscriber.writing = true;
    subscriber.lastText = text;
    subscriber.lastWrite = now;
    const chunk = unchanged ? ": heartbeat\n\n" : `event: snapshot\ndata: ${text}\n\n`;
    subscriber.stream.write(chunk).then(() => {
      subscriber.writing = false;
      subscriber.skipped = 0;
    });
  }

  /** Re-authenticate a stream's request now and then; a refusal ends it. */
  #recheck(subscriber: Subscriber, now: number): void {
    const { recheck } = subscriber.client;
    const every = this.#limits.recheckInterval;
    if (!recheck || every <= 0 || subscriber.checking || now - subscriber.checkedAt < every) return;
    subscriber.checking = true;
    subscriber.checkedAt = now;
    recheck().then(
      (valid) => {
        subscriber.checking = false;
        if (!valid) this.#end(subscriber, "revoked");
      },
      (error) => {
        subscriber.checking = false;
        console.error("workpull: re-checking a dashboard credential failed", error);
      },
    );
  }

  #watchExpiry(subscriber: Subscriber, expiresAt: number): void {
    const remaining = expiresAt - Date.now();
    subscriber.expiry = setTimeout(
      () =>
        remaining > MAX_TIMER
          ? this.#watchExpiry(subscriber, expiresAt)
          : this.#end(subscriber, "expired"),
      Math.max(0, Math.min(remaining, MAX_TIMER)),
    );
  }

  #end(subscriber: Subscriber, reason: StreamEnd): void {
    if (subscriber.ended) return;
    subscriber.ended = true;
    this.#subscribers.delete(subscriber);
    clearTimeout(subscriber.expiry);
    subscriber.place.release();
    const { stream } = subscriber;
    if (reason === "gone" || reason === "slow" || subscriber.writing) {
      stream.abort();
    } else {
      // Say why, then close; a viewer that stops reading right now is cut after a grace.
      const grace = setTimeout(() => stream.abort(), END_GRACE);
      stream.write(`event: end\ndata: {"reason":"${reason}"}\n\n`)
        .then(() => stream.close())
        .finally(() => clearTimeout(grace));
    }
    subscriber.done();
    if (this.#subscribers.size === 0 && this.#timer !== undefined) {
      clearTimeout(this.#timer);
      this.#timer = undefined;
    }
  }
}

function increment(counts: Map<string, number>, key: string, by: number): void {
  const value = (counts.get(key) ?? 0) + by;
  if (value <= 0) counts.delete(key);
  else counts.set(key, value);
}
