/**
 * The `logger` option: levels, text and JSON lines, validation naming the option, and the parts
 * that report contained failures sending them to the logger they were given (and, without one,
 * to `console.error` as before).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import {
  BufferedProducer,
  createLogger,
  JobQueue,
  type Logger,
  WorkPullingController,
} from "../mod.ts";
import { createWorkpullApp } from "../server.ts";

/** A logger that keeps what it receives. */
function recorder(): Logger & { entries: [string, string, unknown[]][] } {
  const entries: [string, string, unknown[]][] = [];
  const at = (level: string) => (message: string, ...details: unknown[]) =>
    void entries.push([level, message, details]);
  return { entries, error: at("error"), warn: at("warn"), info: at("info"), debug: at("debug") };
}

test("createLogger writes the levels at and above its threshold, as text", () => {
  const lines: string[] = [];
  const logger = createLogger({ level: "info", write: (line) => lines.push(line), now: () => 0 });
  logger.debug("hidden");
  logger.info("a worker joined", { worker: "w1" });
  logger.error("a handler failed", new TypeError("bad"));
  assert.equal(lines.length, 2);
  assert.equal(lines[0], '1970-01-01T00:00:00.000Z INFO workpull: a worker joined {"worker":"w1"}');
  assert.match(
    lines[1],
    /^1970-01-01T00:00:00\.000Z ERROR workpull: a handler failed TypeError: bad/,
  );
});

test("createLogger writes JSON lines with the error's name, message and stack", () => {
  const lines: string[] = [];
  const logger = createLogger({
    level: "debug",
    format: "json",
    write: (line) => lines.push(line),
  });
  const cycle: Record<string, unknown> = {};
  cycle.self = cycle;
  logger.warn("odd", 42, new RangeError("too big"), cycle);
  const entry = JSON.parse(lines[0]);
  assert.equal(entry.level, "warn");
  assert.equal(entry.msg, "odd");
  assert.deepEqual([entry.error.name, entry.error.message], ["RangeError", "too big"]);
  assert.match(entry.error.stack, /too big/);
  assert.deepEqual(entry.details, [42, "[object Object]"]);
  assert.ok(!Number.isNaN(Date.parse(entry.time)));
});

test("a bad logger option is refused naming it", () => {
  assert.throws(() => createLogger({ level: "loud" as never }), /option "level"/);
  assert.throws(() => createLogger({ format: "xml" as never }), /option "format"/);
  const producer = new BufferedProducer();
  assert.throws(
    () => new WorkPullingController({ name: "j", producer, logger: { error() {} } as never }),
    /WorkPullingController: option "logger" must have error, warn, info and debug methods/,
  );
});

test("the controller, a job queue and the app report contained failures to their logger", async () => {
  const logger = recorder();
  const queue = new JobQueue({ name: "jobs", logger });
  await queue.start();
  queue.controller.addEventListener("worker-bound", () => {});
  queue.addEventListener("job", () => {
    throw new Error("listener bug");
  });
  await queue.add({ n: 1 });
  assert.deepEqual(logger.entries.map(([level, message]) => [level, message]), [
    ["error", 'a "job" event listener threw'],
  ]);

  const app = createWorkpullApp({
    queue,
    upgradeWebSocket: () => async (_c: unknown, next: () => Promise<void>) => await next(),
    auth: {
      authorize: () => {
        throw new Error("hook bug");
      },
    },
    logger,
  });
  assert.equal((await app.request("/stats")).status, 401);
  assert.deepEqual(logger.entries.slice(-2).map(([level, message]) => [level, message]), [
    ["error", "the authorize hook threw; the request is refused"],
    ["info", "refused a stats request: refused (repeats within a minute are not logged)"],
  ]);
  await queue.close();
});

test("without a logger, failures still go to console.error", async () => {
  const errors: unknown[][] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => void errors.push(args);
  try {
    const controller = new WorkPullingController({ name: "j", producer: new BufferedProducer() });
    controller.addEventListener("anything", () => {
      throw new Error("listener bug");
    });
    controller.dispatchEvent(new Event("anything"));
    assert.equal(errors.length, 1);
    assert.equal(errors[0][0], 'workpull: a "anything" event listener threw');
    await controller.close();
  } finally {
    console.error = original;
  }
});
