/**
 * The command channel of a benchmark's child process: JSON lines on stdin, as `Child.command`
 * writes them (`lib/proc.ts`).
 *
 * @module
 */

import process from "node:process";

/** A command from the parent process, `{"cmd": …, …}`. */
export type Command = { readonly cmd?: unknown; readonly [key: string]: unknown };

/** Call `handler` with every command line that arrives on stdin, in order. */
export function onCommand(handler: (command: Command) => void | Promise<void>): void {
  let pending = "";
  process.stdin.setEncoding("utf8");
  process.stdin.on("data", (chunk: string) => {
    pending += chunk;
    const lines = pending.split("\n");
    pending = lines.pop()!;
    for (const line of lines) void handler(JSON.parse(line));
  });
}
