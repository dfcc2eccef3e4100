/**
 * A producer endpoint whose source of jobs is a file, for a controller with a durable queue:
 * together they lose no job when the process dies at any point (a crash, `kill -9`).
 *
 * Two append-only files:
 *
 * - the **source**, one JSON object a line: `{"messageId":"job-1","payload":{...}}`, written by
 *   whoever produces jobs (or by {@linkcode DurableFileProducer.add});
 * - the **marks**, one JSON string a line: the MessageIDs the controller has *accepted*, that is,
 *   jobs the durable queue now holds and will reload after a crash.
 *
 * At start the producer offers every job of the source that is not marked, under its original
 * MessageID: the contract's recovery. Each file is appended with one `write` and made durable
 * with `fsync` before anything depends on it. A line cut short by a crash was never durable and
 * is dropped (and truncated away) on the next start.
 *
 * **When to mark.** The producer contract says to mark a job durably before acknowledging
 * `Stored`. That is right for a producer that *consumes* its source (acknowledges an upstream
 * message, deletes a row) and runs apart from the controller. Here the producer and the
 * controller share a process, and the controller's Accept is a separate, later write: a job
 * marked at `Stored` whose Accept never landed would be neither reloaded by the queue (it holds
 * accepted jobs only) nor offered again by the producer, hence lost. So this producer marks a job
 * only once the controller reports it accepted (`onAccepted`), and until then keeps it
 * recoverable. Offering a job that was already stored is harmless: the queue's first write wins,
 * the job keeps its original store sequence, and the controller does not dispatch a job it
 * already holds.
 *
 * While the producer runs it is the only writer of both files: add jobs through
 * {@linkcode DurableFileProducer.add} (or write the source while no producer runs). The files
 * only grow; rotate them (start a new pair) once every job of the source is marked. The file API
 * is `node:fs`, which Deno, Bun and Node all provide.
 *
 * @example Jobs from a file, a controller on a Deno KV file, one in-process worker
 * ```ts
 * import { DurableFileProducer } from "./durable_file_producer.ts";
 * import { connectInProcess, WorkerEndpoint, WorkPullingController } from "../mod.ts";
 * import { DenoKvWorkQueue } from "../deno_kv.ts";
 *
 * const dir = await Deno.makeTempDir();
 * const kv = await Deno.openKv(`${dir}/queue.kv`);
 * const producer = new DurableFileProducer<{ to: string }>({
 *   source: `${dir}/source.jsonl`,
 *   marks: `${dir}/marks.jsonl`,
 * });
 * const controller = new WorkPullingController({
 *   name: "mail",
 *   producer,
 *   queue: new DenoKvWorkQueue(kv, { prefix: ["workpull", "mail"] }),
 * });
 * await controller.start();
 * const sent = Promise.withResolvers<string>();
 * connectInProcess(controller, new WorkerEndpoint<{ to: string }>({
 *   producer: "mail",
 *   name: "w1",
 *   handler: ({ payload }) => sent.resolve(payload.to),
 * }));
 * producer.add({ messageId: "mail-1", payload: { to: "ada@example.com" } });
 * console.assert(await sent.promise === "ada@example.com");
 * await controller.close();
 * producer.close();
 * kv.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 *
 * @module
 */

import {
  closeSync,
  existsSync,
  fsyncSync,
  openSync,
  readFileSync,
  truncateSync,
  writeSync,
} from "node:fs";
import type {
  Accepted,
  Produced,
  ProducerEndpoint,
  ProducerPort,
  RequestNext,
  Stored,
} from "../mod.ts";

/**
 * One line of the source file.
 *
 * @example A job as it is written to the source
 * ```ts
 * import type { FileJob } from "./durable_file_producer.ts";
 *
 * const job: FileJob<{ to: string }> = { messageId: "mail-1", payload: { to: "ada@example.com" } };
 * console.assert(JSON.stringify(job) === '{"messageId":"mail-1","payload":{"to":"ada@example.com"}}');
 * ```
 */
