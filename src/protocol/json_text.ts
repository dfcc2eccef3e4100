/**
 * A job payload already encoded as JSON text. A producer that holds a payload encoded (as the
 * backlog's producer does, reading it from its store) hands the controller this instead of the
 * value: the controller then neither encodes it a second time nor sees later changes to the
 * original object. The text can only come from `JSON.stringify` (or a store that kept such a
 * text), so it is valid JSON.
 *
 * @module
 */

const fromStringify = Symbol("JsonText");

/**
 * An immutable, valid JSON encoding of a value.
 *
 * @example
 * ```ts
 * import { JsonText } from "./json_text.ts";
 * const order = { id: 7, items: ["tea"] };
 * const payload = JsonText.encode(order);
 * order.items.push("cake"); // the payload is a snapshot
 * console.assert(payload.text === '{"id":7,"items":["tea"]}');
 * console.assert(JsonText.fromStored(payload.text).text === payload.text);
 * ```
 */
export class JsonText {
  // A private field behind a getter keeps the text immutable without `Object.freeze`, which
  // costs a runtime call for every job a producer submits.
  readonly #text: string;

  /** Use {@linkcode JsonText.encode}. */
  constructor(token: typeof fromStringify, text: string) {
    if (token !== fromStringify) throw new TypeError("Cannot create JsonText: use JsonText.encode");
    this.#text = text;
  }

  /** The JSON text. */
  get text(): string {
    return this.#text;
  }

  /** Encode `value`; throws a `TypeError` when it has no JSON form (undefined, a function, a cycle, a BigInt). */
  static encode(value: unknown): JsonText {
    let text: string | undefined;
    try {
      text = JSON.stringify(value);
    } catch (error) {
      throw new TypeError("Cannot encode the payload: it is not JSON-serializable", {
        cause: error,
      });
    }
    if (text === undefined) {
      throw new TypeError("Cannot encode the payload: it is not JSON-serializable");
    }
    return new JsonText(fromStringify, text);
  }

  /**
   * Wrap JSON text read back from a store (which kept what `encode` made); throws a `TypeError`
   * when it is not valid JSON, so damaged storage cannot put a broken frame on the wire.
   */
  static fromStored(text: string): JsonText {
    try {
      JSON.parse(text);
    } catch (error) {
      throw new TypeError("Cannot use a stored payload: it is not valid JSON", { cause: error });
    }
    return new JsonText(fromStringify, text);
  }

  /** The decoded value, so a `JsonText` inside another value serializes as that value. */
  toJSON(): unknown {
    return JSON.parse(this.text);
  }
}

/**
 * The JSON text of `value` (a {@linkcode JsonText}'s own text, encoded once already), or undefined
 * when it has none (undefined, a function, a cycle, a BigInt): for code that must not throw.
 *
 * @example
 * ```ts
 * import { JsonText, jsonTextOf } from "./json_text.ts";
 * console.assert(jsonTextOf({ n: 1 }) === '{"n":1}');
 * console.assert(jsonTextOf(JsonText.encode([1])) === "[1]");
 * console.assert(jsonTextOf(() => 1) === undefined);
 * ```
 */
export function jsonTextOf(value: unknown): string | undefined {
  if (value instanceof JsonText) return value.text;
  try {
    return JSON.stringify(value) ?? undefined;
  } catch {
    return undefined;
  }
}
