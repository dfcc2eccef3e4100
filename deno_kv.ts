/**
 * workpull on Deno KV: `DenoKvJobStore`, the job store of a `JobQueue` (backlog, job states,
 * retries and dead letters survive a crash); `DenoKvClusterStore`, its shared mode, for a flow
 * served by several processes on one KV (leases, takeover of a dead instance's jobs); and
 * `DenoKvWorkQueue`, the durable work queue of a plain `WorkPullingController` (every accepted
 * job survives a controller crash). All take any `Deno.Kv`-shaped handle: `Deno.openKv(path)` on
 * Deno, or `openKv(path)` from npm `@deno/kv` on Node and Bun.
 *
 * @example A controller whose jobs survive a crash
 * ```ts
 * import { BufferedProducer, WorkPullingController } from "./mod.ts";
 * import { DenoKvWorkQueue } from "./deno_kv.ts";
 *
 * const kv = await Deno.openKv(":memory:");
 * const controller = new WorkPullingController({
 *   name: "jobs",
 *   producer: new BufferedProducer(),
 *   queue: new DenoKvWorkQueue(kv, { prefix: ["workpull", "jobs"] }),
 * });
 * await controller.start();
 * await controller.close();
 * kv.close();
 * ```
 *
 * @module
 */

export {
  DenoKvWorkQueue,
  type DenoKvWorkQueueOptions,
  type KvAtomicLike,
  type KvCheckLike,
  type KvEntryLike,
  type KvKey,
  type KvKeyPart,
  type KvLike,
} from "./src/queue/deno_kv/queue.ts";
export { DenoKvJobStore, type DenoKvJobStoreOptions } from "./src/backlog/deno_kv/job_store.ts";
export {
  type ClusterAtomicLike,
  type ClusterKvLike,
  type ClusterListSelector,
  type ClusterStoreEventMap,
  DenoKvClusterStore,
  type DenoKvClusterStoreOptions,
  FencedEvent,
  type InstanceOptions,
  type Takeover,
  TakeoverEvent,
} from "./src/cluster/cluster_store.ts";
export type { InstanceInfo } from "./src/backlog/job_store.ts";
export * from "./src/queue/work_queue.ts";

/**
 * Value codecs for npm `@deno/kv`'s `openKv` on Bun and Node. The queue stores `Uint8Array`
 * values only, which need no V8 serializer; Bun has none `@deno/kv` can use (its `serialize` is
 * JavaScriptCore's format), so without codecs `openKv` refuses to start there. These refuse to
 * encode anything else and decode a foreign value to an opaque object, which the adapter reports
 * as malformed state.
 *
 * @example On Bun or Node
 * ```ts ignore
 * import { openKv } from "@deno/kv";
 * import { bytesOnlyKvCodecs, DenoKvWorkQueue } from "./deno_kv.ts";
 *
 * const kv = await openKv("./jobs.kv", bytesOnlyKvCodecs);
 * const queue = new DenoKvWorkQueue(kv);
 * ```
 */
export const bytesOnlyKvCodecs: {
  encodeV8(value: unknown): Uint8Array;
  decodeV8(bytes: Uint8Array): unknown;
} = {
  encodeV8() {
    throw new TypeError("the workpull queue stores Uint8Array values only");
  },
  decodeV8(bytes: Uint8Array) {
    return { foreignV8Value: bytes };
  },
};
