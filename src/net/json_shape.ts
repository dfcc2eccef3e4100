/**
 * A look at the shape of JSON before it is parsed — how deep it nests, and how many items one
 * top-level array holds — fed the raw bytes chunk by chunk as they arrive, so a hostile body is
 * refused after the first bytes that break a limit, not after all of it was read.
 *
 * Why before parsing: `JSON.parse` of a body of a million tiny items builds a million objects
 * (hundreds of MB) before anyone can count them, and a deeply nested value parses fine on every
 * runtime but later overflows the stack of whatever walks it recursively (`JSON.stringify` on
 * Bun throws `RangeError` at a depth of about 10,000). The scan costs one comparison a byte, keeps
 * no more than a short key, and stops at the first limit passed.
 *
 * It works on UTF-8 bytes: every structural character of JSON is ASCII, and no byte of a
 * multi-byte UTF-8 sequence is below 0x80, so a quote or a bracket inside a string's non-ASCII
 * text can never be mistaken for one. The scan does not validate: on bytes that are not JSON it
 * reports some shape, and the parse that follows refuses them.
 *
 * @module
 */

/** Limits for a {@linkcode JsonScanner}. */
export interface JsonShapeLimits {
  /** Deepest nesting of arrays and objects allowed (a scalar has depth 0, `[]` depth 1). */
  readonly maxDepth: number;
  /** Count the items of the array under this key of the top-level object... */
  readonly countKey?: string;
  /** ...and stop when it holds more than this many. */
  readonly maxItems?: number;
}

/** A limit the bytes passed. */
export type JsonShapeViolation =
  | { readonly reason: "too-deep"; readonly limit: number }
  | { readonly reason: "too-many-items"; readonly limit: number };

const QUOTE = 34;
const BACKSLASH = 92;
const OPEN_OBJECT = 123;
const CLOSE_OBJECT = 125;
const OPEN_ARRAY = 91;
const CLOSE_ARRAY = 93;
const COMMA = 44;
const SPACE = 32;
/** Keys longer than this are not collected (they cannot be `countKey`). */
const MAX_KEY_BYTES = 256;

/**
 * Scans JSON bytes as they arrive, for nesting depth and the item count of `countKey`'s array.
 *
 * @example A body of too many jobs is refused within its first bytes
 * ```ts
 * import { JsonScanner } from "./json_shape.ts";
 * const scanner = new JsonScanner({ maxDepth: 8, countKey: "jobs", maxItems: 2 });
 * const bytes = new TextEncoder().encode('{"jobs":[{},{},{}');
 * console.assert(scanner.push(bytes)?.reason === "too-many-items");
 * ```
 *
 * @example Depth and item count of an acceptable body
 * ```ts
 * import { JsonScanner } from "./json_shape.ts";
 * const scanner = new JsonScanner({ maxDepth: 8, countKey: "jobs", maxItems: 10 });
 * console.assert(scanner.push(new TextEncoder().encode('{"jobs":[[1],[2]]}')) === undefined);
 * console.assert(scanner.depth === 3 && scanner.items === 2);
 * ```
 */
export class JsonScanner {
  readonly #maxDepth: number;
  readonly #countKey: Uint8Array | undefined;
  readonly #maxItems: number;
  #depth = 0;
  #deepest = 0;
  #inString = false;
  #escaped = false;
  /** Whether the top-level value is an object (strings at depth 1 may then be its keys). */
  #topObject = false;
  /** A key is expected next at depth 1 (after `{` or `,`). */
  #expectKey = false;
  /** The bytes of the key being read, while it may still equal `countKey`. */
  #key: number[] | undefined;
  /** The key being read has an escape: it may spell `countKey` (so it counts as equal). */
  #keyEscaped = false;
  /** The last complete key at depth 1 equals `countKey`. */
  #keyMatches = false;
  #counting = false;
  #commas = 0;
  #nonEmpty = false;
  #items = 0;

  /** A scanner at the start of a JSON text. */
  constructor(limits: JsonShapeLimits) {
    this.#maxDepth = limits.maxDepth;
    this.#countKey = limits.countKey === undefined
      ? undefined
      : new TextEncoder().encode(limits.countKey);
    this.#maxItems = limits.maxItems ?? Infinity;
  }

  /** The deepest nesting seen so far. */
  get depth(): number {
    return this.#deepest;
  }

  /** Items of `countKey`'s array (complete once the array closed). */
  get items(): number {
    return this.#counting ? (this.#nonEmpty ? this.#commas + 1 : 0) : this.#items;
  }

  /** Scan the next bytes; returns the first limit they pass, if any (then stop feeding). */
  push(bytes: Uint8Array): JsonShapeViolation | undefined {
    for (let i = 0; i < bytes.length; i++) {
      const c = bytes[i];
      if (this.#inString) {
        if (this.#escaped) this.#escaped = false;
        else if (c === BACKSLASH) {
          this.#escaped = true;
          if (this.#key) this.#keyEscaped = true;
        } else if (c === QUOTE) {
          this.#inString = false;
          if (this.#key) {
            // An escaped key ("jo\u0062s") is taken to match: the count must not be dodged.
            this.#keyMatches = this.#keyEscaped || equalBytes(this.#key, this.#countKey!);
            this.#key = undefined;
          }
          continue;
        }
        if (this.#key && !this.#keyEscaped) {
          if (this.#key.length >= MAX_KEY_BYTES) this.#key = undefined;
          else this.#key.push(c);
        }
        continue;
      }
      if (c === QUOTE) {
        this.#inString = true;
        if (this.#depth === 1 && this.#topObject && this.#expectKey) {
          this.#expectKey = false;
          this.#keyMatches = false;
          this.#keyEscaped = false;
          if (this.#countKey) this.#key = [];
        } else if (this.#counting && this.#depth === 2) this.#nonEmpty = true;
        continue;
      }
      if (c === OPEN_OBJECT || c === OPEN_ARRAY) {
        if (this.#counting && this.#depth === 2) this.#nonEmpty = true;
        this.#depth += 1;
        if (this.#depth > this.#deepest) {
          this.#deepest = this.#depth;
          if (this.#depth > this.#maxDepth) return { reason: "too-deep", limit: this.#maxDepth };
        }
        if (this.#depth === 1) {
          this.#topObject = c === OPEN_OBJECT;
          this.#expectKey = this.#topObject;
        } else if (this.#depth === 2 && c === OPEN_ARRAY && this.#keyMatches) {
          this.#counting = true;
          this.#commas = 0;
          this.#nonEmpty = false;
        }
        continue;
      }
      if (c === CLOSE_OBJECT || c === CLOSE_ARRAY) {
        if (this.#counting && this.#depth === 2) {
          this.#counting = false;
          this.#items = this.#nonEmpty ? this.#commas + 1 : 0;
        }
        this.#depth -= 1;
        continue;
      }
      if (c === COMMA) {
        if (this.#depth === 1 && this.#topObject) {
          this.#expectKey = true;
          this.#keyMatches = false;
        } else if (this.#counting && this.#depth === 2 && ++this.#commas + 1 > this.#maxItems) {
          return { reason: "too-many-items", limit: this.#maxItems };
        }
        continue;
      }
      // A colon, whitespace, or a character of a number, true, false or null.
      if (this.#counting && this.#depth === 2 && c > SPACE) this.#nonEmpty = true;
    }
    return undefined;
  }
}

function equalBytes(a: readonly number[], b: Uint8Array): boolean {
  if (a.length !== b.length) return false;
  for (let i = 0; i < a.length; i++) if (a[i] !== b[i]) return false;
  return true;
}
