/**
 * The Deno KV job store: a flow's backlog, job states and work queue on Deno KV (a local SQLite
 * file, Deno Deploy, or a denokv server; npm `@deno/kv` on Node and Bun). Every accepted
 * submission and every state change is durable before the call resolves, so a process killed at
 * any point loses no job: at the next start the store reads everything back, tries in progress
 * are reloaded into the controller (and run again: at-least-once), and the backlog is as it was.
 *
 * The store keeps an index of the flow in memory (records, the backlog order, payloads of jobs
 * not yet finished) and writes through to KV (`journal.ts`): one process owns a prefix at a time,
 * fenced by an epoch. Memory grows with the backlog: `maxBacklog` bounds it.
 *
 * @module
 */

import { JobStoreEngine, type JobStoreEngineOptions } from "../job_store_engine.ts";
import { resolveStoreSettings } from "../store_settings.ts";
import type { KvKey, KvLike } from "../../queue/deno_kv/port.ts";
import type { QueueCallOptions } from "../../queue/work_queue.ts";
import { KvQueueLayout } from "../../queue/deno_kv/layout.ts";
import { DenoKvJournal } from "./journal.ts";
import { PauseFlag } from "./pause_flag.ts";

/** Options of {@linkcode DenoKvJobStore}. */
export interface DenoKvJobStoreOptions extends JobStoreEngineOptions {
  /** The key prefix of this flow's store; nothing else may write under it. Default `["workpull"]`. */
  readonly prefix?: KvKey;
}

const OWNER = "DenoKvJobStore";

/**
 * A job store on Deno KV. The KV handle stays the caller's to close.
 *
 * @example A job queue whose jobs survive a crash
 * ```ts
 * import { DenoKvJobStore } from "./job_store.ts";
 * import { JobQueue } from "../job_queue.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const queue = new JobQueue({
 *   name: "emails",
 *   store: new DenoKvJobStore(kv, { prefix: ["workpull", "emails"], maxBacklog: 1_000_000 }),
 * });
 * await queue.start();
 * const receipt = await queue.add({ to: "ada@example.com" }, { messageId: "welcome-ada" });
 * console.assert(receipt.job.state === "waiting"); // durable: it survives a crash from here on
 * await queue.close();
 * kv.close();
 * ```
 */
export class DenoKvJobStore extends JobStoreEngine {
  readonly #pauseFlag: PauseFlag;

  /** Wraps a KV handle; throws an error naming a bad option. */
  constructor(kv: KvLike, options: DenoKvJobStoreOptions = {}) {
    if (
      typeof kv !== "object" || kv === null || typeof kv.getMany !== "function" ||
      typeof kv.list !== "function" || typeof kv.atomic !== "function"
    ) {
      throw new TypeError(`Cannot create ${OWNER}: kv must be a Deno.Kv (getMany, list, atomic)`);
    }
    const prefix = new KvQueueLayout(options.prefix ?? ["workpull"]).prefix; // validates it
    const { retention } = resolveStoreSettings(OWNER, options);
    // A group commit of the controller's lane: one record write per job (a few hundred bytes,
    // up to the result's size); larger changes are split across commits by the journal.
    super(OWNER, new DenoKvJournal(kv, prefix, retention), options, {
      maxOperations: 500,
      maxBytes: 512 * 1024,
    });
    this.#pauseFlag = new PauseFlag(kv, prefix);
  }

  /** Whether the flow is paused (see `JobQueue.pause`); read from KV. */
  readPaused(options?: QueueCallOptions): Promise<boolean> {
    return this.#pauseFlag.read(options?.signal);
  }

  /** Persist a pause (true) or a resume (false) of the flow. */
  writePaused(paused: boolean): Promise<void> {
    return this.#pauseFlag.write(paused, this.clock.now());
  }
}
