/**
 * Two small rules every socket handler of the network edge follows, on both sides: nothing may
 * escape a handler (on Deno an exception escaping a WebSocket handler ends the process), and a
 * close reason must fit the 123 bytes WebSocket allows (or `close()` throws).
 *
 * @module
 */

import { utf8Length } from "../core/utf8.ts";
import { defaultLogger, type Logger } from "../core/logger.ts";

/** Run `body`; log what it throws instead of letting it escape. */
export function guard(what: string, body: () => void, logger: Logger = defaultLogger): void {
  try {
    body();
  } catch (error) {
    logger.error(`${what} failed`, error);
  }
}

/** `reason` shortened to at most 123 UTF-8 bytes. */
export function closeReason(reason: string): string {
  let text = reason.slice(0, 123);
  while (utf8Length(text) > 123) text = text.slice(0, -1);
  return text;
}
