/**
 * A `DurableWorkQueue` over the memory reference with injectable faults and a call log, for
 * testing the controller's durable lane.
 */

import {
  type DurableWorkQueue,
  type LoadResult,
  MemoryWorkQueue,
  type QueueBatch,
  type QueueBatchLimits,
  type QueueBatchResult,
  type QueueCallOptions,
  type QueueEpoch,
  type StoreRequest,
  type StoreResult,
} from "../../mod.ts";

type Operation = "load" | "store" | "accept" | "confirmMessage" | "commit";

/** A fault: throw `error` (or hang until aborted) on the next `times` calls of `operation`. */
interface Fault {
  readonly operation: Operation;
  readonly error?: unknown;
  readonly hang?: boolean;
  times: number;
}

export class FaultyQueue implements DurableWorkQueue {
  readonly inner: MemoryWorkQueue;
  readonly calls: string[] = [];
  readonly #faults: Fault[] = [];
  readonly batchLimits?: QueueBatchLimits;
  readonly commit?: DurableWorkQueue["commit"];

  constructor(
    options: { batching?: boolean; limits?: QueueBatchLimits; inner?: MemoryWorkQueue } = {},
  ) {
    this.inner = options.inner ?? new MemoryWorkQueue();
    if (options.batching !== false) {
      this.batchLimits = options.limits ?? this.inner.batchLimits;
      this.commit = (epoch: QueueEpoch, batch: QueueBatch, call?: QueueCallOptions) =>
        this.#run(
          "commit",
          `commit(${batch.store?.jobs.map((j) => j.messageId) ?? ""}|${batch.accept ?? ""}|${
            batch.confirm ?? ""
          })`,
          call,
          () => this.inner.commit(epoch, batch, call),
        ) as Promise<QueueBatchResult>;
    }
  }

  /** Make the next `times` calls of `operation` fail with `error`. */
  fail(operation: Operation, error: unknown, times = 1): void {
    this.#faults.push({ operation, error, times });
  }

  /** Make the next `times` calls of `operation` hang until their signal aborts. */
  hang(operation: Operation, times = 1): void {
    this.#faults.push({ operation, hang: true, times });
  }

  load(call?: QueueCallOptions): Promise<LoadResult> {
    return this.#run("load", "load", call, () => this.inner.load(call)) as Promise<LoadResult>;
  }

  store(epoch: QueueEpoch, request: StoreRequest, call?: QueueCallOptions): Promise<StoreResult> {
    return this.#run(
      "store",
      `store(${request.messageId})`,
      call,
      () => this.inner.store(epoch, request, call),
    ) as Promise<
      StoreResult
    >;
  }

  accept(epoch: QueueEpoch, messageId: string, call?: QueueCallOptions): Promise<void> {
    return this.#run(
      "accept",
      `accept(${messageId})`,
      call,
      () => this.inner.accept(epoch, messageId, call),
    ) as Promise<
      void
    >;
  }

  confirmMessage(epoch: QueueEpoch, messageId: string, call?: QueueCallOptions): Promise<void> {
    return this.#run(
      "confirmMessage",
      `confirm(${messageId})`,
      call,
      () => this.inner.confirmMessage(epoch, messageId, call),
    ) as Promise<void>;
  }

  #run(
    operation: Operation,
    label: string,
    call: QueueCallOptions | undefined,
    body: () => Promise<unknown>,
  ) {
    this.calls.push(label);
    const fault = this.#faults.find((f) => f.operation === operation && f.times > 0);
    if (fault) {
      fault.times -= 1;
      if (fault.hang) {
        return new Promise((_, reject) => {
          call?.signal?.addEventListener("abort", () => reject(call.signal!.reason), {
            once: true,
          });
        });
      }
      return Promise.reject(fault.error);
    }
    return body();
  }
}
