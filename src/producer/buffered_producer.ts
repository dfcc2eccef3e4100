/**
 * A ready-made producer endpoint: `submit()` jobs at any time; they wait in a buffer until the
 * controller grants credit (that is, until workers can take them).
 *
 * It keeps the contract's promises about loss and duplicates:
 * - a job stays in the producer until it is Stored, and after that until it is accepted into
 *   the pool; if the controller restarts in between (a new session), the job is resubmitted
 *   under its original MessageID, so a durable queue's first-write-wins dispatches it once;
 * - a retried grant gets the identical `Produced`;
 * - when several submissions wait, one `Produced` carries a batch of them.
 *
 * @module
 */

import { Deque } from "../core/deque.ts";
import { integerOption, optionsObject } from "../core/options.ts";
import { utf8Length } from "../core/utf8.ts";
import { JsonText } from "../protocol/json_text.ts";
import type { ProducerEndpoint, ProducerPort } from "../controller/producer_contract.ts";
import {
  type Accepted,
  type DeliveryConfirmed,
  MAX_ID_LENGTH,
  type RequestNext,
  type Stored,
} from "../protocol/schemas.ts";

/** Options of {@linkcode BufferedProducer}. */
export interface BufferedProducerOptions {
  /** Most jobs per `Produced` (further capped by each grant). Default 1000 (1..10,000). */
  readonly maxBatch?: number;
}

/** Options of {@linkcode BufferedProducer.submit}. */
export interface SubmitOptions {
  /** The stable deduplication key; default a random UUID. Reuse it to resubmit a job. */
  readonly messageId?: string;
}

/** What a submission resolves to once the job is Stored. */
export interface Receipt {
  /** The job's MessageID. */
  readonly messageId: string;
  /** Its producer-visible store sequence. */
  readonly seq: number;
  /** Resolves when the job entered the pending pool (durable: it now survives a crash). */
  readonly accepted: Promise<void>;
  /**
   * Resolves at the first worker confirmation; present only when the controller has
   * `deliveryConfirmation` on. Never settles if the job is lost (volatile controller restart).
   */
  readonly confirmed?: Promise<DeliveryConfirmed>;
}

interface Deferred<T> {
  readonly promise: Promise<T>;
  resolve(value: T): void;
  reject(error: unknown): void;
}

function deferred<T>(): Deferred<T> {
  let resolve!: (value: T) => void;
  let reject!: (error: unknown) => void;
  const promise = new Promise<T>((res, rej) => {
    resolve = res;
    reject = rej;
  });
  return { promise, resolve, reject };
}

/** Filled by the executors below: a promise's settle functions without a closure per promise. */
let settleReceipt: ((receipt: Receipt) => void) | undefined;
let rejectReceipt: ((error: unknown) => void) | undefined;
let settleAccepted: (() => void) | undefined;
function receiptExecutor(resolve: (receipt: Receipt) => void, reject: (error: unknown) => void) {
  settleReceipt = resolve;
  rejectReceipt = reject;
}
function acceptedExecutor(resolve: () => void) {
  settleAccepted = resolve;
}

/**
 * One submitted job. Lean on purpose: a large backlog of waiting jobs is mostly these, so it
 * holds its receipt's settle functions directly, and its `accepted` promise is made only when
 * someone asks the receipt for it.
 */
class Item {
  readonly resolve: (receipt: Receipt) => void;
  readonly reject: (error: unknown) => void;
  /**
   * The receipt's `accepted` promise and its settle function (undefined once settled), made
   * when first asked for; before that, whether the job was accepted.
   */
  acceptance: { readonly promise: Promise<void>; resolve: (() => void) | undefined } | boolean =
    false;
  stored = false;

  /** Made right after its receipt's promise, whose settle functions it takes. */
  constructor(
    /** Empty until the job is first produced, when a generated MessageID is made. */
    public messageId: string,
    readonly payload: JsonText,
  ) {
    this.resolve = settleReceipt!;
    this.reject = rejectReceipt!;
    settleReceipt = rejectReceipt = undefined;
  }

  /** The receipt's `accepted` promise (made on first use). */
  acceptedPromise(): Promise<void> {
    const acceptance = this.acceptance;
    if (typeof acceptance === "object") return acceptance.promise;
    if (acceptance) {
      const promise = Promise.resolve();
      this.acceptance = { promise, resolve: undefined };
      return promise;
    }
    const promise = new Promise<void>(acceptedExecutor);
    this.acceptance = { promise, resolve: settleAccepted };
    settleAccepted = undefined;
    return promise;
  }

  /** The job entered the pool. */
  markAccepted(): void {
    const acceptance = this.acceptance;
    if (typeof acceptance !== "object") {
      this.acceptance = true;
      return;
    }
    const resolve = acceptance.resolve;
    acceptance.resolve = undefined;
    resolve?.();
  }
}

