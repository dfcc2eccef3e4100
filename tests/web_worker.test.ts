/**
 * Web Workers join the pool without sockets: the controller in the main thread, each worker
 * endpoint in its own Web Worker, connected by a transferred MessagePort (`attachPort`).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  attachPort,
  BufferedProducer,
  type WorkerBoundEvent,
  WorkPullingController,
} from "../mod.ts";

test("Web Workers connected by MessagePorts share a job stream", { timeout: 90_000 }, async () => {
  const producer = new BufferedProducer<{ n: number }>();
  const controller = new WorkPullingController({
    name: "jobs",
    producer,
    deliveryConfirmation: true,
  });
  await controller.start();
  const bound: string[] = [];
  let bothBound!: () => void;
  const ready = new Promise<void>((resolve) => (bothBound = resolve));
  controller.addEventListener("worker-bound", (e: WorkerBoundEvent) => {
    if (bound.push(e.worker) === 2) bothBound();
  });
  const threads: Worker[] = [];
  const ports: { close(): void }[] = [];
  try {
    for (const name of ["thread-1", "thread-2"]) {
      const thread = new Worker(new URL("./fixtures/web_worker.ts", import.meta.url).href, {
        type: "module",
      });
      threads.push(thread);
      // Connect once the thread runs: the controller closes a link silent for 8 s as it would a
      // dead socket, and a thread can take that long to start (type-checked on a cold cache).
      thread.addEventListener("message", () => {
        const { port1, port2 } = new MessageChannel();
        ports.push(attachPort(controller, port1));
        thread.postMessage({ port: port2, name }, [port2]);
      }, { once: true });
    }
    await ready; // each thread loads its module at its own pace
    const receipts = await Promise.all(
      Array.from({ length: 300 }, (_, n) => producer.submit({ n })),
    );
    await Promise.all(receipts.map((receipt) => receipt.confirmed));
    assert.deepEqual(bound.sort(), ["thread-1", "thread-2"]);
    const perWorker = controller.stats().workers.map((w) => w.confirmed);
    assert.equal(perWorker.reduce((a, b) => a + b, 0), 300);
    assert.ok(perWorker.every((count) => count > 0), `both threads worked: ${perWorker}`);
  } finally {
    for (const port of ports) port.close();
    for (const thread of threads) thread.terminate();
    await controller.close();
  }
});
