/**
 * Journals: the soak's logs, one JSON object a line, written with synchronous appends and read
 * back in chunks.
 *
 * Every process of the soak records what it did in its own journal. A write is one `write(2)` on
 * a file opened for appending, finished before the call returns, so a record written before a
 * SIGKILL is in the file (the page cache survives the process; only a machine crash would lose
 * it). A record cut in half by a kill is the last line of its file and the reader skips it.
 *
 * Times are wall-clock milliseconds with sub-millisecond precision
 * (`performance.timeOrigin + performance.now()`), comparable across the soak's processes to a
 * millisecond or so: the verifier allows for that (`CLOCK_SLACK_MS` in `classify.ts`).
 *
 * Runs on Deno and Bun (`node:fs` only).
 *
 * @module
 */

import { closeSync, openSync, readSync, writeSync } from "node:fs";

/** Wall-clock milliseconds, rounded to microseconds. */
export function wallClock(): number {
  return Math.round((performance.timeOrigin + performance.now()) * 1000) / 1000;
}

/** An append-only JSON-lines file. */
export class Journal {
  readonly #fd: number;

  /** Open (or create) `path` for appending. */
  constructor(readonly path: string) {
    this.#fd = openSync(path, "a");
  }

  /** Append one record; it is in the file when this returns. */
  write(record: object): void {
    writeSync(this.#fd, JSON.stringify(record) + "\n");
  }

  close(): void {
    closeSync(this.#fd);
  }
}

const CHUNK = 4 * 1024 * 1024;

/**
 * Reads a journal from where it left off: each `read()` returns the complete lines appended since
 * the last one (a line still being written waits for the next call).
 */
export class JournalTail {
  #offset = 0;
  #partial = "";
  readonly #decoder = new TextDecoder();

  constructor(readonly path: string) {}

  /** Call `onRecord` for every complete line appended since the last call. */
  read(onRecord: (record: Record<string, unknown>) => void): void {
    let fd: number;
    try {
      fd = openSync(this.path, "r");
    } catch {
      return; // not created yet
    }
    try {
      const buffer = new Uint8Array(CHUNK);
      for (;;) {
        const count = readSync(fd, buffer, 0, CHUNK, this.#offset);
        if (count <= 0) break;
        this.#offset += count;
        const text = this.#partial + this.#decoder.decode(buffer.subarray(0, count));
        const lines = text.split("\n");
        this.#partial = lines.pop()!;
        for (const line of lines) parseLine(line, onRecord);
      }
    } finally {
      closeSync(fd);
    }
  }
}

/** Every complete record of `path` (a torn last line is skipped). */
export function readJournal(
  path: string,
  onRecord: (record: Record<string, unknown>) => void,
): void {
  new JournalTail(path).read(onRecord);
}

function parseLine(line: string, onRecord: (record: Record<string, unknown>) => void): void {
  if (line === "") return;
  let record: unknown;
  try {
    record = JSON.parse(line);
  } catch {
    return; // a line torn by a kill (only ever the last one of a file)
  }
  if (typeof record === "object" && record !== null) onRecord(record as Record<string, unknown>);
}