/** What a submission resolves to; its `accepted` promise is made when first asked for. */
class StoredReceipt implements Receipt {
  readonly messageId: string;
  readonly seq: number;
  readonly confirmed: Promise<DeliveryConfirmed> | undefined;
  readonly #item: Item;

  constructor(item: Item, seq: number, confirmed: Promise<DeliveryConfirmed> | undefined) {
    this.messageId = item.messageId;
    this.seq = seq;
    this.confirmed = confirmed;
    this.#item = item;
  }

  /** Resolves when the job entered the pending pool. */
  get accepted(): Promise<void> {
    return this.#item.acceptedPromise();
  }
}

interface Batch {
  readonly session: string;
  readonly token: string;
  readonly items: readonly Item[];
}

/**
 * A buffered producer endpoint for a {@linkcode WorkPullingController}.
 *
 * @example Submit and wait for the confirmation
 * ```ts
 * import { BufferedProducer, connectInProcess, WorkerEndpoint, WorkPullingController } from "../../mod.ts";
 *
 * const producer = new BufferedProducer<string>();
 * const controller = new WorkPullingController({ name: "mail", producer, deliveryConfirmation: true });
 * await controller.start();
 * connectInProcess(controller, new WorkerEndpoint<string>({ producer: "mail", name: "w1", handler: () => {} }));
 * const receipt = await producer.submit("hello", { messageId: "mail-1" });
 * await receipt.confirmed;
 * await controller.close();
 * ```
 */
export class BufferedProducer<T = unknown> implements ProducerEndpoint {
  readonly #maxBatch: number;
  #port: ProducerPort | undefined;
  #session = "";
  readonly #buffer = new Deque<Item>();
  /**
   * The receipts of jobs submitted with an explicit MessageID and not yet stored, by MessageID:
   * a resubmission while waiting joins the same job. (A generated MessageID cannot be
   * resubmitted before its receipt names it, which is when it is stored.)
   */
  readonly #waiting = new Map<string, Promise<Receipt>>();
  /** Items not yet stored. */
  #unstored = 0;
  readonly #confirmations = new Map<string, Deferred<DeliveryConfirmed>>();
  #grant: RequestNext | undefined;
  #answered: (Batch & { readonly message: Parameters<ProducerPort["produced"]>[0] }) | undefined;
  #stored: Batch | undefined;
  #closed = false;

