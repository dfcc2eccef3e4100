/**
 * What the `workpull` command needs from the runtime running it (Deno in a checkout through
 * `npm run cli`, Node once installed from npm, or Bun): serving, a Deno KV file, a `WebSocket`,
 * and how to start this command again as another process (the demo's server and workers).
 *
 * Runtime modules are imported only on their runtime (`deno.ts` reads `Deno` as it runs).
 * A KV file is `Deno.openKv` on Deno and npm `@deno/kv` (the same SQLite engine) on Node and
 * Bun; `@deno/kv` is not a dependency of the npm package (it carries a native library), so on
 * Node a KV file needs `npm install @deno/kv`, and without it `serve` says so and `--memory`
 * works.
 *
 * @module
 */

import { accessSync, constants } from "node:fs";
import { delimiter, dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import type { KvLike } from "../queue/deno_kv/port.ts";
import type { ServeOptions, WorkpullServer } from "../net/serve.ts";
import type { WebSocketConstructor } from "../net/client.ts";
import { CliError, EXIT } from "./exit.ts";

/** A runtime the command runs on. */
export type Runtime = "deno" | "bun" | "node";

/** The runtime running this process. */
export const runtime: Runtime = "Deno" in globalThis
  ? "deno"
  : "Bun" in globalThis
  ? "bun"
  : "node";

/** The version of npm `@deno/kv` the repository pins (what to install on Node). */
export const DENO_KV_VERSION = "0.14.0";

/** How the user runs this command, for hints: `npm run cli --` in a checkout, else `workpull`. */
export function programName(): string {
  const script = process.env.npm_lifecycle_event;
  return script === "cli" || script === "demo" ? "npm run cli --" : "workpull";
}

/** This command's entry file: `cli.ts` in a checkout, `dist/cli.js` in the npm package. */
export function cliFile(): string {
  const source = import.meta.url.endsWith(".ts");
  return fileURLToPath(new URL(source ? "../../cli.ts" : "../../cli.js", import.meta.url));
}

/** Whether this command runs from TypeScript sources (a checkout) rather than a build. */
export const fromSources: boolean = import.meta.url.endsWith(".ts");

/** A command to start a process: the executable and its leading arguments. */
export interface Command {
  readonly command: string;
  readonly args: readonly string[];
}

/**
 * How to run this command on `target` as a new process, or undefined when that runtime is not
 * found. The runtime running now is itself; another is looked up in `node_modules/.bin` of the
 * checkout (where `npm ci` puts the pinned Deno, Bun and Node 22) and then on `PATH`.
 */
export function commandOn(target: Runtime): Command | undefined {
  const file = cliFile();
  const executable = target === runtime ? process.execPath : findExecutable(target);
  if (executable === undefined) return undefined;
  switch (target) {
    case "deno":
      // Deno runs the sources; a build imports bare packages that only Node and Bun resolve.
      if (!fromSources) return undefined;
      return { command: executable, args: ["run", "-A", "--unstable-kv", "--quiet", file] };
    case "bun":
      return { command: executable, args: [file] };
    case "node":
      // The sources need Node 22's type stripping; the build runs on any Node from 20.
      return {
        command: executable,
        args: fromSources ? ["--experimental-transform-types", "--no-warnings", file] : [file],
      };
  }
}

/** An executable named `name` in the checkout's `node_modules/.bin` or on `PATH`. */
export function findExecutable(name: string): string | undefined {
  const root = dirname(cliFile());
  const dirs = [
    join(root, "node_modules", ".bin"),
    join(root, "..", "node_modules", ".bin"),
    ...(process.env.PATH ?? "").split(delimiter).filter((dir) => dir !== ""),
  ];
  for (const dir of dirs) {
    const path = join(dir, name);
    try {
      accessSync(path, constants.X_OK);
      return path;
    } catch {
      // Not here.
    }
  }
  return undefined;
}

/** A Deno KV handle that can be closed. */
export type KvFile = KvLike & { close(): void };

/** Open a Deno KV file with the running runtime's client. */
export async function openKvFile(path: string): Promise<KvFile> {
  if (runtime === "deno") {
    const deno = (globalThis as { Deno?: { openKv?: (path: string) => Promise<unknown> } }).Deno;
    if (typeof deno?.openKv !== "function") {
      throw new CliError(
        "Deno.openKv is missing: run Deno with --unstable-kv (npm run cli does), or serve --memory",
      );
    }
    return await deno.openKv(path) as KvFile;
  }
  let client;
  try {
    client = await import("@deno/kv");
  } catch {
    throw new CliError(
      `a KV file on ${runtime} needs npm @deno/kv: npm install @deno/kv@${DENO_KV_VERSION} ` +
        "(or serve --memory, which keeps jobs in memory only)",
    );
  }
  const { bytesOnlyKvCodecs } = await import("../../deno_kv.ts");
  return await client.openKv(path, { ...bytesOnlyKvCodecs }) as unknown as KvFile;
}

/** Serve with the running runtime's adapter. */
export async function serveHere(options: ServeOptions): Promise<WorkpullServer> {
  if (runtime === "deno") {
    const { serveDeno } = await import("../net/deno.ts");
    return await serveDeno(options);
  }
  if (runtime === "bun") {
    const { serveBun } = await import("../net/bun.ts");
    return serveBun(options);
  }
  const { serveNode } = await import("../net/node.ts");
  return await serveNode(options);
}

/** The `WebSocket` for worker connections: the global one, or `ws`'s on Node before 22. */
export async function webSocketHere(): Promise<WebSocketConstructor> {
  if (typeof globalThis.WebSocket === "function") return globalThis.WebSocket;
  try {
    const { WebSocket } = await import("ws");
    return WebSocket as unknown as WebSocketConstructor;
  } catch {
    throw new CliError(
      `no WebSocket on ${runtime} ${process.version}: use Node 22 or later, or npm install ws`,
      EXIT.failed,
    );
  }
}
