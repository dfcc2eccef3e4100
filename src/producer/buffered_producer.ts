/**
 * A ready-made producer endpoint: `submit()` jobs at any time; they wait in a buffer until the
 * controller grants credit (that is, until workers can take them).
 *
 * It keeps the contract's promises about loss and duplicates:
 * - a job stays in the producer until it is Stored, and after that until it is accepted into
 *   the pool; if the controller restarts in between (a new session), the job is resubmitted
 *   under its original MessageID, so a durable queue's first-write-wins dispatches it once;
 * - a retried grant gets the identical `Produced`;
 * - when several submissions wait, one `Produced` carries a batch of them; submissions made in
 *   one synchronous run (a loop of `submit()` calls) are answered together when it ends, a
 *   microtask later, instead of one handshake and one jobs frame per job.
 *
 * @module
 */

import { Deque } from "../core/deque.ts";
import { integerOption, optionsObject } from "../core/options.ts";
import { utf8Length } from "../core/utf8.ts";
import { type EncodedBatch, encodedBatch } from "../protocol/encoded_batch.ts";
import { StoredBatch } from "../protocol/stored_batch.ts";
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

/** Options of {@linkcode BufferedProducer.submitMany}. */
export interface SubmitManyOptions {
  /** Each job's MessageID, in the order of the payloads; default a random UUID each. */
  readonly messageIds?: readonly string[];
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
 * How a refusal names the job: by its place in a `submitMany` batch (`index` ≥ 0) and by its
 * MessageID when it has one. Made only for an error message.
 */
function jobLabel(index: number, messageId: unknown): string {
  const id = typeof messageId === "string" && messageId !== "" ? messageId : undefined;
  if (index < 0) return id === undefined ? "Cannot submit" : `Cannot submit ${id}`;
  return `Cannot submit job ${index} of the batch${id === undefined ? "" : ` (${id})`}`;
}

/** Why `id` cannot be a MessageID, if it cannot. */
function invalidMessageId(id: unknown, index: number): TypeError | undefined {
  if (typeof id === "string" && id.trim() !== "" && id.length <= MAX_ID_LENGTH) return undefined;
  return new TypeError(
    `${
      jobLabel(index, undefined)
    }: messageId must be a non-blank string of at most ${MAX_ID_LENGTH} characters`,
  );
}

/**
 * One submitted job. Lean on purpose: a large backlog of waiting jobs is mostly these, so its
 * `accepted` promise is made only when someone asks the receipt for it.
 */
abstract class Item {
  /**
   * The receipt's `accepted` promise and its settle function (undefined once settled), made
   * when first asked for; before that, whether the job was accepted.
   */
  acceptance: { readonly promise: Promise<void>; resolve: (() => void) | undefined } | boolean =
    false;
  stored = false;

  constructor(
    /** Empty until the job is first produced, when a generated MessageID is made. */
    public messageId: string,
    /** The payload's JSON text (from `JSON.stringify`). */
    readonly text: string,
  ) {}

  /** The job is Stored: hand over its receipt. */
  abstract settle(receipt: Receipt): void;

  /** The job will never be Stored (the producer closed). */
  abstract fail(error: unknown): void;

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

/** A job of `submit()`: it holds its own receipt promise's settle functions. */
class SubmittedItem extends Item {
  readonly #resolve: (receipt: Receipt) => void;
  readonly #reject: (error: unknown) => void;

  /** Made right after its receipt's promise, whose settle functions it takes. */
  constructor(messageId: string, text: string) {
    super(messageId, text);
    this.#resolve = settleReceipt!;
    this.#reject = rejectReceipt!;
    settleReceipt = rejectReceipt = undefined;
  }

  settle(receipt: Receipt): void {
    this.#resolve(receipt);
  }

  fail(error: unknown): void {
    this.#reject(error);
  }
}

/** A job of `submitMany()`: one promise serves its whole batch. */
class BatchItem extends Item {
  constructor(
    messageId: string,
    text: string,
    readonly batch: SubmittedBatch,
    readonly index: number,
  ) {
    super(messageId, text);
  }

  settle(receipt: Receipt): void {
    this.batch.settle(this.index, receipt);
  }

  fail(error: unknown): void {
    this.batch.fail(error);
  }

