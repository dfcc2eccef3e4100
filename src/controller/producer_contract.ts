/**
 * The producer contract, from the producer's side: what the controller calls on the producer,
 * and the port the producer answers on.
 *
 * The rules (the same as point-to-point reliable delivery):
 * - Answer every `RequestNext` with exactly one `Produced` of 1..`maxJobs` jobs, whenever work
 *   exists (a grant never expires). A retried grant (same session and token) must get the
 *   identical `Produced` again.
 * - Answer every `Stored` (including repeats) with a `StoredAck`.
 * - Keep every job recoverable until it is **accepted** (`onAccepted`, or the next grant of the
 *   same session), and resubmit whatever is not accepted under its original MessageID when a
 *   grant arrives from a new session. A reload returns accepted jobs only, so a job stored but
 *   not accepted when the controller dies exists only in your source. (The reference contract
 *   says "mark before StoredAck"; that is safe only when the producer outlives the controller —
 *   a producer in the controller's process that marks before the Accept is written loses the
 *   job if both die in between. `examples/durable_file_producer.ts` marks on `onAccepted`.)
 * - `DeliveryConfirmed` is best effort and may repeat: handle it idempotently by MessageID.
 *
 * @module
 */

import type {
  Accepted,
  DeliveryConfirmed,
  Produced,
  RequestNext,
  Stored,
  StoredAck,
} from "../protocol/schemas.ts";

/** Where the producer sends its answers. Messages are validated; a bad one is terminal. */
export interface ProducerPort {
  /** Answer a grant. */
  produced(message: Produced): void;
  /** Acknowledge a `Stored`. */
  storedAck(message: StoredAck): void;
  /** The largest payload the controller accepts, in UTF-8 bytes of its JSON text. */
  readonly maxPayloadBytes: number;
  /** Whether the controller sends `DeliveryConfirmed`. */
  readonly deliveryConfirmation: boolean;
}

/**
 * A producer endpoint: user code (or the ready-made `BufferedProducer`) in the controller's
 * process.
 *
 * @example A minimal producer of three jobs
 * ```ts
 * import type { ProducerEndpoint, ProducerPort, RequestNext, Stored } from "../../mod.ts";
 *
 * class ThreeJobs implements ProducerEndpoint {
 *   #port?: ProducerPort;
 *   #next = 1;
 *   #last?: { token: string; messageId: string; payload: number };
 *   attach(port: ProducerPort) { this.#port = port; }
 *   onRequestNext(request: RequestNext) {
 *     // A retried grant gets the identical answer.
 *     if (this.#last?.token !== request.token) {
 *       if (this.#next > 3) return; // no work now: keep the grant
 *       this.#last = { token: request.token, messageId: `job-${this.#next}`, payload: this.#next };
 *     }
 *     const { messageId, payload } = this.#last;
 *     this.#port!.produced({ session: request.session, token: request.token, messageId, payload });
 *   }
 *   onStored(stored: Stored) {
 *     if (this.#last?.token === stored.token) this.#next += 1;
 *     this.#port!.storedAck({ session: stored.session, token: stored.token });
 *   }
 * }
 * ```
 */
export interface ProducerEndpoint {
  /** Called by the controller's constructor with the port to answer on. */
  attach(port: ProducerPort): void;
  /** A grant (new, or retransmitted with the same token). */
  onRequestNext(message: RequestNext): void;
  /** Jobs stored (new, or retransmitted until acknowledged). */
  onStored(message: Stored): void;
  /** Optional: the jobs of a grant entered the pool (they now survive a restart if durable). */
  onAccepted?(message: Accepted): void;
  /** Optional: a worker confirmed a job (only with `deliveryConfirmation`). */
  onDeliveryConfirmed?(message: DeliveryConfirmed): void;
}
