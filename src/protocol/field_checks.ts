/**
 * The field checks of the schemas' ids and integers as plain predicates, for the hand-written
 * checks on the hot path (`jobs_frame_check.ts`, the controller's `produced_reader.ts`), which
 * must accept exactly what the valibot schemas accept.
 *
 * @module
 */

import { MAX_ID_LENGTH } from "./schemas.ts";

/**
 * What the schemas call an id: a non-blank string of at most `MAX_ID_LENGTH` UTF-16 units.
 *
 * @example
 * ```ts
 * import { isId } from "./field_checks.ts";
 * console.assert(isId("job-1") && !isId(" ") && !isId(7));
 * ```
 */
export function isId(value: unknown): value is string {
  return typeof value === "string" && value.length > 0 && value.length <= MAX_ID_LENGTH &&
    value.trim() !== "";
}

/**
 * Whether `value` is a safe integer in `[min, max]` (the schemas' `safeInteger` with bounds).
 *
 * @example
 * ```ts
 * import { isIntegerIn } from "./field_checks.ts";
 * console.assert(isIntegerIn(3, 1, 10) && !isIntegerIn(1.5, 1, 10) && !isIntegerIn(0, 1, 10));
 * ```
 */
export function isIntegerIn(value: unknown, min: number, max: number): boolean {
  return Number.isSafeInteger(value) && (value as number) >= min && (value as number) <= max;
}