export interface FileJob<T = unknown> {
  /** The stable deduplication key: unique within the source. */
  readonly messageId: string;
  /** The job's payload (any JSON value). */
  readonly payload: T;
}

/**
 * Options of {@linkcode DurableFileProducer}.
 *
 * @example Both files in one data directory
 * ```ts
 * import type { DurableFileProducerOptions } from "./durable_file_producer.ts";
 *
 * const options: DurableFileProducerOptions = {
 *   source: "/var/lib/mailer/jobs.jsonl",
 *   marks: "/var/lib/mailer/jobs.marks.jsonl",
 *   maxBatch: 200,
 * };
 * console.assert(options.maxBatch === 200);
 * ```
 */
export interface DurableFileProducerOptions {
  /** The source file (JSON lines of {@linkcode FileJob}); created when missing. */
  readonly source: string;
  /** The marks file (JSON strings, one a line: accepted MessageIDs); created when missing. */
  readonly marks: string;
  /** Most jobs per `Produced` (each grant caps it further). Default 100. */
  readonly maxBatch?: number;
}

/** A batch handed to the controller under one grant. */
interface Batch<T> {
  readonly session: string;
  readonly token: string;
  readonly jobs: readonly FileJob<T>[];
}

/**
 * A {@linkcode ProducerEndpoint} over a source file and a marks file. See the module
 * documentation for the recovery rule and why jobs are marked when accepted.
 *
 * @example Recover after a crash: unmarked jobs are offered again under their MessageIDs
 * ```ts
 * import { DurableFileProducer } from "./durable_file_producer.ts";
 *
 * const dir = await Deno.makeTempDir();
 * const files = { source: `${dir}/source.jsonl`, marks: `${dir}/marks.jsonl` };
 * await Deno.writeTextFile(files.source, '{"messageId":"a","payload":1}\n{"messageId":"b","payload":2}\n');
 * await Deno.writeTextFile(files.marks, '"a"\n');
 * const producer = new DurableFileProducer(files);
 * console.assert(producer.recovered.join() === "b" && producer.unaccepted === 1);
 * producer.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export class DurableFileProducer<T = unknown> implements ProducerEndpoint {
  /** The MessageIDs found unmarked at start, in source order: they are offered first. */
  readonly recovered: readonly string[];
  readonly #maxBatch: number;
  readonly #sourceFd: number;
  readonly #marksFd: number;
  /** Every MessageID of the source. */
  readonly #known = new Set<string>();
  /** Jobs not yet handed to the controller in this session, in order, from `#head` on. */
  #pending: FileJob<T>[];
  #head = 0;
  /** MessageIDs of the source not marked yet. */
  readonly #unmarked: Set<string>;
  #port: ProducerPort | undefined;
  #session = "";
  /** A grant waiting for work. */
  #grant: RequestNext | undefined;
  /** The answer to the open grant, repeated verbatim if the grant is retried. */
  #answer: (Batch<T> & { readonly message: Produced }) | undefined;
  /** Stored and acknowledged, not yet reported accepted. */
  #stored: Batch<T> | undefined;
  #closed = false;

  /** Opens (or creates) both files and recovers the unmarked jobs. Throws on a malformed line. */
  constructor(options: DurableFileProducerOptions) {
    const maxBatch = options.maxBatch ?? 100;
    if (!Number.isSafeInteger(maxBatch) || maxBatch < 1) {
      throw new RangeError("Cannot create DurableFileProducer: maxBatch must be an integer >= 1");
    }
    this.#maxBatch = maxBatch;
    const marked = new Set(readLines(options.marks).map((line) => parseMark(line)));
    const jobs: FileJob<T>[] = [];
    for (const line of readLines(options.source)) {
      const job = parseJob<T>(line);
      if (this.#known.has(job.messageId)) continue; // the first line for a MessageID wins
      this.#known.add(job.messageId);
      if (!marked.has(job.messageId)) jobs.push(job);
    }
    this.#pending = jobs;
    this.#unmarked = new Set(jobs.map((job) => job.messageId));
    this.recovered = jobs.map((job) => job.messageId);
    this.#sourceFd = openSync(options.source, "a");
    this.#marksFd = openSync(options.marks, "a");
  }

  /** Jobs of the source the controller has not accepted yet. */
  get unaccepted(): number {
    return this.#unmarked.size;
  }

  /**
   * Append a job to the source durably, then offer it. When this returns, the job survives a
   * crash. Throws TypeError for a blank or repeated MessageID or a payload that is not JSON.
   */
  add(job: FileJob<T>): void {
    if (this.#closed) throw new Error("Cannot add: the producer is closed");
    const { messageId } = job;
    if (typeof messageId !== "string" || messageId.trim() === "") {
      throw new TypeError("Cannot add: messageId must be a non-blank string");
    }
    if (this.#known.has(messageId)) {
      throw new TypeError(`Cannot add ${messageId}: the source already has this MessageID`);
    }
    const payload = JSON.stringify(job.payload); // throws TypeError for a cycle or a BigInt
    if (payload === undefined) {
      throw new TypeError(`Cannot add ${messageId}: the payload is not a JSON value`);
    }
    appendDurably(
      this.#sourceFd,
      `{"messageId":${JSON.stringify(messageId)},"payload":${payload}}\n`,
    );
    this.#known.add(messageId);
    // Offer what a restart would read back, so both runs hand the controller the same payload.
    this.#pending.push({ messageId, payload: JSON.parse(payload) });
    this.#unmarked.add(messageId);
    this.#offer();
  }

  /** Close both files; the producer answers nothing afterwards. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    closeSync(this.#sourceFd);
    closeSync(this.#marksFd);
  }

  /** Called by the controller. */
  attach(port: ProducerPort): void {
    this.#port = port;
  }

  /** Called by the controller with a grant (new, or retried with the same token). */
  onRequestNext(request: RequestNext): void {
    if (this.#closed) return;
    const answer = this.#answer;
    if (answer?.session === request.session && answer.token === request.token) {
      this.#port!.produced(answer.message); // a retried grant gets the identical answer
      return;
    }
    if (request.session !== this.#session) {
      // A new controller incarnation: whatever the old one did not accept is offered again,
      // first, under the same MessageIDs.
      const unfinished = [...this.#stored?.jobs ?? [], ...answer?.jobs ?? []];
      this.#pending = [...unfinished, ...this.#pending.slice(this.#head)];
      this.#head = 0;
      this.#stored = undefined;
    } else if (this.#stored) {
      // A new grant of the same session comes only after the previous batch was accepted.
      this.#mark(this.#stored);
    }
    this.#session = request.session;
    this.#answer = undefined;
    this.#grant = request;
    this.#offer();
  }

  /** Called by the controller when a batch is stored (and again until acknowledged). */
  onStored(stored: Stored): void {
    if (this.#closed) return;
    const answer = this.#answer;
    if (answer?.session === stored.session && answer.token === stored.token) {
      this.#stored = answer;
      this.#answer = undefined;
    }
    // Nothing to mark yet: the jobs stay in the source, unmarked, until they are accepted.
    this.#port!.storedAck({ session: stored.session, token: stored.token });
  }

  /** Called by the controller when a stored batch entered its pool (and its durable queue). */
  onAccepted(accepted: Accepted): void {
    const stored = this.#stored;
    if (this.#closed || stored?.session !== accepted.session || stored.token !== accepted.token) {
      return;
    }
    this.#mark(stored);
  }

  /** Durably mark a batch as accepted (a job offered again after a restart is marked once). */
  #mark(batch: Batch<T>): void {
    this.#stored = undefined;
    const ids = batch.jobs.map((job) => job.messageId).filter((id) => this.#unmarked.has(id));
    if (ids.length === 0) return;
    appendDurably(this.#marksFd, ids.map((id) => JSON.stringify(id) + "\n").join(""));
    for (const id of ids) this.#unmarked.delete(id);
  }

  /** Answer the waiting grant with the next jobs, if there are any. */
  #offer(): void {
    const grant = this.#grant;
    if (!grant || this.#head === this.#pending.length || this.#closed) return;
    const count = Math.min(grant.maxJobs, this.#maxBatch);
    const jobs = this.#pending.slice(this.#head, this.#head + count);
    this.#head += jobs.length;
    if (this.#head > 1024 && this.#head * 2 > this.#pending.length) {
      this.#pending = this.#pending.slice(this.#head);
      this.#head = 0;
    }
    const message: Produced = {
      session: grant.session,
      token: grant.token,
      jobs: jobs.map(({ messageId, payload }) => ({ messageId, payload })),
    };
    this.#grant = undefined;
    this.#answer = { session: grant.session, token: grant.token, jobs, message };
    this.#port!.produced(message);
  }
}

/** The complete lines of a file (none when it does not exist); a torn last line is cut off. */
function readLines(path: string): string[] {
  if (!existsSync(path)) return [];
  const text = readFileSync(path, "utf8");
  const end = text.lastIndexOf("\n") + 1;
  if (end < text.length) truncateSync(path, new TextEncoder().encode(text.slice(0, end)).length);
  return text.slice(0, end).split("\n").filter((line) => line.trim() !== "");
}

function parseJob<T>(line: string): FileJob<T> {
  const job = JSON.parse(line);
  if (typeof job?.messageId !== "string" || job.messageId.trim() === "" || !("payload" in job)) {
    throw new TypeError(`Cannot read the source: not a job line: ${line.slice(0, 100)}`);
  }
  return { messageId: job.messageId, payload: job.payload };
}

function parseMark(line: string): string {
  const id = JSON.parse(line);
  if (typeof id !== "string") {
    throw new TypeError(`Cannot read the marks: not a MessageID line: ${line.slice(0, 100)}`);
  }
  return id;
}

/** One write, then fsync: the text is on disk when this returns. */
function appendDurably(fd: number, text: string): void {
  const bytes = new TextEncoder().encode(text);
  let written = 0;
  while (written < bytes.length) written += writeSync(fd, bytes, written);
  fsyncSync(fd);
}

// Run directly (on Deno: `deno run -A --unstable-kv examples/durable_file_producer.ts`): jobs
// from a source file through a controller on a Deno KV file to one worker, then what the marks
// file holds.
if (import.meta.main) {
  const { connectInProcess, WorkerEndpoint, WorkPullingController } = await import("../mod.ts");
  const { DenoKvWorkQueue } = await import("../deno_kv.ts");
  const dir = await Deno.makeTempDir();
  const kv = await Deno.openKv(`${dir}/queue.kv`);
  const files = { source: `${dir}/source.jsonl`, marks: `${dir}/marks.jsonl` };
  const producer = new DurableFileProducer<{ to: string }>(files);
  const controller = new WorkPullingController({
    name: "mail",
    producer,
    queue: new DenoKvWorkQueue(kv, { prefix: ["workpull", "mail"] }),
    deliveryConfirmation: true,
  });
  await controller.start();
  const recipients = ["ada@example.com", "grace@example.com"];
  const done = Promise.withResolvers<void>();
  let sent = 0;
  connectInProcess(
    controller,
    new WorkerEndpoint<{ to: string }>({
      producer: "mail",
      name: "w1",
      handler: ({ payload, messageId }) => {
        console.log(`sending ${messageId} to ${payload.to}`);
        if (++sent === recipients.length) done.resolve();
      },
    }),
  );
  recipients.forEach((to, n) => producer.add({ messageId: `mail-${n + 1}`, payload: { to } }));
  await done.promise;
  console.log(`marked as accepted: ${readLines(files.marks).join(", ")}`);
  await controller.close();
  producer.close();
  kv.close();
  await Deno.remove(dir, { recursive: true });
}
