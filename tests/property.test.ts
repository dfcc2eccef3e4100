/**
 * Seeded random interleavings of submissions (one by one and in batches), worker joins, crashes,
 * restarts, graceful leaves and slowdowns, checking the invariants of work pulling after every step:
 * - a job is never outstanding (delivered, unconfirmed) at two live links at once;
 * - each worker's handler sees its sub-flow in sequence order;
 * - in the end every submitted job is confirmed at least once.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  type BoundEvent,
  BufferedProducer,
  decodeControllerFrame,
  decodeWorkerFrame,
  type Link,
  type LinkReceiver,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { quiesce } from "./support/harness.ts";
import { prng } from "./support/waiting.ts";

/** A link pair that records what is outstanding on it, by sequence. */
class ObservedLink {
  closed = false;
  /** seq -> MessageID, delivered and not yet confirmed on this link. */
  readonly outstanding = new Map<number, string>();
  #receivers: { controller?: LinkReceiver; worker?: LinkReceiver } = {};

  constructor(
    controller: WorkPullingController,
    worker: WorkerEndpoint<unknown>,
    readonly onDeliver: (link: ObservedLink, messageId: string) => void,
  ) {
    const close = (code = 1000, reason = "") => {
      if (this.closed) return;
      this.closed = true;
      this.outstanding.clear();
      queueMicrotask(() => {
        this.#receivers.controller?.closed(code, reason);
        this.#receivers.worker?.closed(code, reason);
      });
    };
    const toWorker: Link = {
      send: (frame) => {
        if (this.closed) return;
        const decoded = decodeControllerFrame(frame);
        if (decoded.ok && decoded.frame.type === "registered") this.outstanding.clear(); // a new sub-flow may start
        if (decoded.ok && decoded.frame.type === "jobs") {
          const { seq, jobs } = decoded.frame;
          jobs.forEach((job, i) => {
            if (!this.outstanding.has(seq + i)) this.onDeliver(this, job.id);
            this.outstanding.set(seq + i, job.id);
          });
        }
        queueMicrotask(() => !this.closed && this.#receivers.worker?.receive(frame));
      },
      close,
    };
    const toController: Link = {
      send: (frame) => {
        if (this.closed) return;
        const decoded = decodeWorkerFrame(frame);
        if (decoded.ok && decoded.frame.type !== "register") {
          const frame = decoded.frame;
          // done and fail (job queues only) confirm through their seq; progress confirms nothing.
          const confirmed = "confirmed" in frame
            ? frame.confirmed
            : frame.type === "progress"
            ? 0
            : frame.seq;
          for (const seq of this.outstanding.keys()) {
            if (seq <= confirmed) this.outstanding.delete(seq);
            // A draining worker handed back everything after `upTo` and will not run it.
            if (frame.type === "release" && seq > frame.upTo) this.outstanding.delete(seq);
          }
        }
        queueMicrotask(() => !this.closed && this.#receivers.controller?.receive(frame));
      },
      close,
    };
    this.#receivers.controller = controller.attach(toWorker);
    this.#receivers.worker = worker.attach(toController);
    this.close = () => close(1006, "crash");
  }

  close: () => void;
}

for (const seed of [1, 2, 3]) {
  test(`random interleavings keep the work-pulling invariants (seed ${seed})`, async () => {
    const random = prng(seed);
    const pick = <T>(items: readonly T[]) => items[Math.floor(random() * items.length)];
    const clock = new SimulatedClock();
    const producer = new BufferedProducer<number>();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      clock,
      deliveryConfirmation: true,
      dedupeWindow: 0, // every redelivery really runs, to exercise the invariants harder
    });
    await controller.start();

    const links = new Set<ObservedLink>();
    const confirmed = new Set<string>();
    const submitted: string[] = [];
    const violations: string[] = [];
    const onDeliver = (link: ObservedLink, messageId: string) => {
      for (const other of links) {
        if (
          other !== link && !other.closed && [...other.outstanding.values()].includes(messageId)
        ) {
          violations.push(`${messageId} outstanding at two live links`);
        }
      }
    };

    interface Live {
      worker: WorkerEndpoint<number>;
      link: ObservedLink;
      delay: number;
    }
    const live = new Map<string, Live>();
    let incarnation = 0;
    const start = (name: string) => {
      const entry = { delay: Math.floor(random() * 50) } as Live;
      let lastSeq = 0;
      const worker = new WorkerEndpoint<number>({
        producer: "jobs",
        name,
        clock,
        window: 1 + Math.floor(random() * 8),
        resendInterval: 200,
        incarnation: `${name}-${++incarnation}`,
        handler: (delivery) => {
          if (delivery.seq <= lastSeq) {
            violations.push(`${name} saw seq ${delivery.seq} after ${lastSeq}`);
          }
          lastSeq = delivery.seq;
          return new Promise<void>((resolve) => clock.setTimeout(resolve, entry.delay));
        },
      });
      worker.addEventListener("bound", (_: BoundEvent) => (lastSeq = 0));
      entry.worker = worker;
      entry.link = new ObservedLink(controller, worker as WorkerEndpoint<unknown>, onDeliver);
      links.add(entry.link);
      live.set(name, entry);
    };
    const names = ["a", "b", "c", "d", "e"];

    for (let step = 0; step < 3000; step++) {
      const roll = random();
      if (roll < 0.3) {
        const count = 1 + Math.floor(random() * 4);
        if (random() < 0.5) {
          for (let i = 0; i < count; i++) {
            const id = `job-${submitted.length}`;
            submitted.push(id);
            producer.submit(submitted.length, { messageId: id }).then((receipt) =>
              receipt.confirmed!.then(() => confirmed.add(id))
            );
          }
        } else {
          // The same jobs as one batch: one promise, receipts in order.
          const ids = Array.from({ length: count }, (_, i) => `job-${submitted.length + i}`);
          const payloads = ids.map((_, i) => submitted.length + i + 1);
          submitted.push(...ids);
          producer.submitMany(payloads, { messageIds: ids }).then((receipts) => {
            receipts.forEach((receipt, i) => {
              if (receipt.messageId !== ids[i]) violations.push(`receipt ${i} of a batch`);
              receipt.confirmed!.then(() => confirmed.add(ids[i]));
            });
          });
        }
      } else if (roll < 0.4) {
        const name = pick(names);
        if (!live.has(name)) start(name);
      } else if (roll < 0.45 && live.size > 0) {
        const name = pick([...live.keys()]);
        live.get(name)!.link.close(); // a crash: the link drops, the handler may still run
        live.delete(name);
      } else if (roll < 0.48 && live.size > 0) {
        const name = pick([...live.keys()]);
        const old = live.get(name)!;
        live.delete(name);
        old.worker.close();
        start(name); // a restart: a new incarnation replaces the old binding
      } else if (roll < 0.55 && live.size > 0) {
        live.get(pick([...live.keys()]))!.delay = Math.floor(random() * 400); // slow down / speed up
      } else {
        await clock.advanceAsync(Math.floor(random() * 100));
      }
      await quiesce();
      assert.deepEqual(violations, [], `step ${step}`);
    }

    // Let everything finish with at least two healthy workers.
    for (const name of ["a", "b"]) if (!live.has(name)) start(name);
    for (const entry of live.values()) entry.delay = 1;
    for (let round = 0; round < 2000 && confirmed.size < submitted.length; round++) {
      await clock.advanceAsync(50);
      await quiesce();
    }
    assert.deepEqual(violations, []);
    const missing = submitted.filter((id) => !confirmed.has(id));
    assert.deepEqual(missing, [], `${missing.length} of ${submitted.length} jobs never confirmed`);
    assert.ok(submitted.length > 500, `${submitted.length} jobs`);
    await controller.close();
    for (const entry of live.values()) await entry.worker.close();
  });
}
