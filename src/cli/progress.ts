/**
 * A progress bar on standard error, drawn only when standard error is a terminal (a pipe or a
 * log file gets nothing but the final line). With a known total it is a bar with a count and a
 * rate; without one, a count and a rate. Redrawn at most ten times a second.
 *
 * @module
 */

import process from "node:process";

/** A progress line being drawn. */
export interface Progress {
  /** Set how far it is. */
  update(done: number): void;
  /** Draw the last state and end the line (always printed, terminal or not, unless quiet). */
  finish(suffix?: string): void;
}

const WIDTH = 30;

/**
 * A progress line for `label` (for example "submitted"), out of `total` when it is known.
 * `quiet` draws nothing at all.
 */
export function progressBar(label: string, total?: number, quiet = false): Progress {
  const stream = process.stderr;
  const live = !quiet && stream.isTTY === true;
  const started = performance.now();
  let done = 0;
  let drawnAt = 0;
  const line = () => {
    const seconds = (performance.now() - started) / 1000;
    const rate = seconds > 0 ? Math.round(done / seconds) : 0;
    const count = total === undefined ? `${done}` : `${done}/${total}`;
    const bar = total === undefined || total === 0
      ? ""
      : `[${"#".repeat(Math.round((WIDTH * Math.min(done, total)) / total)).padEnd(WIDTH, ".")}] `;
    return `${bar}${count} ${label} (${rate}/s)`;
  };
  return {
    update(value) {
      done = value;
      if (!live) return;
      const now = performance.now();
      if (now - drawnAt < 100) return;
      drawnAt = now;
      stream.write(`\r${line()}\x1b[K`);
    },
    finish(suffix = "") {
      if (quiet) return;
      stream.write(`${live ? "\r" : ""}${line()}${suffix}${live ? "\x1b[K" : ""}\n`);
    },
  };
}
