import { describe, test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  MemoryWorkQueue,
  WorkerEndpoint,
  WorkPullingController,
} from "../mod.ts";

const producer = () => new BufferedProducer();
const handler = () => {};

describe("options are validated at construction, naming the option and its range", () => {
  const controllerCases: [string, Record<string, unknown>, RegExp][] = [
    ["a blank name", { name: " " }, /option "name" must be a non-blank string/],
    ["a missing producer", { producer: undefined }, /option "producer" must implement/],
    [
      "a producer without onStored",
      { producer: { attach() {}, onRequestNext() {} } },
      /option "producer"/,
    ],
    [
      "a zero retryInterval",
      { retryInterval: 0 },
      /option "retryInterval" must be a duration in 1\.\.3600000 ms, got 0/,
    ],
    ["a non-numeric retryInterval", { retryInterval: "500" }, /option "retryInterval".*got "500"/],
    [
      "zero queue retry attempts",
      { queueRetryAttempts: 0 },
      /option "queueRetryAttempts" must be an integer in 1\.\.100, got 0/,
    ],
    [
      "a fractional maxBatch",
      { maxBatch: 1.5 },
      /option "maxBatch" must be an integer in 1\.\.10000/,
    ],
    [
      "a negative lookahead",
      { lookahead: -1 },
      /option "lookahead" must be an integer in 0\.\.1000000, got -1/,
    ],
    [
      "a lookaheadBytes below 1 KiB",
      { lookaheadBytes: 100 },
      /option "lookaheadBytes" must be an integer in 1024\.\.1073741824, got 100/,
    ],
    [
      "a silenceIntervals of 1",
      { silenceIntervals: 1 },
      /option "silenceIntervals" must be an integer in 2\.\.1000/,
    ],
    ["a negative reconnectGrace", { reconnectGrace: -1 }, /option "reconnectGrace"/],
    [
      "a non-boolean deliveryConfirmation",
      { deliveryConfirmation: "yes" },
      /option "deliveryConfirmation" must be a boolean/,
    ],
    [
      "a queue missing methods",
      { queue: { load() {} } },
      /option "queue" must implement load, store, accept and confirmMessage/,
    ],
    ["a clock without setTimeout", { clock: { now: () => 0 } }, /option "clock"/],
    ["a maxPayloadBytes above the queue's maximum", {
      queue: Object.assign(new MemoryWorkQueue(), { maxPayloadBytes: 100 }),
      maxPayloadBytes: 101,
    }, /option "maxPayloadBytes" must be an integer in 1\.\.100/],
  ];
  for (const [name, options, message] of controllerCases) {
    test(`WorkPullingController rejects ${name}`, () => {
      assert.throws(
        () =>
          new WorkPullingController({ name: "jobs", producer: producer(), ...options } as never),
        message,
      );
    });
  }

  const workerCases: [string, Record<string, unknown>, RegExp][] = [
    ["a window of 0", { window: 0 }, /option "window" must be an integer in 1\.\.10000, got 0/],
    [
      "a window above 10,000",
      { window: 10_001 },
      /option "window" must be an integer in 1\.\.10000, got 10001/,
    ],
    ["a missing handler", { handler: undefined }, /option "handler" must be a function/],
    ["a blank producer", { producer: "" }, /option "producer"/],
    [
      "an overlong name",
      { name: "x".repeat(300) },
      /option "name" must be a non-blank string of at most 256/,
    ],
    ["a zero resendInterval", { resendInterval: 0 }, /option "resendInterval"/],
  ];
  for (const [name, options, message] of workerCases) {
    test(`WorkerEndpoint rejects ${name}`, () => {
      assert.throws(
        () => new WorkerEndpoint({ producer: "jobs", name: "w", handler, ...options } as never),
        message,
      );
    });
  }

  test("BufferedProducer rejects a maxBatch of 0", () => {
    assert.throws(() => new BufferedProducer({ maxBatch: 0 }), /option "maxBatch"/);
  });

  test("defaults are accepted", () => {
    const worker = new WorkerEndpoint({ producer: "jobs", name: "w", handler });
    assert.equal(worker.window, 50);
    const controller = new WorkPullingController({ name: "jobs", producer: producer() });
    assert.equal(controller.state, "idle");
    assert.equal(controller.maxPayloadBytes, 1024 * 1024);
  });
});

describe("bad submissions are refused at once and lose nothing", () => {
  test("non-JSON, oversized and badly named jobs are rejected with clear errors", async () => {
    const p = new BufferedProducer<unknown>();
    const controller = new WorkPullingController({
      name: "jobs",
      producer: p,
      maxPayloadBytes: 1000,
    });
    await controller.start();
    await assert.rejects(p.submit(undefined), /not JSON-serializable/);
    await assert.rejects(p.submit(10n), /not JSON-serializable/);
    const cycle: Record<string, unknown> = {};
    cycle.self = cycle;
    await assert.rejects(p.submit(cycle), /not JSON-serializable/);
    await assert.rejects(
      p.submit("x".repeat(2000)),
      /the payload is 2002 bytes; the maximum is 1000/,
    );
    await assert.rejects(p.submit(1, { messageId: "  " }), /messageId must be a non-blank string/);
    assert.equal(p.buffered, 0);
    const ok = p.submit("fine");
    assert.equal(p.buffered, 1);
    p.close();
    await assert.rejects(ok, /closed/);
    await controller.close();
  });
});