  /** Validates `options`. */
  constructor(options: BufferedProducerOptions = {}) {
    optionsObject("BufferedProducer", options);
    this.#maxBatch = integerOption(
      "BufferedProducer",
      "maxBatch",
      options.maxBatch,
      1000,
      1,
      10_000,
    );
  }

  /** Jobs submitted and not yet Stored. */
  get buffered(): number {
    return this.#unstored;
  }

  /**
   * Submit a job. Resolves once it is Stored (durably, with a queue) with its store sequence.
   * Rejects at once, losing nothing else, if the payload is not JSON-serializable, too large,
   * or the MessageID is invalid.
   */
  submit(payload: T, options?: SubmitOptions): Promise<Receipt> {
    if (this.#closed) return Promise.reject(new Error("Cannot submit: the producer is closed"));
    const port = this.#port;
    if (!port) {
      return Promise.reject(
        new Error("Cannot submit: the producer is not attached to a controller"),
      );
    }
    const named = options?.messageId;
    if (named !== undefined) {
      if (typeof named !== "string" || named.trim() === "" || named.length > MAX_ID_LENGTH) {
        return Promise.reject(
          new TypeError(
            `Cannot submit: messageId must be a non-blank string of at most ${MAX_ID_LENGTH} characters`,
          ),
        );
      }
      const existing = this.#waiting.get(named);
      if (existing) return existing;
    }
    // A generated MessageID is made when the job is first produced (nobody can name it before),
    // so a long backlog of waiting jobs does not hold one each; a delivery confirmation waits
    // under it from the start.
    const messageId = named ?? (port.deliveryConfirmation ? crypto.randomUUID() : "");
    const label = messageId ? ` ${messageId}` : "";
    // Encoded once, here: the controller takes the text as it is, and later changes to the
    // caller's object cannot reach the job.
    let json: JsonText;
    try {
      json = JsonText.encode(payload);
    } catch (error) {
      return Promise.reject(
        new TypeError(`Cannot submit${label}: the payload is not JSON-serializable`, {
          cause: error,
        }),
      );
    }
    const text = json.text;
    // A UTF-16 unit takes at most 3 UTF-8 bytes: count exactly only when it could matter.
    const size = text.length * 3 > port.maxPayloadBytes ? utf8Length(text) : text.length;
    if (size > port.maxPayloadBytes) {
      return Promise.reject(
        new RangeError(
          `Cannot submit${label}: the payload is ${size} bytes; the maximum is ${port.maxPayloadBytes}`,
        ),
      );
    }
    if (port.deliveryConfirmation) this.#confirmationFor(messageId);
    const promise = new Promise<Receipt>(receiptExecutor);
    const item = new Item(messageId, json); // takes the promise's settle functions
    if (named !== undefined) this.#waiting.set(messageId, promise);
    this.#unstored += 1;
    this.#buffer.pushBack(item);
    this.#answer();
    return promise;
  }

  /** Reject every job that is not Stored yet and refuse new ones. */
  close(reason: unknown = new Error("the producer was closed")): void {
    this.#closed = true;
    // Every item not stored yet is in the buffer or in the answer waiting for its Stored.
    for (const item of this.#answered?.items ?? []) if (!item.stored) item.reject(reason);
    for (const item of this.#buffer) if (!item.stored) item.reject(reason);
    this.#waiting.clear();
    this.#unstored = 0;
    this.#buffer.clear();
    this.#grant = undefined;
  }

  /** Called by the controller. */
  attach(port: ProducerPort): void {
    this.#port = port;
  }

  /** Called by the controller with a grant. */
  onRequestNext(request: RequestNext): void {
    const answered = this.#answered;
    if (answered && answered.session === request.session && answered.token === request.token) {
      this.#port!.produced(answered.message); // a retried grant: the identical answer
      return;
    }
    // Whatever the controller has not accepted goes back to the head of the buffer, in order:
    // the stored-but-unaccepted batch if the session changed (the controller restarted), and an
    // answer that was never stored.
    const unfinished = [
      ...(request.session !== this.#session ? this.#stored?.items ?? [] : []),
      ...(answered?.items ?? []),
    ];
    for (let i = unfinished.length - 1; i >= 0; i--) this.#buffer.pushFront(unfinished[i]);
    this.#session = request.session;
    this.#answered = undefined;
    this.#stored = undefined; // the previous grant of this session completed: it was accepted
    this.#grant = request;
    this.#answer();
  }

  /** Called by the controller when jobs are stored. */
  onStored(stored: Stored): void {
    const answered = this.#answered;
    if (answered && answered.session === stored.session && answered.token === stored.token) {
      const jobs = stored.jobs;
      for (let i = 0; i < jobs.length; i++) {
        const { messageId, seq } = jobs[i];
        const item = answered.items[i];
        if (item.messageId !== messageId) continue;
        if (item.stored) continue; // a resubmission after a restart: the receipt was given already
        item.stored = true;
        this.#unstored -= 1;
        if (this.#waiting.size > 0) this.#waiting.delete(messageId);
        const confirmed = this.#confirmations.size > 0
          ? this.#confirmations.get(messageId)?.promise
          : undefined;
        item.resolve(new StoredReceipt(item, seq, confirmed));
      }
      this.#stored = answered;
      this.#answered = undefined;
    }
    this.#port!.storedAck({ session: stored.session, token: stored.token });
  }

  /** Called by the controller when the stored jobs entered the pool. */
  onAccepted(accepted: Accepted): void {
    const stored = this.#stored;
    if (!stored || stored.session !== accepted.session || stored.token !== accepted.token) return;
    for (const item of stored.items) item.markAccepted();
    this.#stored = undefined;
  }

  /** Called by the controller when a worker confirmed a job. */
  onDeliveryConfirmed(notice: DeliveryConfirmed): void {
    const waiter = this.#confirmations.get(notice.messageId);
    if (!waiter) return;
    this.#confirmations.delete(notice.messageId);
    waiter.resolve(notice);
  }

  #confirmationFor(messageId: string): Deferred<DeliveryConfirmed> {
    let waiter = this.#confirmations.get(messageId);
    if (!waiter) this.#confirmations.set(messageId, waiter = deferred());
    return waiter;
  }

  #answer(): void {
    const grant = this.#grant;
    if (!grant || this.#buffer.length === 0 || this.#closed) return;
    const items: Item[] = [];
    const limit = Math.min(grant.maxJobs, this.#maxBatch);
    while (items.length < limit && this.#buffer.length > 0) items.push(this.#buffer.shift()!);
    const message = {
      session: grant.session,
      token: grant.token,
      jobs: items.map((item) => {
        if (item.messageId === "") item.messageId = crypto.randomUUID();
        return { messageId: item.messageId, payload: item.payload };
      }),
    };
    this.#grant = undefined;
    this.#answered = { session: grant.session, token: grant.token, items, message };
    this.#port!.produced(message);
  }
}
