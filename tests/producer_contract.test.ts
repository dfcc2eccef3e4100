import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  connectInProcess,
  type ReliableDeliveryFailedEvent,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";
import { SimulatedClock } from "../testing.ts";
import { ManualProducer, quiesce, ScriptedWorker } from "./support/harness.ts";

function setup(deliveryConfirmation = false, dedupeWindow?: number) {
  const clock = new SimulatedClock();
  const producer = new ManualProducer();
  const controller = new WorkPullingController({
    name: "jobs",
    producer,
    clock,
    deliveryConfirmation,
    dedupeWindow,
  });
  const failures: ReliableDeliveryFailedEvent[] = [];
  controller.addEventListener(
    "delivery-failed",
    (e: ReliableDeliveryFailedEvent) => failures.push(e),
  );
  return { clock, producer, controller, failures, port: () => producer.port };
}

async function withDemand(setupResult: ReturnType<typeof setup>, upTo = 10) {
  await setupResult.controller.start();
  const worker = new ScriptedWorker(setupResult.controller, "w");
  worker.register();
  worker.request(0, upTo);
  return worker;
}

describe("producer handshake", () => {
  test("RequestNext is retransmitted with the same token until answered", async () => {
    const s = setup();
    await withDemand(s);
    assert.equal(s.producer.requests.length, 1);
    s.clock.advance(1500);
    assert.equal(s.producer.requests.length, 4);
    assert.equal(new Set(s.producer.requests.map((r) => r.token)).size, 1);
    await s.controller.close();
  });

  test("Stored is retransmitted until acknowledged; duplicate acks and Produced are harmless", async () => {
    const s = setup();
    const worker = await withDemand(s);
    const { session, token } = s.producer.lastRequest;
    s.port().produced({ session, token, messageId: "j1", payload: 1 });
    assert.equal(s.producer.stored.length, 1);
    assert.deepEqual(s.producer.stored[0].jobs, [{ messageId: "j1", seq: 1 }]);
    s.port().produced({ session, token, messageId: "j1", payload: 1 }); // exact duplicate
    s.clock.advance(1000);
    assert.equal(s.producer.stored.length, 3, "Stored retransmitted on ticks");
    s.port().storedAck({ session, token });
    s.port().storedAck({ session, token }); // duplicate during/after accept
    s.port().produced({ session, token, messageId: "j1", payload: 1 }); // late duplicate
    assert.deepEqual(worker.jobIds(), ["j1"]);
    assert.equal(s.failures.length, 0);
    assert.equal(s.controller.stats().totals.stored, 1);
    await s.controller.close();
  });

  test("a Produced from an earlier session is dropped", async () => {
    const s = setup();
    await withDemand(s);
    s.port().produced({
      session: "old",
      token: s.producer.lastRequest.token,
      messageId: "x",
      payload: 1,
    });
    assert.equal(s.producer.stored.length, 0);
    assert.equal(s.failures.length, 0);
    await s.controller.close();
  });

  for (
    const [name, violate] of [
      ["a Produced with a wrong token", (s: ReturnType<typeof setup>) => {
        const { session } = s.producer.lastRequest;
        s.port().produced({ session, token: "bogus", messageId: "j1", payload: 1 });
      }],
      ["a Produced with no grant open", (s: ReturnType<typeof setup>) => {
        const { session, token } = s.producer.lastRequest;
        s.port().produced({ session, token, messageId: "j1", payload: 1 });
        s.port().produced({ session, token, messageId: "j2", payload: 1 }); // changed MessageID
      }],
      ["a Produced with more jobs than granted", (s: ReturnType<typeof setup>) => {
        const { session, token } = s.producer.lastRequest;
        const jobs = Array.from({ length: 11 }, (_, i) => ({ messageId: `j${i}`, payload: i }));
        s.port().produced({ session, token, jobs });
      }],
      ["a Produced whose payload is not JSON", (s: ReturnType<typeof setup>) => {
        const { session, token } = s.producer.lastRequest;
        s.port().produced({ session, token, messageId: "j1", payload: 10n });
      }],
      ["a malformed Produced", (s: ReturnType<typeof setup>) => {
        s.port().produced({ nonsense: true } as never);
      }],
      ["an unexpected StoredAck", (s: ReturnType<typeof setup>) => {
        const { session, token } = s.producer.lastRequest;
        s.port().storedAck({ session, token });
      }],
    ] as const
  ) {
    test(`${name} is a terminal protocol failure, published exactly once`, async () => {
      const s = setup();
      const worker = await withDemand(s);
      violate(s);
      assert.equal(s.controller.state, "failed");
      assert.equal(s.failures.length, 1);
      assert.equal(s.failures[0].stage, "protocol");
      assert.equal(s.failures[0].role, "producer");
      assert.equal(s.failures[0].endpoint, "jobs");
      assert.ok(s.failures[0].timestamp instanceof Date);
      // Further violations and traffic in the stopped incarnation publish nothing more.
      violate(s);
      s.clock.advance(5000);
      worker.request(0, 20);
      assert.equal(s.failures.length, 1);
      // respawn starts a new incarnation that works again.
      await s.controller.respawn();
      assert.equal(s.controller.state, "running");
      await s.controller.close();
    });
  }

  test("a listener that throws cannot corrupt the controller", async () => {
    const s = setup();
    const originalError = console.error;
    console.error = () => {};
    try {
      s.controller.addEventListener("worker-bound", () => {
        throw new Error("listener bug");
      });
      s.controller.addEventListener("worker-bound", async () => {
        await Promise.resolve();
        throw new Error("async listener bug");
      });
      const worker = await withDemand(s);
      s.producer.produce([{ messageId: "j1", payload: 1 }]);
      assert.deepEqual(worker.jobIds(), ["j1"]);
      await quiesce();
    } finally {
      console.error = originalError;
    }
    await s.controller.close();
  });
});

