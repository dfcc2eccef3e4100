import { test } from "node:test";
import assert from "node:assert/strict";
import {
  decodeDone,
  decodeFlags,
  decodeJob,
  encodeDone,
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

test("a done record is its header line, then the MessageID's bytes", () => {
  for (const [messageId, seq] of [["a", 1], ["job-🎉-é", 9_007_199_254_740_991]] as const) {
    const record = encodeDone(messageId, seq);
    const header = encoder.encode(`{"seq":${seq}}\n`);
    assert.deepEqual(record.subarray(0, header.length), header);
    assert.deepEqual(record.subarray(header.length), encoder.encode(messageId));
    assert.deepEqual(decodeDone(record), { messageId, seq });
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
