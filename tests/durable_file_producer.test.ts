/**
 * The example file-backed producer against the producer contract, message by message, and its
 * recovery from the files (torn lines included). The crash tests run it for real.
 */

import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { appendFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import type { Produced, ProducerPort, StoredAck } from "../mod.ts";
import { DurableFileProducer } from "../examples/durable_file_producer.ts";

/** A producer on fresh files, with a port that records what it sends. */
function setup(source = "", marks = "", maxBatch = 2) {
  const dir = mkdtempSync(join(tmpdir(), "workpull-producer-"));
  const files = { source: join(dir, "source.jsonl"), marks: join(dir, "marks.jsonl") };
  writeFileSync(files.source, source);
  writeFileSync(files.marks, marks);
  const produced: Produced[] = [];
  const acks: StoredAck[] = [];
  const port: ProducerPort = {
    produced: (message) => void produced.push(message),
    storedAck: (message) => void acks.push(message),
    maxPayloadBytes: 1 << 20,
    deliveryConfirmation: false,
  };
  const open = () => {
    const producer = new DurableFileProducer<number>({ ...files, maxBatch });
    producer.attach(port);
    return producer;
  };
  const ids = (message: Produced | undefined) =>
    message && "jobs" in message ? message.jobs.map((job) => job.messageId) : [];
  const marked = () =>
    readFileSync(files.marks, "utf8").split("\n").filter(Boolean).map((l) => JSON.parse(l));
  return {
    dir,
    files,
    produced,
    acks,
    open,
    ids,
    marked,
    remove: () => rmSync(dir, { recursive: true }),
  };
}

const lines = (...ids: string[]) =>
  ids.map((id, n) => JSON.stringify({ messageId: id, payload: n }) + "\n").join("");

describe("DurableFileProducer", () => {
  test("answers a grant with unmarked jobs; a retried grant gets the identical answer", () => {
    const s = setup(lines("a", "b", "c"), '"a"\n');
    try {
      const producer = s.open();
      assert.deepEqual(producer.recovered, ["b", "c"]);
      producer.onRequestNext({ session: "s1", token: "t1", maxJobs: 5 });
      producer.onRequestNext({ session: "s1", token: "t1", maxJobs: 5 });
      assert.equal(s.produced.length, 2);
      assert.equal(s.produced[1], s.produced[0]);
      assert.deepEqual(s.ids(s.produced[0]), ["b", "c"]);
      producer.close();
    } finally {
      s.remove();
    }
  });

  test("acknowledges Stored at once and marks only what the controller accepted", () => {
    const s = setup(lines("a", "b", "c"));
    try {
      const producer = s.open();
      producer.onRequestNext({ session: "s1", token: "t1", maxJobs: 5 });
      const stored = {
        session: "s1",
        token: "t1",
        jobs: [{ messageId: "a", seq: 1 }, { messageId: "b", seq: 2 }],
      };
      producer.onStored(stored);
      producer.onStored(stored); // a retransmission is acknowledged again
      assert.deepEqual(s.acks, [{ session: "s1", token: "t1" }, { session: "s1", token: "t1" }]);
      assert.deepEqual(s.marked(), [], "nothing is marked before Accept");
      producer.onAccepted({ session: "s1", token: "t1" });
      assert.deepEqual(s.marked(), ["a", "b"]);
      assert.equal(producer.unaccepted, 1);
      producer.onRequestNext({ session: "s1", token: "t2", maxJobs: 5 });
      assert.deepEqual(s.ids(s.produced.at(-1)), ["c"]);
      producer.close();
    } finally {
      s.remove();
    }
  });

  test("a grant from a new session offers the unaccepted batch again, first, under the same MessageIDs", () => {
    const s = setup(lines("a", "b", "c", "d"));
    try {
      const producer = s.open();
      producer.onRequestNext({ session: "s1", token: "t1", maxJobs: 2 });
      producer.onStored({
        session: "s1",
        token: "t1",
        jobs: [{ messageId: "a", seq: 1 }, { messageId: "b", seq: 2 }],
      });
      // The controller restarted before its Accept landed.
      producer.onRequestNext({ session: "s2", token: "t1", maxJobs: 3 });
      assert.deepEqual(s.ids(s.produced.at(-1)), ["a", "b"]);
      // An answer that was never stored is offered again too.
      producer.onRequestNext({ session: "s3", token: "t1", maxJobs: 2 });
      assert.deepEqual(s.ids(s.produced.at(-1)), ["a", "b"]);
      producer.onStored({
        session: "s3",
        token: "t1",
        jobs: [{ messageId: "a", seq: 1 }, { messageId: "b", seq: 2 }],
      });
      // A new grant of the same session means the previous batch was accepted.
      producer.onRequestNext({ session: "s3", token: "t2", maxJobs: 5 });
      assert.deepEqual(s.marked(), ["a", "b"]);
      assert.deepEqual(s.ids(s.produced.at(-1)), ["c", "d"]);
      producer.close();
    } finally {
      s.remove();
    }
  });

  test("keeps a grant until work arrives; add() is durable and offered at once", () => {
    const s = setup();
    try {
      const producer = s.open();
      producer.onRequestNext({ session: "s1", token: "t1", maxJobs: 5 });
      assert.equal(s.produced.length, 0, "no work: the grant waits");
      producer.add({ messageId: "x", payload: 7 });
      assert.deepEqual(s.produced.at(-1), {
        session: "s1",
        token: "t1",
        jobs: [{ messageId: "x", payload: 7 }],
      });
      assert.throws(
        () => producer.add({ messageId: "x", payload: 8 }),
        /already has this MessageID/,
      );
      assert.throws(() => producer.add({ messageId: " ", payload: 8 }), TypeError);
      assert.throws(
        () => producer.add({ messageId: "y", payload: undefined as unknown as number }),
        /not a JSON value/,
      );
      producer.close();
      assert.deepEqual(s.open().recovered, ["x"], "it survives a restart");
    } finally {
      s.remove();
    }
  });

  test("drops and truncates a line a crash cut short, in either file", () => {
    const s = setup(lines("a", "b") + '{"messageId":"c","pay', '"a"\n"b');
    try {
      const producer = s.open();
      assert.deepEqual(producer.recovered, ["b"], "c was never durable; the mark of b was torn");
      producer.add({ messageId: "c", payload: 3 });
      producer.close();
      appendFileSync(s.files.marks, '"b"\n');
      assert.deepEqual(s.open().recovered, ["c"]);
      assert.ok(readFileSync(s.files.source, "utf8").endsWith('{"messageId":"c","payload":3}\n'));
    } finally {
      s.remove();
    }
  });

  test("refuses a malformed line, naming the file", () => {
    const s = setup('{"id":"a"}\n');
    try {
      assert.throws(() => s.open(), /Cannot read the source: not a job line/);
    } finally {
      s.remove();
    }
  });
});
