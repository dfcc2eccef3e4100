/**
 * The producer handshake: how jobs get from the producer into the controller's pool.
 *
 * Idle → credit → store → stored-ack → accept → idle. The controller opens credit
 * ({@linkcode ProducerHandshake.ask}) when its workers' free demand exceeds the pool; the producer
 * answers the `RequestNext` with a `Produced` of up to `maxJobs` jobs; the jobs are stored (through
 * the durable lane, or numbered in memory), the producer acknowledges the `Stored`, the jobs are
 * accepted (the lane writes the Accept) and enter the pool. A job the controller holds or
 * completed recently keeps its store sequence and is neither stored, accepted nor dispatched again.
 *
 * The duplicate ladder is the reference's: an exact repeat of the answer in progress, or of the
 * last completed one, is dropped; anything else out of turn breaks the producer contract, which is
 * terminal. The open step is retransmitted at every controller tick ({@linkcode remind}).
 *
 * Everything runs inside the controller's mailbox turn; the controller's tables, pool and lane are
 * reached through a {@linkcode HandshakeHost}.
 *
 * @module
 */

import { hashIds, hasRepeats } from "../core/id_table.ts";
import type { Logger } from "../core/logger.ts";
import { utf8Length } from "../core/utf8.ts";
import { jsonTextOf } from "../protocol/json_text.ts";
import { MAX_SEQ, type RequestNext, type Stored, StoredAckSchema } from "../protocol/schemas.ts";
import { StoredBatch } from "../protocol/stored_batch.ts";
import type { BatchStoreJob, StoreResult } from "../queue/work_queue.ts";
import * as v from "valibot";
import { type Job, newJob } from "./binding.ts";
import type { DurableLane } from "./durable_lane.ts";
import { type ProducedTries, readProduced } from "./produced_reader.ts";
import type { ProducerEndpoint } from "./producer_contract.ts";

/** What the handshake needs of its controller. */
export interface HandshakeHost {
  /** The current session: a message of another is an earlier session's, and is dropped. */
  session(): string;
  /** Whether the controller is running (it takes producer messages only then). */
  running(): boolean;
  /** The durable lane, when the controller has a queue. */
  readonly lane: DurableLane | undefined;
  /** The job the controller holds (in the pool or at a worker) under this MessageID. */
  held(messageId: string, hash: number): Job | undefined;
  /** The store sequence of a MessageID confirmed recently (the dedupe window). */
  completedSeq(messageId: string, hash: number): number | undefined;
  /** `count` jobs were stored for the first time. */
  countStored(count: number): void;
  /** The handshake's jobs are accepted: put them in the pool. */
  accept(jobs: readonly Job[]): void;
  /** Dispatch and open credit again (the handshake is idle when this is called). */
  progress(): void;
  /** The lane has work: start it once the mailbox drains. */
  pumpLane(): void;
  /** The producer broke its contract: a terminal failure. */
  fail(error: Error): void;
}

/** The handshake's settings, from the controller's options. */
export interface HandshakeOptions {
  /** The producer the handshake talks to. */
  readonly producer: ProducerEndpoint;
  /** Where a producer's exception is logged. */
  readonly logger: Logger;
  /** The largest payload accepted, in UTF-8 bytes of its JSON text. */
  readonly maxPayloadBytes: number;
}

type Phase =
  | { readonly phase: "idle" }
  | { readonly phase: "credit"; readonly request: RequestNext }
  | {
    readonly phase: "store";
    readonly token: string;
    readonly ids: readonly string[];
    /** The MessageIDs' `hashId`, by position. */
    readonly hashes: Int32Array;
    /** Every MessageID goes into JSON text as it is (see `EncodedJob.plainId`). */
    readonly plainIds: boolean;
    /** The jobs' tries as produced, by position; undefined when no job carries one. */
    readonly tries: readonly (ProducedTries | undefined)[] | undefined;
    /** Their payloads' JSON text, by position. */
    readonly texts: readonly string[];
    /**
     * Results known without a store (jobs held or completed recently), by position; undefined
     * when none is known.
     */
    readonly known: readonly (StoreResult | undefined)[] | undefined;
  }
  | {
    readonly phase: "stored-ack";
    readonly token: string;
    readonly ids: readonly string[];
    readonly stored: Stored;
    /** The jobs to accept into the pool (not those held or completed recently), in order. */
    readonly accept: readonly Job[];
    /**
     * The MessageIDs whose Accept the queue must write (not those it accepted at the store); none
     * without a durable queue.
     */
    readonly unaccepted: readonly string[];
  }
  | {
    readonly phase: "accept";
    readonly token: string;
    readonly ids: readonly string[];
    readonly accept: readonly Job[];
  };

