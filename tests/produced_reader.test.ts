/**
 * `readProduced` checks `Produced` exactly as `ProducedSchema` does: seeded random messages,
 * valid ones and ones broken in one place (a key, a type, a range, an extra field, the
 * single-job form), must get the schema's verdict and, when valid, its values by column.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import * as v from "valibot";
import { readProduced } from "../src/controller/produced_reader.ts";
import { EncodedBatch, encodedBatch } from "../src/protocol/encoded_batch.ts";
import { ProducedSchema } from "../src/protocol/schemas.ts";
import { ODD_VALUES } from "./support/odd_values.ts";
import { prng } from "./support/waiting.ts";

function randomMessage(random: () => number): unknown {
  const pick = <T>(values: readonly T[]) => values[Math.floor(random() * values.length)];
  const job = (): Record<string, unknown> => {
    const value: Record<string, unknown> = { messageId: `m${Math.floor(random() * 1e6)}` };
    value.payload = pick([{ n: 1 }, "text", 3, null, [1, 2], undefined]);
    if (random() < 0.2) value.attempt = pick([1, 2, 9]);
    if (random() < 0.2) value.timeout = pick([0, 500]);
    if (random() < 0.2) value.lost = pick([0, 1, 3]);
    return value;
  };
  const message: Record<string, unknown> = random() < 0.9
    ? {
      session: "s1",
      token: "t1",
      jobs: Array.from({ length: 1 + Math.floor(random() * 5) }, job),
    }
    : { session: "s1", token: "t1", ...job() };
  if (random() < 0.5) return message; // valid
  // Break it in one place.
  const jobs = message.jobs as Record<string, unknown>[] | undefined;
  const target = jobs && random() < 0.7 ? pick(jobs) : message;
  const key = pick([...Object.keys(target), "extra", "payload", "messageId"]);
  const roll = random();
  if (roll < 0.3) delete target[key];
  else if (roll < 0.9) target[key] = pick(ODD_VALUES);
  else if (jobs) message.jobs = pick([[], {}, "jobs", null]);
  return message;
}

test("readProduced gives the schema's verdict and values on random messages", () => {
  const random = prng(42);
  let valid = 0;
  for (let i = 0; i < 20_000; i++) {
    const message = randomMessage(random);
    const parsed = v.safeParse(ProducedSchema, message);
    const read = readProduced(message);
    assert.equal(read.ok, parsed.success, JSON.stringify(message));
    if (!read.ok || !parsed.success) continue;
    valid += 1;
    const output = parsed.output;
    const jobs = "jobs" in output
      ? output.jobs
      : [{ messageId: output.messageId, payload: output.payload }];
    assert.equal(read.session, output.session);
    assert.equal(read.token, output.token);
    assert.deepEqual(read.ids, jobs.map((job) => job.messageId));
    assert.deepEqual(read.payloads, jobs.map((job) => job.payload));
    jobs.forEach((job, index) => {
      const tries = read.tries?.[index];
      assert.equal(tries?.attempt, "attempt" in job ? job.attempt : undefined);
      assert.equal(tries?.timeout, "timeout" in job ? job.timeout : undefined);
      assert.equal(tries?.lost, "lost" in job ? job.lost : undefined);
    });
  }
  assert.ok(valid > 5_000, `only ${valid} valid messages`);
});

test("readProduced reads each field once: later changes to the message change nothing", () => {
  const job = { messageId: "a", payload: { n: 1 }, attempt: 2 };
  const read = readProduced({ session: "s", token: "t", jobs: [job] });
  job.messageId = "b";
  job.attempt = -5;
  assert.ok(read.ok);
  assert.deepEqual(read.ids, ["a"]);
  assert.equal(read.tries?.[0]?.attempt, 2);
});

test("an EncodedBatch is read as its columns, its payloads already JSON text", () => {
  const batch = encodedBatch("s", "t", ["a", "b"], ['{"n":1}', '"x"']);
  const read = readProduced(batch);
  assert.ok(read.ok);
  assert.equal(read.encoded, true);
  assert.deepEqual(read.ids, ["a", "b"]);
  assert.deepEqual(read.payloads, ['{"n":1}', '"x"']);
  assert.equal(read.tries, undefined);
  // A plain message's payloads are values, not texts.
  const plain = readProduced({
    session: "s",
    token: "t",
    jobs: [{ messageId: "a", payload: "x" }],
  });
  assert.ok(plain.ok);
  assert.equal(plain.encoded, false);
});

test("an EncodedBatch is an ordinary batch Produced to anyone else, also as JSON", () => {
  const batch = encodedBatch("s", "t", ["a", "b"], ['{"n":1}', "[2]"]);
  const parsed = v.safeParse(ProducedSchema, batch.toJSON());
  assert.ok(parsed.success);
  assert.deepEqual(
    JSON.parse(JSON.stringify(batch)),
    {
      session: "s",
      token: "t",
      jobs: [{ messageId: "a", payload: { n: 1 } }, {
        messageId: "b",
        payload: [2],
      }],
    },
  );
  assert.ok("jobs" in batch);
  assert.equal(batch.jobs, batch.jobs, "made once");
  // Copied by a port that forwards it elsewhere, it reads as the same jobs.
  for (const copy of [JSON.parse(JSON.stringify(batch)), structuredClone(batch), { ...batch }]) {
    const forwarded = readProduced(copy);
    assert.ok(forwarded.ok);
    assert.equal(forwarded.encoded, false);
    assert.deepEqual(forwarded.ids, ["a", "b"]);
    assert.deepEqual(forwarded.payloads, [{ n: 1 }, [2]]);
  }
});

test("an EncodedBatch with a bad session, token or no jobs gets the schema's verdict", () => {
  for (const batch of [encodedBatch("", "t", ["a"], ["1"]), encodedBatch("s", " ", ["a"], ["1"])]) {
    const read = readProduced(batch);
    const parsed = v.safeParse(ProducedSchema, batch.toJSON());
    assert.equal(parsed.success, false);
    assert.equal(read.ok, false);
    assert.equal(!read.ok && read.message, !parsed.success && parsed.issues[0].message);
  }
  assert.equal(readProduced(encodedBatch("s", "t", [], [])).ok, false);
});

test("only the factory makes an EncodedBatch, with one text a MessageID", () => {
  assert.throws(
    () => new EncodedBatch(Symbol("EncodedBatch") as never, "s", "t", ["a"], ["1"]),
    TypeError,
  );
  assert.throws(() => encodedBatch("s", "t", ["a", "b"], ["1"]), RangeError);
});
