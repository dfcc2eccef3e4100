/**
 * Where the benchmark runs: the runtime, the repository paths, the tool binaries, and a clock
 * that is comparable across processes on one machine.
 *
 * @module
 */

import { existsSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { type Runtime, runtime } from "../../src/cli/runtime.ts";

// The JavaScript runtime running this process, as the command detects it.
export { type Runtime, runtime };

/** How the pinned Node (22) runs TypeScript: type stripping plus transforms. */
export const NODE_TS_FLAGS: readonly string[] = ["--experimental-transform-types", "--no-warnings"];

/** The repository root, with a trailing slash. */
export const root: string = new URL("../../", import.meta.url).pathname;

/** A path inside the repository. */
export function repoPath(...parts: string[]): string {
  return join(root, ...parts);
}

/** The pinned Deno, Bun and Node binaries (node_modules/.bin), falling back to the running one. */
export function binary(name: Runtime): string {
  const pinned = repoPath("node_modules", ".bin", name);
  if (existsSync(pinned)) return pinned;
  if (name === runtime) return process.execPath;
  return name;
}

/** The command line that runs a TypeScript file on `target`. */
export function scriptCommand(
  target: Runtime,
  script: string,
  flags: readonly string[] = [],
): { command: string; args: string[] } {
  if (target === "node") {
    return { command: binary("node"), args: [...NODE_TS_FLAGS, ...flags, script] };
  }
  return target === "deno"
    ? { command: binary("deno"), args: ["run", "-A", "--quiet", ...flags, script] }
    : { command: binary("bun"), args: [...flags, script] };
}

/**
 * Milliseconds since the Unix epoch with sub-millisecond resolution:
 * `performance.timeOrigin + performance.now()`. Each process derives its time origin from the
 * system clock when it starts and counts monotonically from there, so values taken in
 * different processes on one machine are comparable (to well under a millisecond unless the
 * system clock is stepped during the run).
 */
export function now(): number {
  return performance.timeOrigin + performance.now();
}

/** "Deno", "Bun" or "Node", for reports. */
export function runtimeLabel(name: string): string {
  return name === "deno" ? "Deno" : name === "bun" ? "Bun" : "Node";
}

/** The runtime's version string, for example "Deno 2.9.6". */
export function runtimeVersion(): string {
  const versions = process.versions as Record<string, string | undefined>;
  if (runtime === "node") return `Node ${versions.node}`;
  return runtime === "deno"
    ? `Deno ${(globalThis as unknown as { Deno: { version: { deno: string } } }).Deno.version.deno}`
    : `Bun ${versions.bun}`;
}

/** Sleep. */
export function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

/** Resolve when `condition()` holds, polling every `every` ms; reject after `timeout` ms. */
export async function until(
  condition: () => boolean,
  what: string,
  timeout = 60_000,
  every = 1,
): Promise<void> {
  const deadline = Date.now() + timeout;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    await sleep(every);
  }
}