const IDLE: Phase = { phase: "idle" };

/**
 * One controller's side of the producer handshake.
 *
 * @example A grant answered, stored and accepted in memory
 * ```ts
 * import { ProducerHandshake } from "./producer_handshake.ts";
 * import type { Job } from "./binding.ts";
 * import type { ProducerEndpoint } from "./producer_contract.ts";
 *
 * const pool: Job[] = [];
 * const handshake = new ProducerHandshake(
 *   {
 *     producer: {
 *       attach() {},
 *       onRequestNext: (request) =>
 *         queueMicrotask(() =>
 *           handshake.onProduced({ ...request, messageId: "job-1", payload: { n: 1 } })
 *         ),
 *       onStored: (stored) => queueMicrotask(() => handshake.onStoredAck(stored)),
 *     } satisfies ProducerEndpoint,
 *     logger: console,
 *     maxPayloadBytes: 1024,
 *   },
 *   {
 *     session: () => "s1",
 *     running: () => true,
 *     lane: undefined,
 *     held: () => undefined,
 *     completedSeq: () => undefined,
 *     countStored() {},
 *     accept: (jobs) => void pool.push(...jobs),
 *     progress() {},
 *     pumpLane() {},
 *     fail: (error) => console.error(error),
 *   },
 * );
 * handshake.ask(10);
 * await new Promise((resolve) => setTimeout(resolve, 0));
 * console.assert(pool.length === 1 && pool[0].messageId === "job-1" && handshake.idle);
 * ```
 */
export class ProducerHandshake {
  #phase: Phase = IDLE;
  #lastCompleted: { token: string; ids: readonly string[] } | undefined;
  #tokenCounter = 0;
  #storeSeq = 0;
  #payloadChars = 0;
  readonly #options: HandshakeOptions;
  readonly #host: HandshakeHost;

  /** Takes the controller's settings and the host that holds its tables. */
  constructor(options: HandshakeOptions, host: HandshakeHost) {
    this.#options = options;
    this.#host = host;
  }

  /** Whether no grant is open: the controller may ask for more. */
  get idle(): boolean {
    return this.#phase.phase === "idle";
  }

  /** Mean payload characters of the latest accepted batch (0 before one): what a job may weigh. */
  get payloadChars(): number {
    return this.#payloadChars;
  }

  /** Forget the incarnation's handshake; the next job stored takes sequence `storeSeq + 1`. */
  reset(storeSeq = 0): void {
    this.#phase = IDLE;
    this.#lastCompleted = undefined;
    this.#storeSeq = storeSeq;
  }

  /** Open credit for up to `maxJobs` jobs (the handshake is idle). */
  ask(maxJobs: number): void {
    const request: RequestNext = {
      session: this.#host.session(),
      token: `t${++this.#tokenCounter}`,
      maxJobs,
    };
    this.#phase = { phase: "credit", request };
    this.tell((p) => p.onRequestNext(request));
  }

  /** Retransmit the open step the producer answers: the grant, or the `Stored`. */
  remind(): void {
    const phase = this.#phase;
    if (phase.phase === "credit") this.tell((p) => p.onRequestNext(phase.request));
    if (phase.phase === "stored-ack") this.tell((p) => p.onStored(phase.stored));
  }