  /**
   * A promise of this job's receipt, for a submission that joins it while it waits (rare): it
   * settles with the whole batch.
   */
  receipt(): Promise<Receipt> {
    return this.batch.promise.then((receipts) => receipts[this.index]);
  }
}

/** The jobs of one `submitMany()` call: resolves with every receipt once the last is Stored. */
class SubmittedBatch {
  readonly #settled = deferred<Receipt[]>();
  readonly #receipts: Receipt[];
  #remaining: number;
  /** Jobs of this batch that repeat an earlier one's MessageID, by the index they repeat. */
  #repeats: Map<number, number[]> | undefined;

  constructor(size: number) {
    this.#receipts = new Array(size);
    this.#remaining = size;
    if (size === 0) this.#settled.resolve([]);
  }

  /** Settles once: a receipt after a failure changes nothing. */
  get promise(): Promise<Receipt[]> {
    return this.#settled.promise;
  }

  settle(index: number, receipt: Receipt): void {
    this.#receipts[index] = receipt;
    this.#remaining -= 1;
    const repeats = this.#repeats?.get(index);
    if (repeats) {
      for (const repeat of repeats) this.#receipts[repeat] = receipt;
      this.#remaining -= repeats.length;
    }
    if (this.#remaining === 0) this.#settled.resolve(this.#receipts);
  }

  /** Job `index` repeats the MessageID of this batch's job `of`: its receipt is that job's. */
  repeat(index: number, of: number): void {
    this.#repeats ??= new Map();
    const repeats = this.#repeats.get(of);
    if (repeats) repeats.push(index);
    else this.#repeats.set(of, [index]);
  }

  fail(error: unknown): void {
    this.#settled.reject(error);
  }

  /** Job `index` is a resubmission of a job still waiting: its receipt is that job's. */
  join(index: number, receipt: Promise<Receipt>): void {
    receipt.then((value) => this.settle(index, value), (error) => this.fail(error));
  }
}

/** The receipt a submission joining a waiting job gets: that job's. */
function receiptOf(waiting: Promise<Receipt> | BatchItem): Promise<Receipt> {
  return waiting instanceof BatchItem ? waiting.receipt() : waiting;
}

/**
 * The jobs of one `submitMany()` call with generated MessageIDs that no answer has taken yet, as
 * their JSON texts alone: a waiting job costs its text, and becomes a `BatchItem` when an answer
 * takes it.
 */
class Segment {
  /** The batch index of the next job to take. */
  next = 0;

  constructor(readonly batch: SubmittedBatch, readonly texts: readonly string[]) {}
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
  readonly #buffer = new Deque<Item | Segment>();
  /**
   * The receipts of jobs submitted with an explicit MessageID and not yet stored, by MessageID:
   * a resubmission while waiting joins the same job. (A generated MessageID cannot be
   * resubmitted before its receipt names it, which is when it is stored.)
   */
  readonly #waiting = new Map<string, Promise<Receipt> | BatchItem>();
  /** Items not yet stored. */
  #unstored = 0;
  readonly #confirmations = new Map<string, Deferred<DeliveryConfirmed>>();
  #grant: RequestNext | undefined;
  #answered: (Batch & { readonly message: EncodedBatch }) | undefined;
  #stored: Batch | undefined;
  #closed = false;
  /** An answer is queued for the end of the current synchronous run. */
  #answerQueued = false;

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
    const refusal = this.#refusal();
    if (refusal) return Promise.reject(refusal);
    const port = this.#port!;
    const named = options?.messageId;
    if (named !== undefined) {
      const invalid = invalidMessageId(named, -1);
      if (invalid) return Promise.reject(invalid);
      const existing = this.#waiting.get(named);
      if (existing) return receiptOf(existing);
    }
    // A generated MessageID is made when the job is first produced (nobody can name it before),
    // so a long backlog of waiting jobs does not hold one each; a delivery confirmation waits
    // under it from the start.
    const messageId = named ?? (port.deliveryConfirmation ? crypto.randomUUID() : "");
    const text = this.#encode(payload, -1, messageId);
    if (typeof text !== "string") return Promise.reject(text);
    if (port.deliveryConfirmation) this.#confirmationFor(messageId);
    const promise = new Promise<Receipt>(receiptExecutor);
    // The item takes the promise's settle functions.
    const item = new SubmittedItem(messageId, text);
    if (named !== undefined) this.#waiting.set(messageId, promise);
    this.#unstored += 1;
    this.#buffer.pushBack(item);
    this.#answerSoon();
    return promise;
  }