describe("buffered producer", () => {
  test("a payload is a snapshot taken at submit: later changes to the object cannot reach the job", async () => {
    const clock = new SimulatedClock();
    const producer = new BufferedProducer<Record<string, unknown>>();
    const controller = new WorkPullingController({ name: "jobs", producer, clock });
    await controller.start();
    const order: Record<string, unknown> = { id: 7 };
    const submitted = producer.submit(order, { messageId: "order-7" }); // no worker yet: it waits
    order.id = 8;
    order.self = order; // no longer JSON at all
    const seen: unknown[] = [];
    connectInProcess(
      controller,
      new WorkerEndpoint<unknown>({
        producer: "jobs",
        name: "w",
        clock,
        handler: (d) => void seen.push(d.payload),
      }),
    );
    await submitted;
    await quiesce();
    assert.deepEqual(seen, [{ id: 7 }]);
    assert.equal(controller.state, "running");
    await controller.close();
  });
});

describe("buffered producer batching", () => {
  test("the submit() calls of one synchronous run share one Produced", async () => {
    const clock = new SimulatedClock();
    const producer = new BufferedProducer<number>();
    const answers: number[] = [];
    const attach = producer.attach.bind(producer);
    producer.attach = (port) =>
      attach(
        new Proxy(port, {
          get(target, key) {
            if (key === "produced") {
              return (message: Parameters<typeof port.produced>[0]) => {
                answers.push("jobs" in message ? message.jobs.length : 1);
                target.produced(message);
              };
            }
            const value = Reflect.get(target, key);
            return typeof value === "function" ? value.bind(target) : value;
          },
        }),
      );
    const controller = new WorkPullingController({ name: "jobs", producer, clock });
    await controller.start();
    const seen: number[] = [];
    connectInProcess(
      controller,
      new WorkerEndpoint<number>({
        producer: "jobs",
        name: "w",
        clock,
        handler: (d) => void seen.push(d.payload),
      }),
    );
    await quiesce(); // the worker's demand is open: a grant waits for an answer
    const receipts = [1, 2, 3, 4, 5].map((n) => producer.submit(n));
    await Promise.all(receipts);
    await quiesce();
    assert.deepEqual(answers, [5], "one answer for the five jobs of the run");
    assert.deepEqual(seen, [1, 2, 3, 4, 5]);
    await controller.close();
  });
});

