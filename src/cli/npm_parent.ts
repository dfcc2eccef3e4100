/**
 * A command started by `npm run cli` (or `npm run demo`) ends with npm. The scripts `exec` the
 * runtime, so npm's SIGTERM and SIGINT reach the command itself and it drains as usual; but npm
 * killed with SIGKILL, or its terminal gone, forwards nothing, and a server left behind would go
 * on listening with nobody to stop it. So under those scripts the command watches its parent:
 * once it has been re-parented (npm is gone), it sends itself SIGTERM, which drains and exits as a
 * signal from npm would have.
 *
 * Only under npm: a command started by a shell with `nohup … &` is re-parented on purpose.
 *
 * @module
 */

import process from "node:process";

/** How often the parent is checked, ms. */
const CHECK_INTERVAL = 1000;

/** Under `npm run cli` or `npm run demo`, stop (SIGTERM) once npm is gone. */
export function endWithNpm(): void {
  const script = process.env.npm_lifecycle_event;
  if (script !== "cli" && script !== "demo") return;
  const parent = process.ppid;
  const timer = setInterval(() => {
    if (process.ppid === parent) return;
    clearInterval(timer);
    process.kill(process.pid, "SIGTERM");
  }, CHECK_INTERVAL);
  // The check must not keep a finished command alive.
  const deno = (globalThis as { Deno?: { unrefTimer?(id: number): void } }).Deno;
  if (typeof timer === "number") deno?.unrefTimer?.(timer);
  else (timer as { unref?: () => void }).unref?.();
}
