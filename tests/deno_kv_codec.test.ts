import { test } from "node:test";
import assert from "node:assert/strict";
import {
  COMPLETED_BOUNDS,
  decodeCompleted,
  decodeDone,
  decodeFlags,
  decodeJob,
  encodeCompleted,
  encodeFlags,
  encodeJob,
  encodeJobText,
  headCapacity,
} from "../src/queue/deno_kv/codec.ts";
import { utf8Length } from "../src/core/utf8.ts";
import { prng } from "./support/waiting.ts";

const encoder = new TextEncoder();
const FILL = ["a", "é", "✓", "🎉", '"', "\\"];

function randomText(random: () => number, length: number): string {
  let text = "";
  while (text.length < length) text += FILL[Math.floor(random() * FILL.length)];
  return text;
}

test("encodeJobText writes the bytes encodeJob writes, with and without continuation parts", () => {
  const random = prng(11);
  const cases: [string, string][] = [["a", "1"], ["job-🎉", '"ü"']];
  for (let n = 0; n < 300; n++) {
    cases.push([randomText(random, 1 + random() * 40), randomText(random, 1 + random() * 200)]);
  }
  // Around the size where a payload stops fitting in the job record.
  const id = "boundary";
  for (const delta of [-2, -1, 0, 1, 2]) {
    cases.push([id, "x".repeat(headCapacity(id.length) + delta)]);
    cases.push([id, "é".repeat(Math.floor((headCapacity(id.length) + delta) / 2))]);
  }
  for (const [messageId, payload] of cases) {
    const expected = encodeJob(encoder.encode(messageId), encoder.encode(payload));
    const actual = encodeJobText(messageId, utf8Length(messageId), payload, utf8Length(payload));
    assert.deepEqual(actual.record, expected.record, `${messageId}: ${payload.slice(0, 20)}`);
    assert.deepEqual(actual.parts, expected.parts);
    assert.equal(decodeJob(actual.record, 1).messageId, messageId);
  }
});

test("a done record of format version 1 is its header line, then the MessageID's bytes", () => {
  for (const [messageId, seq] of [["a", 1], ["job-🎉-é", 9_007_199_254_740_991]] as const) {
    const record = encoder.encode(`{"seq":${seq}}\n${messageId}`);
    assert.deepEqual(decodeDone(record), { messageId, seq });
  }
});

test("a completed record is its header line, then the MessageIDs' bytes, within its bounds", () => {
  const entries = [
    { messageId: "a", seq: 1 },
    { messageId: "job-🎉-é\n", seq: 9_007_199_254_740_991 },
    { messageId: "x".repeat(1_024), seq: 9_007_199_254_740_990 },
  ];
  const idBytes = entries.map((entry) => utf8Length(entry.messageId));
  const record = encodeCompleted(entries, idBytes);
  const header = encoder.encode(
    `{"seq":[1,9007199254740991,9007199254740990],"len":[${idBytes}]}\n`,
  );
  assert.deepEqual(record.subarray(0, header.length), header);
  assert.deepEqual(
    record.subarray(header.length),
    encoder.encode(entries.map((e) => e.messageId).join("")),
  );
  assert.deepEqual(decodeCompleted(record), entries);
  const bound = COMPLETED_BOUNDS.fixed +
    idBytes.reduce((sum, bytes) => sum + bytes + COMPLETED_BOUNDS.perJob, 0);
  assert.ok(record.length <= bound, `${record.length} > ${bound}`);
  assert.equal(encodeCompleted([], []).length, '{"seq":[],"len":[]}\n'.length);
  for (
    const bad of [
      '{"seq":[1],"len":[2]}\na',
      '{"seq":[1],"len":[1]}\nab',
      '{"seq":[1,2],"len":[1]}\nab',
      '{"seq":[0],"len":[1]}\na',
      '{"seq":[1],"len":[1]}',
    ]
  ) {
    assert.throws(() => decodeCompleted(encoder.encode(bad)), /malformed/, bad);
  }
});

test("each flags record holds its own flags", () => {
  for (const accepted of [false, true]) {
    for (const confirmed of [false, true]) {
      const record = encodeFlags({ accepted, confirmed });
      assert.equal(
        new TextDecoder().decode(record),
        JSON.stringify({ accepted, confirmed }),
      );
      if (accepted !== confirmed) {
        assert.deepEqual(decodeFlags(record, 1), { accepted, confirmed });
      }
    }
  }
});
