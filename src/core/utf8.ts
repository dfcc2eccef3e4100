/**
 * UTF-8 sizes of JavaScript strings, counted without encoding them: the byte limits of frames,
 * payloads and commits are checked on hot paths where a `TextEncoder` call per string would cost
 * more than the check.
 *
 * @module
 */

/**
 * The UTF-8 length of `text`, as `TextEncoder` would encode it (a lone surrogate becomes U+FFFD,
 * 3 bytes).
 *
 * @example
 * ```ts
 * import { utf8Length } from "./utf8.ts";
 * console.assert(utf8Length("aé✓🎉") === 1 + 2 + 3 + 4);
 * ```
 */
export function utf8Length(text: string): number {
  let bytes = text.length;
  for (let i = 0; i < text.length; i++) {
    const code = text.charCodeAt(i);
    if (code < 0x80) continue;
    if (code < 0x800) {
      bytes += 1;
    } else {
      bytes += 2;
      const next = text.charCodeAt(i + 1);
      if (code <= 0xdbff && code >= 0xd800 && next >= 0xdc00 && next <= 0xdfff) i += 1;
    }
  }
  return bytes;
}
