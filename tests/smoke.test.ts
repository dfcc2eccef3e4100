import { test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  connectInProcess,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";

test("smoke: jobs flow through in-process workers", async () => {
  const clock = new SimulatedClock();
  const producer = new BufferedProducer<number>();
  const controller = new WorkPullingController({
    name: "jobs",
    producer,
    clock,
    deliveryConfirmation: true,
  });
  await controller.start();
  const seen: Record<string, number[]> = { w1: [], w2: [] };
  for (const name of ["w1", "w2"]) {
    connectInProcess(
      controller,
      new WorkerEndpoint<number>({
        producer: "jobs",
        name,
        clock,
        handler: (d) => void seen[name].push(d.payload),
      }),
    );
  }
  const receipts = await Promise.all([1, 2, 3, 4, 5, 6].map((n) => producer.submit(n)));
  await Promise.all(receipts.map((r) => r.confirmed));
  assert.equal(seen.w1.length + seen.w2.length, 6);
  console.log(seen, controller.stats());
  await controller.close();
});