  /** Call the producer; its exceptions are its own and must not break the controller. */
  tell(call: (producer: ProducerEndpoint) => void): void {
    try {
      call(this.#options.producer);
    } catch (error) {
      this.#options.logger.error("the producer threw while handling a controller message", error);
    }
  }

  /** The producer's answer to a grant. */
  onProduced(raw: unknown): void {
    const host = this.#host;
    if (!host.running()) return;
    const message = readProduced(raw);
    if (!message.ok) return host.fail(new TypeError(`invalid Produced: ${message.message}`));
    if (message.session !== host.session()) return; // an earlier session's answer
    const { ids, payloads, encoded, tries } = message;
    const phase = this.#phase;
    if (
      (phase.phase === "store" || phase.phase === "stored-ack" || phase.phase === "accept") &&
      phase.token === message.token && sameIds(phase.ids, ids)
    ) return; // an exact duplicate of the answer in progress
    const last = this.#lastCompleted;
    if (last && last.token === message.token && sameIds(last.ids, ids)) return; // a late duplicate
    if (phase.phase !== "credit") {
      return host.fail(new Error(`unexpected Produced in phase ${phase.phase}`));
    }
    if (phase.request.token !== message.token) {
      return host.fail(new Error("Produced token mismatch"));
    }
    if (ids.length > phase.request.maxJobs) {
      return host.fail(
        new RangeError(
          `Produced carries ${ids.length} jobs; the grant allowed ${phase.request.maxJobs}`,
        ),
      );
    }
    // Every table the jobs pass through takes this hash of their MessageIDs (see IdTable).
    const hashes = new Int32Array(ids.length);
    const plainIds = hashIds(ids, hashes);
    if (hasRepeats(ids, hashes)) return host.fail(new Error("Produced repeats a MessageID"));
    const maxPayloadBytes = this.#options.maxPayloadBytes;
    const texts: string[] = new Array(ids.length);
    for (let i = 0; i < ids.length; i++) {
      const payload = encoded ? payloads[i] as string : jsonTextOf(payloads[i]);
      if (payload === undefined) {
        return host.fail(new TypeError(`the payload of ${ids[i]} is not JSON-serializable`));
      }
      // A UTF-16 unit takes at most 3 UTF-8 bytes: count exactly only when it could matter.
      if (payload.length * 3 > maxPayloadBytes && utf8Length(payload) > maxPayloadBytes) {
        return host.fail(
          new RangeError(`the payload of ${ids[i]} exceeds ${maxPayloadBytes} bytes`),
        );
      }
      texts[i] = payload;
    }
    // A job the controller holds (in the pool or at a worker: stored and accepted already) or
    // completed recently keeps its sequence and is neither stored, accepted nor dispatched again.
    // Skipping the queue for it also avoids accepting a job that is confirmed (and compacted)
    // while this handshake runs.
    let known: (StoreResult | undefined)[] | undefined;
    let fresh = ids.length;
    for (let i = 0; i < ids.length; i++) {
      const messageId = ids[i];
      const seq = host.completedSeq(messageId, hashes[i]);
      const held = seq === undefined ? host.held(messageId, hashes[i]) : undefined;
      if (seq === undefined && !held) continue;
      known ??= new Array(ids.length);
      known[i] = held
        ? { seq: held.storeSeq, alreadyStored: true, payload: held.payload }
        : { seq: seq!, alreadyStored: true, payload: texts[i] };
      fresh -= 1;
    }
    this.#phase = {
      phase: "store",
      token: message.token,
      ids,
      hashes,
      plainIds,
      tries,
      texts,
      known,
    };
    const lane = host.lane;
    if (lane && fresh > 0) {
      const unknown: BatchStoreJob[] = [];
      for (let i = 0; i < ids.length; i++) {
        if (!known?.[i]) unknown.push({ messageId: ids[i], payload: texts[i] });
      }
      lane.store(unknown, this.#storeSeq);
      host.pumpLane();
      return;
    }
    if (this.#storeSeq > MAX_SEQ - fresh) {
      return host.fail(new RangeError("store sequence space exhausted"));
    }
    this.#complete(undefined);
  }

  /**
   * The lane stored the jobs not known in advance (`results`, in order); the queue's sequences
   * now run to `cursor`.
   */
  onLaneStored(cursor: number, results: readonly StoreResult[]): void {
    this.#storeSeq = cursor;
    this.#complete(results);
  }

  /** The producer acknowledged a `Stored`. */
  onStoredAck(raw: unknown): void {
    const host = this.#host;
    if (!host.running()) return;
    const parsed = v.safeParse(StoredAckSchema, raw);
    if (!parsed.success) {
      return host.fail(new TypeError(`invalid StoredAck: ${parsed.issues[0].message}`));
    }
    const { session, token } = parsed.output;
    if (session !== host.session()) return;
    const phase = this.#phase;
    if (phase.phase === "stored-ack" && phase.token === token) {
      const { ids, accept, unaccepted } = phase;
      this.#phase = { phase: "accept", token, ids, accept };
      if (host.lane && unaccepted.length > 0) {
        host.lane.accept(unaccepted);
        host.pumpLane();
      } else {
        this.onLaneAccepted();
      }
      return;
    }
    if (phase.phase === "accept" && phase.token === token) return;
    if (this.#lastCompleted?.token === token) return;
    host.fail(new Error(`unexpected StoredAck in phase ${phase.phase}`));
  }

  /** The jobs are accepted (the lane wrote the Accept, or there is nothing to write). */
  onLaneAccepted(): void {
    const phase = this.#phase;
    if (phase.phase !== "accept") return;
    // `accept` leaves out the jobs the controller held or completed recently at Produced time,
    // and nothing else enters the controller's table while a handshake runs (only its own accept
    // does): a resubmission is never dispatched twice.
    const accept = phase.accept;
    if (accept.length > 0) {
      let chars = 0;
      for (let i = 0; i < accept.length; i++) chars += accept[i].payload.length;
      this.#payloadChars = Math.max(1, chars / accept.length);
    }
    this.#host.accept(accept);
    this.#lastCompleted = { token: phase.token, ids: phase.ids };
    this.#phase = IDLE;
    const accepted = { session: this.#host.session(), token: phase.token };
    this.tell((p) => p.onAccepted?.(accepted));
    this.#host.progress();
  }

  /**
   * `results` are the store results of the jobs not known in advance, in order; without a
   * durable queue (undefined) those jobs take the next store sequences and keep their text.
   */
  #complete(results: readonly StoreResult[] | undefined): void {
    const phase = this.#phase;
    if (phase.phase !== "store") return;
    const { known, ids, hashes, plainIds, tries, texts } = phase;
    const accept: Job[] = [];
    const unaccepted: string[] = [];
    const seqs: number[] = new Array(ids.length);
    let stored = 0;
    let next = 0;
    for (let i = 0; i < ids.length; i++) {
      const messageId = ids[i];
      const held = known?.[i];
      if (held) {
        seqs[i] = held.seq;
        continue;
      }
      let seq: number;
      let payload: string;
      if (results) {
        const result = results[next++];
        seq = result.seq;
        payload = result.payload;
        if (!result.alreadyStored) stored += 1;
        if (result.accepted !== true) unaccepted.push(messageId);
      } else {
        seq = ++this.#storeSeq;
        payload = texts[i];
        stored += 1;
      }
      const tried = tries?.[i];
      accept.push(
        newJob(
          messageId,
          seq,
          payload,
          tried?.attempt,
          tried?.timeout,
          tried?.lost,
          hashes[i],
          plainIds,
        ),
      );
      seqs[i] = seq;
    }
    if (stored > 0) this.#host.countStored(stored);
    const message = new StoredBatch(this.#host.session(), phase.token, ids, seqs);
    this.#phase = {
      phase: "stored-ack",
      token: phase.token,
      ids: phase.ids,
      stored: message,
      accept,
      unaccepted,
    };
    this.tell((p) => p.onStored(message));
  }
}

function sameIds(a: readonly string[], b: readonly string[]): boolean {
  return a.length === b.length && a.every((id, i) => id === b[i]);
}
