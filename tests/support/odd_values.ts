/**
 * Values that break a field of a protocol message in one place (blank or oversized ids, numbers
 * out of range or not integers, wrong types), for the tests that compare a hand-written check
 * with its valibot schema.
 */

import { MAX_ID_LENGTH, MAX_SEQ } from "../../src/protocol/schemas.ts";

/** One of each kind of bad field value. */
export const ODD_VALUES: readonly unknown[] = [
  undefined,
  null,
  "",
  " ",
  "x".repeat(MAX_ID_LENGTH + 1),
  0,
  -1,
  1.5,
  MAX_SEQ + 1,
  Number.NaN,
  Infinity,
  "7",
  true,
  false,
  {},
  [],
];
