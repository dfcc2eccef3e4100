/**
 * The Deno KV durable work queue: attach it to a `WorkPullingController` and every accepted job
 * survives a controller crash. It takes any `Deno.Kv`-shaped handle: `Deno.openKv(path)` on
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
} from "./src/queue/deno_kv_queue.ts";
export * from "./src/queue/work_queue.ts";
