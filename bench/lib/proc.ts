/**
 * Child processes for the benchmarks: spawned with a line-oriented JSON report channel on
 * stdout, always killed and reaped (a registry kills whatever is left when the run ends or is
 * interrupted), and every wait bounded in time.
 *
 * @module
 */

import { type ChildProcess, spawn } from "node:child_process";
import process from "node:process";

/** A JSON report line from a child (`{"ev": ..., ...}`). */
export type Report = { readonly ev: string; readonly [key: string]: unknown };

const live = new Set<Child>();

/** A spawned process with its reports. */
export class Child {
  readonly name: string;
  readonly process: ChildProcess;
  readonly pid: number;
  /** Resolves when the process has exited and been reaped. */
  readonly exited: Promise<{ code: number | null; signal: string | null }>;
  readonly #listeners = new Set<(report: Report) => void>();
  readonly #stderr: string[] = [];
  #exit: { code: number | null; signal: string | null } | undefined;

  constructor(name: string, child: ChildProcess) {
    this.name = name;
    this.process = child;
    if (child.pid === undefined) throw new Error(`cannot spawn ${name}`);
    this.pid = child.pid;
    live.add(this);
    this.exited = new Promise((resolve) => {
      child.on("exit", (code, signal) => {
        this.#exit = { code, signal };
        live.delete(this);
        resolve(this.#exit);
      });
    });
    let pending = "";
    child.stdout?.setEncoding("utf8");
    child.stdout?.on("data", (chunk: string) => {
      pending += chunk;
      let newline = pending.indexOf("\n");
      while (newline >= 0) {
        const line = pending.slice(0, newline);
        pending = pending.slice(newline + 1);
        newline = pending.indexOf("\n");
        if (!line.startsWith("{")) continue;
        let report: Report;
        try {
          report = JSON.parse(line);
        } catch {
          continue;
        }
        for (const listener of [...this.#listeners]) listener(report);
      }
    });
    child.stderr?.setEncoding("utf8");
    child.stderr?.on("data", (chunk: string) => {
      this.#stderr.push(chunk);
      if (this.#stderr.length > 50) this.#stderr.shift();
      if (process.env.WORKPULL_BENCH_VERBOSE) process.stderr.write(`[${name}] ${chunk}`);
    });
  }

  /** Whether the process is still running. */
  get running(): boolean {
    return this.#exit === undefined;
  }

  /** The last lines the process wrote to stderr (for error messages). */
  get stderrTail(): string {
    return this.#stderr.join("").split("\n").slice(-12).join("\n");
  }

  /** Call `listener` with every report. Returns a function that removes it. */
  onReport(listener: (report: Report) => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  /** The first report that satisfies `match`, within `timeout` ms. */
  next(match: (report: Report) => boolean, what: string, timeout = 30_000): Promise<Report> {
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        off();
        reject(new Error(`${this.name}: no ${what} within ${timeout} ms\n${this.stderrTail}`));
      }, timeout);
      const off = this.onReport((report) => {
        if (!match(report)) return;
        clearTimeout(timer);
        off();
        resolve(report);
      });
      this.exited.then(({ code, signal }) => {
        if (!live.has(this)) {
          clearTimeout(timer);
          off();
          reject(
            new Error(
              `${this.name} exited (${signal ?? code}) before ${what}\n${this.stderrTail}`,
            ),
          );
        }
      });
    });
  }

  /** Write one JSON command line to the process's stdin. */
  command(message: Record<string, unknown>): void {
    this.process.stdin?.write(`${JSON.stringify(message)}\n`);
  }

  /** Send a signal (no-op once exited). */
  signal(signal: "SIGKILL" | "SIGSTOP" | "SIGCONT" | "SIGTERM"): void {
    if (!this.running) return;
    try {
      process.kill(this.pid, signal);
    } catch {
      // Already gone.
    }
  }

  /** SIGTERM, then SIGKILL if it has not exited after `grace` ms; waits until it is reaped. */
  async stop(grace = 5_000): Promise<void> {
    if (!this.running) return;
    this.signal("SIGTERM");
    const exited = await Promise.race([
      this.exited.then(() => true),
      new Promise<false>((resolve) => setTimeout(() => resolve(false), grace)),
    ]);
    if (!exited) await this.kill();
  }

  /** SIGKILL the process and wait until it is reaped (bounded). */
  async kill(): Promise<void> {
    if (!this.running) return;
    this.signal("SIGKILL");
    await withTimeout(this.exited, 10_000, `${this.name} to exit after SIGKILL`);
  }
}

/** Spawn `command`; its stdout carries JSON report lines, stdin takes JSON command lines. */
export function spawnChild(
  name: string,
  command: string,
  args: readonly string[],
  options: { env?: Record<string, string>; cwd?: string; stdin?: boolean } = {},
): Child {
  const child = spawn(command, [...args], {
    cwd: options.cwd,
    env: { ...process.env, ...options.env },
    stdio: [options.stdin ? "pipe" : "ignore", "pipe", "pipe"],
  });
  return new Child(name, child);
}

/** Run a command to its end, collecting its output; killed after `timeout` ms. */
export async function runToEnd(
  command: string,
  args: readonly string[],
  options: { env?: Record<string, string>; cwd?: string; timeout: number },
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawn(command, [...args], {
    cwd: options.cwd,
    env: { ...process.env, ...options.env },
    stdio: ["ignore", "pipe", "pipe"],
  });
  const wrapped = new Child(command, child);
  let stdout = "";
  let stderr = "";
  child.stdout?.on("data", (chunk: string) => (stdout += chunk));
  child.stderr?.on("data", (chunk: string) => (stderr += chunk));
  const timer = setTimeout(() => wrapped.signal("SIGKILL"), options.timeout);
  const { code, signal } = await wrapped.exited;
  clearTimeout(timer);
  if (signal === "SIGKILL") stderr += `\n(killed after ${options.timeout} ms)`;
  return { code, stdout, stderr };
}

/**
 * Run a command with its output passed through to this process's stdout and stderr; killed
 * after `timeout` ms. Resolves with its exit code.
 */
export async function runInherit(
  command: string,
  args: readonly string[],
  options: { env?: Record<string, string>; cwd?: string; timeout: number },
): Promise<number | null> {
  const child = new Child(
    command,
    spawn(command, [...args], {
      cwd: options.cwd,
      env: { ...process.env, ...options.env },
      stdio: ["ignore", "inherit", "inherit"],
    }),
  );
  const timer = setTimeout(() => child.signal("SIGKILL"), options.timeout);
  const { code } = await child.exited;
  clearTimeout(timer);
  return code;
}

/** Kill and reap every child still running. */
export async function killAll(): Promise<void> {
  await Promise.all([...live].map((child) => child.kill().catch(() => {})));
}

/** How many children are running (the run checks it is 0 at the end). */
export function liveChildren(): number {
  return live.size;
}

/** `promise`, or a rejection after `ms`. */
export function withTimeout<T>(promise: Promise<T>, ms: number, what: string): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  return Promise.race([
    promise,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`timed out after ${ms} ms: ${what}`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}
