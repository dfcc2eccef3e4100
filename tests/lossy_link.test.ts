/**
 * No state may be a stall without a timer: over links that lose frames in both directions (any
 * frame, with a seeded probability), every job still completes. The shipped links are lossless;
 * this checks that the protocol's timers (re-registration, gap and idle resends, silence) heal
 * every loss, including the loss of a binding's last jobs frame.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  type Link,
  type LinkReceiver,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { quiesce } from "./support/harness.ts";
import { prng } from "./support/waiting.ts";

/** Connect `worker` to `controller` over a link that drops each frame with probability `loss`. */
function connectLossy(
  controller: WorkPullingController,
  worker: WorkerEndpoint<number>,
  random: () => number,
  loss: number,
  onClosed: () => void,
): void {
  let closed = false;
  const receivers: { controller?: LinkReceiver; worker?: LinkReceiver } = {};
  const close = () => {
    if (closed) return;
    closed = true;
    queueMicrotask(() => {
      receivers.controller?.closed(1006, "lost");
      receivers.worker?.closed(1006, "lost");
      onClosed();
    });
  };
  const lossy = (target: () => LinkReceiver | undefined): Link => ({
    send(frame) {
      if (closed || random() < loss) return;
      queueMicrotask(() => !closed && target()?.receive(frame));
    },
    close,
  });
  receivers.controller = controller.attach(lossy(() => receivers.worker));
  receivers.worker = worker.attach(lossy(() => receivers.controller));
}

for (const seed of [1, 2, 3, 4, 5, 6, 7, 8]) {
  test(`every job completes over links that lose frames (seed ${seed})`, async () => {
    const random = prng(seed);
    const clock = new SimulatedClock();
    const producer = new BufferedProducer<number>();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      clock,
      deliveryConfirmation: true,
    });
    await controller.start();
    const workers = ["a", "b", "c"].map((name) =>
      new WorkerEndpoint<number>({
        producer: "jobs",
        name,
        clock,
        window: 1 + Math.floor(random() * 6),
        resendInterval: 100,
        silenceIntervals: 5,
        handler: () => new Promise<void>((resolve) => clock.setTimeout(resolve, random() * 20)),
      })
    );
    // A lost link is replaced after a short pause, as the WebSocket client reconnects.
    const connect = (worker: WorkerEndpoint<number>) =>
      connectLossy(controller, worker, random, 0.15, () => {
        clock.setTimeout(() => connect(worker), 50);
      });
    for (const worker of workers) connect(worker);

    const confirmed = new Set<string>();
    const total = 150;
    for (let n = 0; n < total; n++) {
      producer.submit(n, { messageId: `job-${n}` }).then((receipt) =>
        receipt.confirmed!.then(() => confirmed.add(`job-${n}`))
      );
    }
    for (let step = 0; step < 3000 && confirmed.size < total; step++) {
      await clock.advanceAsync(10);
      if (step % 10 === 0) await quiesce();
    }
    const missing = Array.from({ length: total }, (_, n) => `job-${n}`)
      .filter((id) => !confirmed.has(id));
    assert.deepEqual(missing, [], `${missing.length} of ${total} jobs never confirmed`);
    await controller.close();
    for (const worker of workers) await worker.close();
  });
}
