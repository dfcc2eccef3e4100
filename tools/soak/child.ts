/**
 * One child process of the soak, seen from the orchestrator: spawned with its configuration in
 * `SOAK_CHILD`, its stdin held open as a lifeline (see `lifeline.ts`), its stdout read line by
 * line (the child's announcements), its stderr copied to a log file, and its exit awaited so that
 * it is always reaped.
 *
 * Signals go through `Deno.kill(pid, ...)`: `ChildProcess.kill` refuses any signal after the
 * first one, and a stopped process needs a SIGCONT after its SIGSTOP.
 *
 * @module
 */

import { join } from "node:path";
import type { Role, Runtime } from "./records.ts";

/** How a child ended. */
export interface ChildExit {
  readonly code: number | null;
  readonly signal: string | null;
}

/** What to start. */
export interface ChildSpec {
  readonly role: Role;
  /** "controller", "producer" or the worker's name. */
  readonly name: string;
  readonly runtime: Runtime;
  /** The executable (Deno or Bun). */
  readonly command: string;
  readonly args: readonly string[];
  /** The working directory (the repository root, where deno.json and node_modules are). */
  readonly cwd: string;
  /** The child's configuration, passed as JSON in `SOAK_CHILD`. */
  readonly config: object;
  /** The directory of stderr logs. */
  readonly logs: string;
  /** Called with each announcement (a JSON line on stdout). */
  readonly onMessage?: (message: Record<string, unknown>) => void;
}

/** A running (or finished) child process. */
export class Child {
  readonly pid: number;
  readonly exited: Promise<ChildExit>;
  /** Set once the process has exited and been reaped. */
  exit: ChildExit | undefined;
  /** True once the orchestrator decided to end it (its exit is then expected). */
  ending = false;
  readonly #process: Deno.ChildProcess;
  readonly #lifeline: WritableStreamDefaultWriter<Uint8Array>;

  constructor(readonly spec: ChildSpec) {
    this.#process = new Deno.Command(spec.command, {
      args: [...spec.args],
      cwd: spec.cwd,
      env: { SOAK_CHILD: JSON.stringify(spec.config) },
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    this.pid = this.#process.pid;
    this.#lifeline = this.#process.stdin.getWriter();
    this.exited = this.#process.status.then((status) => {
      this.exit = { code: status.signal ? null : status.code, signal: status.signal };
      this.#lifeline.close().catch(() => {});
      return this.exit;
    });
    void this.#readMessages();
    void this.#copyStderr();
  }

  get running(): boolean {
    return this.exit === undefined;
  }

  /** Send a signal; nothing happens if the process is gone. */
  signal(signal: Deno.Signal): void {
    if (!this.running) return;
    try {
      Deno.kill(this.pid, signal);
    } catch {
      // It exited meanwhile.
    }
  }

  /** SIGKILL, and resolve once reaped (bounded). */
  async kill(): Promise<ChildExit> {
    this.ending = true;
    this.signal("SIGKILL");
    return await bounded(this.exited, 10_000, `${this.spec.name} (pid ${this.pid}) to die`);
  }

  /** SIGTERM, then SIGKILL if it has not exited within `timeout` ms; resolves once reaped. */
  async stop(timeout: number): Promise<ChildExit> {
    this.ending = true;
    this.signal("SIGCONT");
    this.signal("SIGTERM");
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeout)));
    await Promise.race([this.exited, late]);
    clearTimeout(timer);
    return this.running ? await this.kill() : this.exit!;
  }

  async #readMessages(): Promise<void> {
    let pending = "";
    try {
      for await (const chunk of this.#process.stdout.pipeThrough(new TextDecoderStream())) {
        pending += chunk;
        const lines = pending.split("\n");
        pending = lines.pop()!;
        for (const line of lines) {
          if (!line.startsWith("{")) continue;
          try {
            this.spec.onMessage?.(JSON.parse(line));
          } catch {
            // Not an announcement.
          }
        }
      }
    } catch {
      // The process is gone.
    }
  }

  async #copyStderr(): Promise<void> {
    const path = join(this.spec.logs, `${this.spec.name}.${this.pid}.log`);
    try {
      const file = await Deno.open(path, { write: true, create: true, append: true });
      await this.#process.stderr.pipeTo(file.writable);
    } catch {
      // The process is gone.
    }
  }
}

/** `promise`, or an error naming `what` after `timeout` ms. */
export async function bounded<T>(promise: Promise<T>, timeout: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`timed out after ${timeout} ms waiting for ${what}`)),
          timeout,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}
