/**
 * The child side of the soak's process contract: how a controller, worker or producer process
 * gets its configuration and makes sure it never outlives the soak.
 *
 * - The configuration is one JSON object in the `SOAK_CHILD` environment variable.
 * - The orchestrator holds each child's stdin open and never writes to it. When the orchestrator
 *   dies, even by SIGKILL, the pipe closes and the child exits.
 * - Every child also exits by itself at the soak's `deadline` (epoch ms): a child that missed
 *   the end of its stdin, for example while it was stopped, still goes.
 * - `announce` prints one JSON line on stdout; the orchestrator reads it (a "ready" line).
 *
 * Runs on Deno and Bun (`node:process` only).
 *
 * @module
 */

import process from "node:process";

/** What every child's configuration carries. */
export interface ChildBase {
  /** Epoch ms after which the child exits by itself. */
  readonly deadline: number;
}

/** Read this child's configuration and tie its life to the orchestrator's. */
export function childConfig<T extends ChildBase>(): T {
  const raw = process.env.SOAK_CHILD;
  if (!raw) {
    console.error("soak: this module is started by tools/soak/main.ts (no SOAK_CHILD)");
    process.exit(2);
  }
  const config = JSON.parse(raw) as T;
  process.stdin.on("end", () => process.exit(70));
  process.stdin.on("error", () => process.exit(70));
  process.stdin.resume();
  setInterval(() => {
    if (Date.now() > config.deadline) process.exit(71);
  }, 1000);
  return config;
}

/** Tell the orchestrator something (one JSON line on stdout). */
export function announce(message: object): void {
  process.stdout.write(JSON.stringify(message) + "\n");
}
