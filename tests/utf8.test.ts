import { test } from "node:test";
import assert from "node:assert/strict";
import { utf8Length } from "../src/core/utf8.ts";
import { prng } from "./support/waiting.ts";

// Code units from every UTF-8 length class, and both halves of surrogate pairs on their own.
const UNITS = [
  0x41,
  0x7f,
  0x80,
  0xe9,
  0x7ff,
  0x800,
  0x2713,
  0xffff,
  0xd83c,
  0xdf89,
  0xd800,
  0xdfff,
];

test("utf8Length counts what TextEncoder writes, lone surrogates as U+FFFD", () => {
  const random = prng(7);
  const encoder = new TextEncoder();
  for (let n = 0; n < 5_000; n++) {
    const length = Math.floor(random() * 12);
    const text = String.fromCharCode(
      ...Array.from({ length }, () => UNITS[Math.floor(random() * UNITS.length)]),
    );
    assert.equal(utf8Length(text), encoder.encode(text).length, JSON.stringify(text));
  }
  assert.equal(utf8Length("aé✓🎉"), 10);
  assert.equal(utf8Length("\ud800é"), 5, "a lone high surrogate does not swallow what follows");
});
