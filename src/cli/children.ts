/**
 * Child processes of `workpull demo`: started with their standard error going to a file, their
 * standard output read line by line, killed with a real signal and reaped.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import { closeSync, openSync, readFileSync } from "node:fs";
import process from "node:process";
import type { Command } from "./runtime.ts";

/** A running child process. */
export class Child {
  readonly lines: string[] = [];
  /** Resolves with the exit code, or the signal's name, once the process ended. */
  readonly exited: Promise<number | string>;
  readonly #process: ChildProcess;
  readonly #stderrFile: string;
  #ended = false;
  #waiters: (() => void)[] = [];

  constructor(
    readonly name: string,
    command: Command,
    args: readonly string[],
    options: { env?: Record<string, string>; stderrFile: string; cwd?: string },
  ) {
    this.#stderrFile = options.stderrFile;
    const stderr = openSync(options.stderrFile, "a");
    try {
      this.#process = spawn(command.command, [...command.args, ...args], {
        cwd: options.cwd,
        env: { ...process.env, ...options.env },
        stdio: ["ignore", "pipe", stderr],
      });
    } finally {
      closeSync(stderr);
    }
    this.exited = new Promise((resolve) => {
      this.#process.on("exit", (code, signal) => {
        this.#ended = true;
        this.#notify();
        resolve(code ?? signal ?? "unknown");
      });
      this.#process.on("error", () => {
        this.#ended = true;
        this.#notify();
        resolve("failed to start");
      });
    });
    let pending = "";
    this.#process.stdout?.setEncoding("utf8").on("data", (chunk: string) => {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      this.lines.push(...lines);
      this.#notify();
    });
  }

  /** The process id. */
  get pid(): number | undefined {
    return this.#process.pid;
  }

  /** Whether the process has ended. */
  get ended(): boolean {
    return this.#ended;
  }

  /** What the process wrote on standard error (its last `max` characters). */
  stderr(max = 2000): string {
    try {
      return readFileSync(this.#stderrFile, "utf8").slice(-max);
    } catch {
      return "";
    }
  }

  /** The first stdout line matching `pattern`, waiting up to `timeout` ms for it. */
  async line(pattern: RegExp, timeout: number): Promise<RegExpMatchArray> {
    const deadline = performance.now() + timeout;
    for (;;) {
      for (const line of this.lines) {
        const match = line.match(pattern);
        if (match) return match;
      }
      if (this.#ended) {
        throw new Error(`${this.name} exited before printing ${pattern}\n${this.stderr()}`);
      }
      const left = deadline - performance.now();
      if (left <= 0) throw new Error(`${this.name} did not print ${pattern} within ${timeout} ms`);
      await new Promise<void>((resolve) => {
        const timer = setTimeout(resolve, Math.min(left, 100));
        this.#waiters.push(() => (clearTimeout(timer), resolve()));
      });
    }
  }

  /** Send `signal` and wait (bounded) until the process is reaped; SIGKILL if it lingers. */
  async stop(signal: "SIGKILL" | "SIGTERM" = "SIGTERM", grace = 15_000): Promise<void> {
    this.#signal(signal);
    let timer: ReturnType<typeof setTimeout> | undefined;
    const lingering = await Promise.race([
      this.exited.then(() => false),
      new Promise<boolean>((resolve) => (timer = setTimeout(() => resolve(true), grace))),
    ]);
    clearTimeout(timer);
    if (lingering) {
      this.#signal("SIGKILL");
      await this.exited;
    }
  }

  /** Through `process.kill`: Deno's `ChildProcess.kill` refuses a second signal. */
  #signal(signal: "SIGKILL" | "SIGTERM"): void {
    if (this.#ended || this.#process.pid === undefined) return;
    try {
      process.kill(this.#process.pid, signal);
    } catch {
      // Already gone.
    }
  }

  #notify(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const wake of waiters) wake();
  }
}
