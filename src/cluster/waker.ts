/**
 * How an idle instance of a shared flow learns that there is work, without listing the backlog
 * on a fixed poll.
 *
 * Every commit that puts a job in the ready index (an enqueue, a retry, a job coming back from a
 * lost instance) also adds one to the flow's wake counter (`[P, "wake"]`, a `KvU64` summed
 * blindly, so writers never conflict on it). An instance whose controller holds an open grant
 * that found nothing due arms its waker, which wakes it (the store's `ready`) when:
 *
 * 1. **the counter moves**, seen by
 *    - a `watch` of the counter, where the KV has `watch` (Deno KV, and Deno Deploy's hosted KV
 *      and KV Connect, whose watch sees every process's writes; a local file's watch sees only
 *      this process's, so the read below is still needed there), and
 *    - a read of the counter alone (one key), first 5 ms after the instance last found work,
 *      then twice as long after each read that saw no change, up to `maxPoll`: a busy flow is
 *      seen within milliseconds, an idle one costs `60,000 / maxPoll` reads a minute;
 * 2. **the earliest due time** its last listing saw passes (a delayed job, or a retry's backoff).
 *
 * The counter's last value seen is the baseline: a change since the read that woke the
 * instance, which then listed the backlog, means a job may have arrived after that listing. The
 * first arming has no baseline: it reads one and wakes once, to list.
 *
 * @module
 */

import type { Clock, TimerHandle } from "../core/clock.ts";
import type { KvEntryLike, KvKey } from "../queue/deno_kv/port.ts";

/** The first read after work was found, ms. */
export const MIN_POLL = 5;

/** The KV calls a waker uses: `getMany`, and `watch` where the KV has it. */
export interface WakeKv {
  /** Reads keys consistently. */
  getMany(keys: readonly KvKey[]): Promise<readonly KvEntryLike[]>;
  /** Streams the keys' entries each time one changes (Deno KV). */
  watch?(keys: readonly KvKey[]): ReadableStream<readonly KvEntryLike[]>;
}

/** What a waker needs. */
export interface WakerOptions {
  readonly kv: WakeKv;
  /** The wake counter. */
  readonly key: KvKey;
  readonly clock: Clock;
  /** The longest wait between two reads of the counter, ms. */
  readonly maxPoll: number;
  /** Whether to watch the counter too (where the KV has `watch`). */
  readonly watch: boolean;
  /** There may be work: the owner's controller asks again. */
  readonly wake: () => void;
}

/** Wakes an idle instance when the flow's wake counter moves or a due time passes. */
export class Waker {
  readonly #o: WakerOptions;
  /** The counter's value last seen (undefined: none yet). */
  #seen: bigint | undefined;
  #armed = false;
  #interval = MIN_POLL;
  #pollTimer: TimerHandle | undefined;
  #dueTimer: TimerHandle | undefined;
  #dueAt = Infinity;
  #reading = false;
  #watching: ReadableStreamDefaultReader<readonly KvEntryLike[]> | undefined;
  #closed = false;
  /** Reads of the counter so far (a figure for the docs and the benchmark). */
  reads = 0;

  constructor(options: WakerOptions) {
    this.#o = options;
  }

  /** An open grant found nothing due: wake on the next change, or at `dueAt` (epoch ms). */
  arm(dueAt: number): void {
    if (this.#closed) return;
    this.#startWatch();
    if (dueAt < this.#dueAt) {
      this.#dueTimer?.cancel();
      this.#dueAt = dueAt;
      if (dueAt !== Infinity) {
        this.#dueTimer = this.#o.clock.setTimeout(
          () => this.#fire(),
          Math.max(0, dueAt - this.#o.clock.now()),
        );
      }
    }
    if (this.#armed) return;
    this.#armed = true;
    if (this.#seen === undefined) return void this.#read();
    this.#schedule();
  }

  /** The instance found work: stop waiting; the next arming starts polling fast again. */
  found(): void {
    this.disarm();
    this.#interval = MIN_POLL;
  }

  /** Stop reading and watching. */
  close(): void {
    this.#closed = true;
    this.disarm();
    this.#watching?.cancel().catch(() => {});
    this.#watching = undefined;
  }

  #schedule(): void {
    if (!this.#armed || this.#pollTimer || this.#closed) return;
    this.#pollTimer = this.#o.clock.setTimeout(() => {
      this.#pollTimer = undefined;
      this.#interval = Math.min(this.#o.maxPoll, this.#interval * 2);
      this.#read();
    }, this.#interval);
  }

  async #read(): Promise<void> {
    if (this.#reading) return;
    this.#reading = true;
    let value: bigint | undefined;
    try {
      this.reads += 1;
      const [entry] = await this.#o.kv.getMany([this.#o.key]);
      value = counterOf(entry);
    } catch {
      // A busy or unreachable KV: read again on the next tick.
    } finally {
      this.#reading = false;
    }
    if (value !== undefined) this.#saw(value);
    this.#schedule();
  }

  /** A value of the counter, read or watched. */
  #saw(value: bigint): void {
    const moved = this.#seen === undefined || value !== this.#seen;
    this.#seen = value;
    if (moved && this.#armed) {
      this.#interval = MIN_POLL;
      this.#fire();
    }
  }

  #fire(): void {
    if (!this.#armed || this.#closed) return;
    this.disarm();
    this.#o.wake();
  }

  /** Stop waiting (the owner stopped: fenced, leaving); `arm` starts again. */
  disarm(): void {
    this.#armed = false;
    this.#pollTimer?.cancel();
    this.#pollTimer = undefined;
    this.#dueTimer?.cancel();
    this.#dueTimer = undefined;
    this.#dueAt = Infinity;
  }

  /** Watch the counter once, for as long as the waker lives, where the KV can. */
  #startWatch(): void {
    const kv = this.#o.kv;
    if (!this.#o.watch || this.#watching || typeof kv.watch !== "function") return;
    let reader: ReadableStreamDefaultReader<readonly KvEntryLike[]>;
    try {
      reader = kv.watch([this.#o.key]).getReader();
    } catch {
      return; // a KV without a working watch: the reads do it
    }
    this.#watching = reader;
    (async () => {
      while (!this.#closed) {
        const { done, value } = await reader.read();
        if (done) break;
        const read = value?.[0] && counterOf(value[0]);
        if (read !== undefined) this.#saw(read);
      }
    })().catch(() => {
      // The watch ended (the KV closed, or a backend that cannot watch): the reads go on.
    });
  }
}

/** The counter's value in an entry (0 when absent), or undefined when it is not a counter. */
function counterOf(entry: KvEntryLike | undefined): bigint | undefined {
  if (!entry || entry.versionstamp === null) return 0n;
  const raw = (entry.value as { value?: unknown } | null)?.value;
  return typeof raw === "bigint" ? raw : undefined;
}