describe("delivery confirmation", () => {
  test("DeliveryConfirmed carries the Stored sequence, also for a job confirmed after a requeue", async () => {
    const s = setup(true);
    await s.controller.start();
    const a = new ScriptedWorker(s.controller, "a");
    a.register();
    a.request(0, 3);
    s.producer.produce([1, 2, 3].map((n) => ({ messageId: `j${n}`, payload: n })));
    a.ack(1);
    a.disconnect(); // j2 and j3 requeue
    const b = new ScriptedWorker(s.controller, "b");
    b.register();
    b.request(0, 5);
    assert.deepEqual(b.jobs().map((j) => [j.seq, j.id]), [[1, "j2"], [2, "j3"]]);
    b.ack(2);
    assert.deepEqual(s.producer.confirmed.map((n) => [n.messageId, n.seq]), [["j1", 1], ["j2", 2], [
      "j3",
      3,
    ]]);
    await s.controller.close();
  });

  test("DeliveryConfirmed repeats when a job is dispatched and confirmed again", async () => {
    const s = setup(true, 0); // no dedupe window: a resubmitted completed job runs again
    await s.controller.start();
    const a = new ScriptedWorker(s.controller, "a");
    a.register();
    a.request(0, 5);
    s.producer.produce([{ messageId: "j1", payload: 1 }]);
    a.ack(1);
    s.producer.produce([{ messageId: "j1", payload: 1 }]);
    a.ack(2);
    assert.deepEqual(s.producer.confirmed.map((n) => [n.messageId, n.seq]), [["j1", 1], ["j1", 2]]);
    await s.controller.close();
  });

  test("within the dedupe window a resubmitted completed job keeps its sequence and is not run again", async () => {
    const s = setup(true);
    await s.controller.start();
    const a = new ScriptedWorker(s.controller, "a");
    a.register();
    a.request(0, 5);
    s.producer.produce([{ messageId: "j1", payload: 1 }]);
    a.ack(1);
    s.producer.produce([{ messageId: "j1", payload: 1 }, { messageId: "j2", payload: 2 }]);
    assert.deepEqual(s.producer.stored[1].jobs, [{ messageId: "j1", seq: 1 }, {
      messageId: "j2",
      seq: 2,
    }]);
    assert.deepEqual(a.jobIds(), ["j1", "j2"]);
    await s.controller.close();
  });

  test("with the buffered producer, a requeued job's confirmation resolves the receipt once", async () => {
    const clock = new SimulatedClock();
    const producer = new BufferedProducer<string>();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      clock,
      deliveryConfirmation: true,
    });
    await controller.start();
    let release: (() => void) | undefined;
    const stuck = new WorkerEndpoint<string>({
      producer: "jobs",
      name: "stuck",
      clock,
      handler: () => new Promise<void>((resolve) => (release = resolve)),
    });
    const stuckLink = connectInProcess(controller, stuck);
    await quiesce();
    const receipt = await producer.submit("job", { messageId: "m1" });
    await quiesce();
    assert.ok(release, "the stuck worker got it");
    stuckLink.close(); // the stuck worker is lost before confirming
    const handled: string[] = [];
    connectInProcess(
      controller,
      new WorkerEndpoint<string>({
        producer: "jobs",
        name: "ok",
        clock,
        ackDelay: 0, // confirms at once: the simulated clock does not move here
        handler: (d) => void handled.push(d.messageId),
      }),
    );
    const confirmed = await receipt.confirmed!;
    assert.deepEqual(handled, ["m1"]);
    assert.equal(confirmed.seq, receipt.seq);
    release!();
    await controller.close();
  });
});