  /**
   * Submit many jobs at once. Resolves once every one is Stored, with their receipts in the
   * order of `payloads`. One promise serves the whole batch, so a producer with many jobs at hand
   * spends much less per job than with a `submit()` each (a receipt's `accepted` and `confirmed`
   * are per job, as with `submit()`).
   *
   * Every payload and MessageID is checked first: if one is invalid, none is submitted and the
   * promise rejects naming its index. A MessageID that is still waiting in this producer (or
   * repeated in the batch) joins that job, as with `submit()`. If the producer is closed before
   * every job is Stored, the promise rejects; the jobs Stored by then stay in the queue (with
   * `messageIds`, submitting the batch again is deduplicated by a durable queue).
   *
   * @example Submit a batch and wait until every job is stored
   * ```ts
   * import { BufferedProducer, connectInProcess, WorkerEndpoint, WorkPullingController } from "../../mod.ts";
   *
   * const producer = new BufferedProducer<{ n: number }>();
   * const controller = new WorkPullingController({ name: "mail", producer });
   * await controller.start();
   * // Jobs are stored as workers ask for them.
   * connectInProcess(controller, new WorkerEndpoint({ producer: "mail", name: "w1", handler: () => {} }));
   * const receipts = await producer.submitMany([{ n: 1 }, { n: 2 }, { n: 3 }]);
   * console.log(receipts.map((receipt) => receipt.seq)); // [1, 2, 3]
   * await controller.close();
   * ```
   */
  submitMany(payloads: readonly T[], options?: SubmitManyOptions): Promise<Receipt[]> {
    const refusal = this.#refusal();
    if (refusal) return Promise.reject(refusal);
    const port = this.#port!;
    if (!Array.isArray(payloads)) {
      return Promise.reject(new TypeError("Cannot submit: payloads must be an array"));
    }
    const count = payloads.length;
    const ids = options?.messageIds;
    if (ids !== undefined && (!Array.isArray(ids) || ids.length !== count)) {
      return Promise.reject(
        new TypeError(`Cannot submit: messageIds must be an array of ${count} MessageIDs`),
      );
    }
    // Everything is checked before anything is submitted.
    const texts = new Array<string>(count);
    for (let i = 0; i < count; i++) {
      const invalid = ids === undefined ? undefined : invalidMessageId(ids[i], i);
      if (invalid) return Promise.reject(invalid);
      const text = this.#encode(payloads[i], i, ids?.[i]);
      if (typeof text !== "string") return Promise.reject(text);
      texts[i] = text;
    }
    const batch = new SubmittedBatch(count);
    if (ids === undefined && !port.deliveryConfirmation) {
      // No MessageID to know before the jobs are produced: they wait as their texts alone.
      if (count > 0) this.#buffer.pushBack(new Segment(batch, texts));
      this.#unstored += count;
      this.#answerSoon();
      return batch.promise;
    }
    for (let i = 0; i < count; i++) {
      const named: string | undefined = ids?.[i];
      const existing = named === undefined ? undefined : this.#waiting.get(named);
      if (existing instanceof BatchItem && existing.batch === batch) {
        batch.repeat(i, existing.index);
        continue;
      }
      if (existing) {
        batch.join(i, receiptOf(existing));
        continue;
      }
      const messageId = named ?? (port.deliveryConfirmation ? crypto.randomUUID() : "");
      if (port.deliveryConfirmation) this.#confirmationFor(messageId);
      const item = new BatchItem(messageId, texts[i], batch, i);
      if (named !== undefined) this.#waiting.set(named, item);
      this.#buffer.pushBack(item);
      this.#unstored += 1;
    }
    this.#answerSoon();
    return batch.promise;
  }

  /** Why nothing can be submitted now, if so. */
  #refusal(): Error | undefined {
    if (this.#closed) return new Error("Cannot submit: the producer is closed");
    if (!this.#port) {
      return new Error("Cannot submit: the producer is not attached to a controller");
    }
    return undefined;
  }

