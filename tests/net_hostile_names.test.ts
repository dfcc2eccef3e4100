/**
 * Weakness 4 of the hostile-input issue: registering fresh endpoint names (`attacker#<i>`, which
 * one worker token admits without end) grew the controller's incarnation history forever (300k
 * names: +200 MB, never released). The history is now bounded, and the fencing that matters —
 * a replaced incarnation cannot take a live binding back — survives the churn.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { WorkPullingController } from "../mod.ts";
import {
  DEFAULT_MAX_REMEMBERED,
  Incarnations,
  TOMBSTONES_UNDER_PRESSURE,
} from "../src/controller/incarnations.ts";
import { ManualProducer, ScriptedWorker } from "./support/harness.ts";

test("300,000 fresh names keep the history within its bound", () => {
  const incarnations = new Incarnations();
  for (let i = 0; i < 300_000; i++) {
    assert.equal(incarnations.admit(`attacker#${i}`, crypto.randomUUID()).kind, "current");
  }
  assert.ok(
    incarnations.size <= DEFAULT_MAX_REMEMBERED,
    `${incarnations.size} incarnation ids remembered`,
  );
  assert.ok(incarnations.names <= DEFAULT_MAX_REMEMBERED);
});

test("restarting one name over and over keeps at most 1,024 tombstones, and the bound holds", () => {
  const incarnations = new Incarnations({ maxRemembered: 100 });
  for (let i = 0; i < 5000; i++) incarnations.admit("w", `i${i}`);
  assert.ok(incarnations.size <= 100, `${incarnations.size} ids`);
  assert.equal(incarnations.admit("w", "i4999").kind, "current");
  assert.equal(
    incarnations.admit("w", "i4998").kind,
    "stale",
    "the latest replaced one is refused",
  );
});

test("under pressure a bound name is never forgotten and keeps its newest tombstones", () => {
  const bound = new Set(["live"]);
  const incarnations = new Incarnations({ maxRemembered: 64, isBound: (w) => bound.has(w) });
  for (let i = 0; i <= 20; i++) incarnations.admit("live", `live-${i}`);
  for (let i = 0; i < 10_000; i++) incarnations.admit(`churn#${i}`, `c${i}`);
  assert.equal(incarnations.admit("live", "live-20").kind, "current");
  for (let i = 20 - TOMBSTONES_UNDER_PRESSURE; i < 20; i++) {
    assert.equal(incarnations.admit("live", `live-${i}`).kind, "stale", `live-${i}`);
  }
  assert.ok(incarnations.size <= 64 + TOMBSTONES_UNDER_PRESSURE + 1, `${incarnations.size} ids`);
});

test(
  "a controller churned through fresh names keeps its history bounded: forgotten names start afresh, live bindings stay fenced",
  async () => {
    const producer = new ManualProducer();
    const controller = new WorkPullingController({
      name: "jobs",
      producer,
      maxIncarnationHistory: 64,
    });
    await controller.start();
    try {
      // A worker that restarted: its old incarnation is a zombie that must stay locked out.
      const zombie = new ScriptedWorker(controller, "w#live", "old");
      zombie.register();
      const live = new ScriptedWorker(controller, "w#live", "new");
      live.register();
      const liveBinding = live.binding;
      // An early name, replaced once and then gone.
      const early = new ScriptedWorker(controller, "w#early", "first");
      early.register();
      const successor = new ScriptedWorker(controller, "w#early", "second");
      successor.register();
      successor.disconnect();
      // The churn: a thousand fresh names, each registered and gone.
      for (let i = 0; i < 1000; i++) {
        const churn = new ScriptedWorker(controller, `w#churn-${i}`);
        churn.register();
        churn.disconnect();
      }
      // The live binding's zombie is still refused; the binding is untouched.
      const comeback = new ScriptedWorker(controller, "w#live", "old");
      comeback.register();
      assert.equal(comeback.binding, "", "the zombie got no binding");
      const stats = controller.stats().workers.find((w) => w.worker === "w#live");
      assert.equal(stats?.binding, liveBinding);
      assert.equal(stats?.incarnation, "new");
      // The early name was forgotten: its replaced incarnation binds again, afresh.
      const returning = new ScriptedWorker(controller, "w#early", "first");
      returning.register();
      assert.notEqual(returning.binding, "", "a forgotten name starts afresh");
      assert.equal(returning.received.at(-1)?.type, "registered");
    } finally {
      await controller.close();
    }
  },
);
