/**
 * A NATS server for the JetStream peer: Debian's `nats-server` (apt package `nats-server`),
 * started by the benchmark on 127.0.0.1 and a free port with JetStream enabled and its store
 * in a temporary directory, and stopped (SIGTERM, then SIGKILL) by PID when the scenario ends.
 * Nothing else is configured: the server's defaults are what a user gets.
 *
 * @module
 */

import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { type Child, spawnChild, withTimeout } from "./proc.ts";
import { sleep } from "./runtime.ts";
import { freePort } from "../scenarios/peer.ts";

/** A running nats-server. */
export interface NatsServer {
  readonly port: number;
  /** "v2.9.10". */
  readonly version: string;
  readonly child: Child;
  stop(): Promise<void>;
}

/**
 * The `nats-server` binary: on the PATH, or where Debian installs it (`/usr/sbin`, which is not
 * on an ordinary user's PATH). Undefined when it is not installed.
 */
export function natsServerBinary(): string | undefined {
  try {
    const found = execFileSync("which", ["nats-server"], { encoding: "utf8" }).trim();
    if (found) return found;
  } catch {
    // not on the PATH
  }
  return ["/usr/sbin/nats-server", "/usr/bin/nats-server"].find((path) => existsSync(path));
}

/** Start `binary` with JetStream, its store in `storeDir`; resolves once it is ready. */
export async function startNatsServer(binary: string, storeDir: string): Promise<NatsServer> {
  const version = execFileSync(binary, ["--version"], { encoding: "utf8" }).trim()
    .replace(/^nats-server:\s*/, "");
  for (let attempt = 0; attempt < 3; attempt++) {
    const port = await freePort();
    const child = spawnChild("nats-server", binary, [
      "--addr",
      "127.0.0.1",
      "--port",
      String(port),
      "--jetstream",
      "--store_dir",
      storeDir,
    ]);
    // It logs to stderr; "Server is ready" comes once the client port listens.
    let ready = false;
    child.process.stderr?.on("data", (chunk: string) => {
      if (String(chunk).includes("Server is ready")) ready = true;
    });
    const deadline = Date.now() + 10_000;
    while (!ready && child.running && Date.now() < deadline) await sleep(10);
    if (ready) {
      return {
        port,
        version,
        child,
        stop: () => withTimeout(child.stop(), 15_000, "nats-server to stop"),
      };
    }
    await child.kill();
  }
  throw new Error("nats-server did not start");
}