  /**
   * The payload as JSON text, or the error that refuses it (naming the job as `jobLabel` does).
   * Encoded once, here: the controller takes the text as it is, and later changes to the
   * caller's object cannot reach the job.
   */
  #encode(payload: unknown, index: number, messageId: string | undefined): string | Error {
    let text: string | undefined;
    let cause: unknown;
    try {
      text = JSON.stringify(payload);
    } catch (error) {
      cause = error;
    }
    if (text === undefined) {
      const what = `${jobLabel(index, messageId)}: the payload is not JSON-serializable`;
      return new TypeError(what, { cause });
    }
    const limit = this.#port!.maxPayloadBytes;
    // A UTF-16 unit takes at most 3 UTF-8 bytes: count exactly only when it could matter.
    const size = text.length * 3 > limit ? utf8Length(text) : text.length;
    if (size > limit) {
      return new RangeError(
        `${jobLabel(index, messageId)}: the payload is ${size} bytes; the maximum is ${limit}`,
      );
    }
    return text;
  }

  /** Reject every job that is not Stored yet and refuse new ones. */
  close(reason: unknown = new Error("the producer was closed")): void {
    this.#closed = true;
    // Every item not stored yet is in the buffer or in the answer waiting for its Stored.
    for (const item of this.#answered?.items ?? []) if (!item.stored) item.fail(reason);
    for (const waiting of this.#buffer) {
      if (waiting instanceof Segment) waiting.batch.fail(reason);
      else if (!waiting.stored) waiting.fail(reason);
    }
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
      // The controller's own `Stored` by column; any other `Stored` by its jobs.
      const { ids, seqs } = stored instanceof StoredBatch ? stored : {
        ids: stored.jobs.map((job) => job.messageId),
        seqs: stored.jobs.map((job) => job.seq),
      };
      for (let i = 0; i < ids.length; i++) {
        const messageId = ids[i];
        const seq = seqs[i];
        const item = answered.items[i];
        if (item.messageId !== messageId) continue;
        if (item.stored) continue; // a resubmission after a restart: the receipt was given already
        item.stored = true;
        this.#unstored -= 1;
        if (this.#waiting.size > 0) this.#waiting.delete(messageId);
        const confirmed = this.#confirmations.size > 0
          ? this.#confirmations.get(messageId)?.promise
          : undefined;
        item.settle(new StoredReceipt(item, seq, confirmed));
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

  /**
   * Answer the waiting grant once the caller's synchronous run is over: jobs submitted one by one
   * in a loop (a pacer's tick, a request handler's batch) then share one `Produced`, one store
   * and one jobs frame per worker, where answering each at once would take the whole handshake
   * and a frame per job.
   */
  #answerSoon(): void {
    if (this.#answerQueued || !this.#grant) return;
    this.#answerQueued = true;
    queueMicrotask(this.#answerQueuedGrant);
  }

  readonly #answerQueuedGrant = () => {
    this.#answerQueued = false;
    this.#answer();
  };

  #answer(): void {
    const grant = this.#grant;
    if (!grant || this.#buffer.length === 0 || this.#closed) return;
    const items: Item[] = [];
    const limit = Math.min(grant.maxJobs, this.#maxBatch);
    /** The MessageIDs of this answer's items that had one before it (generated ones are new). */
    let named: Set<string> | undefined;
    while (items.length < limit && this.#buffer.length > 0) {
      const head = this.#buffer.peek()!;
      if (!(head instanceof Segment)) {
        // A resubmission made after its job was Stored, waiting behind that job when a new
        // session sends the job again: it goes in the next answer, where the controller knows
        // the job (a Produced must not repeat a MessageID).
        if (head.messageId !== "") {
          named ??= new Set();
          if (named.has(head.messageId)) break;
          named.add(head.messageId);
        }
        items.push(this.#buffer.shift() as Item);
        continue;
      }
      const texts = head.texts;
      const end = Math.min(texts.length, head.next + limit - items.length);
      for (let i = head.next; i < end; i++) {
        items.push(new BatchItem("", texts[i], head.batch, i));
      }
      head.next = end;
      if (end === texts.length) this.#buffer.shift();
    }
    // Checked and encoded at submission: the answer carries the columns as they are.
    const ids: string[] = new Array(items.length);
    const texts: string[] = new Array(items.length);
    for (let i = 0; i < items.length; i++) {
      const item = items[i];
      if (item.messageId === "") item.messageId = crypto.randomUUID();
      ids[i] = item.messageId;
      texts[i] = item.text;
    }
    const message = encodedBatch(grant.session, grant.token, ids, texts);
    this.#grant = undefined;
    this.#answered = { session: grant.session, token: grant.token, items, message };
    this.#port!.produced(message);
  }
}
