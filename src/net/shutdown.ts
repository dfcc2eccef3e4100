/**
 * Graceful shutdown on SIGTERM and SIGINT, where the runtime has signals (Deno, Node, Bun; not
 * browsers). Worker connections and servers register a drain; the first signal runs every
 * registered drain at once and then exits with the conventional code (128 + the signal number:
 * 143 for SIGTERM, 130 for SIGINT); a second signal exits at once.
 *
 * The runtime is detected through `globalThis`, without importing anything, so the browser
 * client can include this module. A process only listens while at least one drain is registered:
 * once every connection and server has closed, the signals behave as usual again.
 *
 * @module
 */

/** A drain, told which signal came: resolves when the registrant has finished its work and closed. */
export type Drain = (signal: ShutdownSignal) => Promise<void>;

interface SignalRuntime {
  listen(signal: ShutdownSignal, handler: () => void): void;
  unlisten(signal: ShutdownSignal, handler: () => void): void;
  exit(code: number): void;
}

/** The signals that drain. */
export type ShutdownSignal = "SIGTERM" | "SIGINT";

const SIGNALS: readonly ShutdownSignal[] = ["SIGTERM", "SIGINT"];
const EXIT_CODES: Record<ShutdownSignal, number> = { SIGTERM: 143, SIGINT: 130 };

const drains = new Set<Drain>();
const handlers = new Map<ShutdownSignal, () => void>();
let shuttingDown = false;

/** The signal API of the running runtime, or undefined where there is none. */
function signalRuntime(): SignalRuntime | undefined {
  const global = globalThis as {
    Deno?: {
      addSignalListener?(signal: string, handler: () => void): void;
      removeSignalListener?(signal: string, handler: () => void): void;
      exit?(code: number): void;
    };
    process?: {
      on?(signal: string, handler: () => void): void;
      off?(signal: string, handler: () => void): void;
      exit?(code: number): void;
    };
  };
  const deno = global.Deno;
  if (deno?.addSignalListener && deno.removeSignalListener && deno.exit) {
    return {
      listen: (signal, handler) => deno.addSignalListener!(signal, handler),
      unlisten: (signal, handler) => deno.removeSignalListener!(signal, handler),
      exit: (code) => deno.exit!(code),
    };
  }
  const node = global.process;
  if (node?.on && node.off && node.exit) {
    return {
      listen: (signal, handler) => void node.on!(signal, handler),
      unlisten: (signal, handler) => void node.off!(signal, handler),
      exit: (code) => node.exit!(code),
    };
  }
  return undefined;
}

/**
 * Run `drain` on SIGTERM or SIGINT, then exit. Returns a function that unregisters it (call it
 * when the registrant closes for another reason). Where the runtime has no signals, this does
 * nothing.
 *
 * @example
 * ```ts
 * import { drainOnShutdown } from "./shutdown.ts";
 *
 * const unregister = drainOnShutdown(async () => {
 *   // finish the running work, then close
 * });
 * unregister(); // closed for another reason: signals behave as usual again
 * ```
 */
export function drainOnShutdown(drain: Drain): () => void {
  const runtime = signalRuntime();
  if (!runtime) return () => {};
  drains.add(drain);
  if (handlers.size === 0) {
    for (const signal of SIGNALS) {
      const handler = () => void shutDown(runtime, signal);
      handlers.set(signal, handler);
      runtime.listen(signal, handler);
    }
  }
  return () => {
    drains.delete(drain);
    if (drains.size > 0 || shuttingDown) return;
    for (const [signal, handler] of handlers) runtime.unlisten(signal, handler);
    handlers.clear();
  };
}

async function shutDown(runtime: SignalRuntime, signal: ShutdownSignal): Promise<void> {
  if (shuttingDown) return runtime.exit(EXIT_CODES[signal]); // a second signal: stop now
  shuttingDown = true;
  await Promise.allSettled([...drains].map(async (drain) => await drain(signal)));
  runtime.exit(EXIT_CODES[signal]);
}
