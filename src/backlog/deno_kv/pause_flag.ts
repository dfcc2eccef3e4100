/**
 * A flow's pause flag on Deno KV: one key, `[...prefix, "paused"]`, shared by the single-instance
 * store (`DenoKvJobStore`) and the shared flow (`DenoKvClusterStore`), so a pause survives a
 * restart and reaches every instance of the flow.
 *
 * The flag is the operator's word, not the store's state: it is written with a plain atomic set,
 * not fenced by an epoch, so any process of the flow may pause or resume it, and the last write
 * wins. Its value is JSON bytes (readable from every runtime, as the shared flow's values are):
 *
 * ```text
 * {"paused":true,"at":1764806400000}
 * ```
 *
 * An absent key means running. A value of another shape is a `QueueConflictError`, as every
 * malformed persisted value is. A read or write refused with `database is locked` (another
 * process of a shared flow holds the file) is tried again: until `signal` aborts, or without one
 * about 2 s.
 *
 * @module
 */

import type { KvKey, KvLike } from "../../queue/deno_kv/port.ts";
import { retryLocked } from "../../queue/deno_kv/retry_locked.ts";
import { malformed, parse } from "./records.ts";

const encoder = new TextEncoder();

/**
 * The pause flag of the flow under `prefix`.
 *
 * @example
 * ```ts
 * import { PauseFlag } from "./pause_flag.ts";
 * const kv = await Deno.openKv(":memory:");
 * const flag = new PauseFlag(kv, ["workpull", "emails"]);
 * console.assert((await flag.read()) === false);
 * await flag.write(true, Date.now());
 * console.assert((await flag.read()) === true);
 * kv.close();
 * ```
 */
export class PauseFlag {
  /** The flag's key. */
  readonly key: KvKey;
  readonly #kv: KvLike;

  /** The flag of the flow whose keys are under `prefix`. */
  constructor(kv: KvLike, prefix: KvKey) {
    this.#kv = kv;
    this.key = [...prefix, "paused"];
  }

  /** Whether the flow is paused. */
  async read(signal?: AbortSignal): Promise<boolean> {
    const [entry] = await retryLocked(() => this.#kv.getMany([this.key]), signal);
    if (entry.versionstamp === null) return false;
    const value = parse(entry.value, "the pause flag");
    if (typeof value.paused !== "boolean") throw malformed("the pause flag has no boolean paused");
    return value.paused;
  }

  /** Pause (true) or resume (false) the flow; `at` is when, epoch ms. Resolves once durable. */
  async write(paused: boolean, at: number, signal?: AbortSignal): Promise<void> {
    const value = encoder.encode(JSON.stringify({ paused, at }));
    const result = await retryLocked(() => this.#kv.atomic().set(this.key, value).commit(), signal);
    if (!result.ok) throw new Error("Cannot write the pause flag: the commit was refused");
  }
}
