/**
 * Option validation shared by every constructor: one message grammar, naming the option, the
 * allowed range and the value received.
 *
 * @module
 */

/** Describe a value for an error message without dumping large objects. */
function show(value: unknown): string {
  if (typeof value === "string") return JSON.stringify(value);
  if (typeof value === "number" || typeof value === "boolean" || value == null) {
    return String(value);
  }
  return typeof value;
}

/**
 * Check an optional integer option; returns the value or the default.
 *
 * @example
 * ```ts
 * import { integerOption } from "./options.ts";
 * console.assert(integerOption("Worker", "window", undefined, 50, 1, 10_000) === 50);
 * ```
 */
export function integerOption(
  owner: string,
  name: string,
  value: unknown,
  fallback: number,
  min: number,
  max: number,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isSafeInteger(value) || value < min || value > max) {
    throw new RangeError(
      `Cannot create ${owner}: option "${name}" must be an integer in ${min}..${max}, got ${
        show(value)
      }`,
    );
  }
  return value;
}

/** Check an optional duration in milliseconds (a finite number in `min..max`). */
export function durationOption(
  owner: string,
  name: string,
  value: unknown,
  fallback: number,
  min: number,
  max: number,
): number {
  if (value === undefined) return fallback;
  if (typeof value !== "number" || !Number.isFinite(value) || value < min || value > max) {
    throw new RangeError(
      `Cannot create ${owner}: option "${name}" must be a duration in ${min}..${max} ms, got ${
        show(value)
      }`,
    );
  }
  return value;
}

/** Check a required identifier (non-blank string of at most `maxLength` characters). */
export function identifierOption(
  owner: string,
  name: string,
  value: unknown,
  maxLength = 256,
): string {
  if (typeof value !== "string" || value.trim() === "" || value.length > maxLength) {
    throw new TypeError(
      `Cannot create ${owner}: option "${name}" must be a non-blank string of at most ${maxLength} characters, got ${
        show(value)
      }`,
    );
  }
  return value;
}

/** Check an optional boolean option. */
export function booleanOption(
  owner: string,
  name: string,
  value: unknown,
  fallback: boolean,
): boolean {
  if (value === undefined) return fallback;
  if (typeof value !== "boolean") {
    throw new TypeError(
      `Cannot create ${owner}: option "${name}" must be a boolean, got ${show(value)}`,
    );
  }
  return value;
}

/** Check that an option is a function (or absent when optional). */
export function functionOption<T>(owner: string, name: string, value: T, required: boolean): T {
  if (value === undefined && !required) return value;
  if (typeof value !== "function") {
    throw new TypeError(
      `Cannot create ${owner}: option "${name}" must be a function, got ${show(value)}`,
    );
  }
  return value;
}

/** Check that the options argument is an object. */
export function optionsObject<T>(owner: string, options: T): T {
  if (typeof options !== "object" || options === null) {
    throw new TypeError(`Cannot create ${owner}: options must be an object, got ${show(options)}`);
  }
  return options;
}
