/**
 * Command lines of the bench entry scripts: each declares its flags once, with their help text,
 * and gets back the parsed values or a usage error. `--help` and `-h` print the usage; an unknown
 * flag, a bad value or a stray argument is an error that names it. Both happen before the
 * script does anything, so neither runs a benchmark nor writes a file.
 *
 * Parsing is `parseArgs` from `node:util` (strict mode), the same on Deno, Bun and Node.
 *
 * @module
 */

import process from "node:process";
import { parseArgs } from "node:util";
import { describeParseError } from "../../src/cli/args.ts";

/** One flag of a script: a switch (`--quick`) or a value (`--jobs=N`). */
export interface FlagSpec {
  readonly kind: "switch" | "value";
  /** The value's placeholder in the usage text, e.g. `N` or `a,b`. */
  readonly value?: string;
  readonly help: string;
  /** Accepted but left out of the usage text (a flag the script passes to its own child). */
  readonly internal?: boolean;
}

/** A script's command line: what it is, its flags, its positional arguments. */
export interface CommandSpec {
  /** How to run it, e.g. `deno run -A bench/run.ts [flags]`. */
  readonly usage: string;
  /** What it does, one or two sentences. */
  readonly summary: string;
  readonly flags: Readonly<Record<string, FlagSpec>>;
  /** Positional arguments, in order, with their help (none allowed when absent). */
  readonly positionals?: readonly { readonly name: string; readonly help: string }[];
  /** The last positional argument may repeat (`<file>...`). */
  readonly variadic?: boolean;
  /** More text for the end of the usage (lists of accepted values, examples). */
  readonly notes?: string;
}

/** What {@linkcode parseCommand} found. */
export interface ParsedCommand {
  readonly values: Readonly<Record<string, string | boolean | undefined>>;
  readonly positionals: readonly string[];
}

/** A command line the script cannot run with. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** The usage text of `spec`. */
export function usage(spec: CommandSpec): string {
  const flags = Object.entries(spec.flags).filter(([, flag]) => !flag.internal);
  const shown = flags.map(([name, flag]) =>
    flag.kind === "value" ? `--${name}=${flag.value ?? "VALUE"}` : `--${name}`
  );
  const width = Math.max(10, ...shown.map((text) => text.length));
  const lines = [`Usage: ${spec.usage}`, "", spec.summary, ""];
  if (spec.positionals?.length) {
    lines.push("Arguments:");
    for (const arg of spec.positionals) lines.push(`  ${arg.name.padEnd(width)}  ${arg.help}`);
    lines.push("");
  }
  lines.push("Flags:");
  flags.forEach(([, flag], i) => lines.push(`  ${shown[i].padEnd(width)}  ${flag.help}`));
  lines.push(`  ${"--help, -h".padEnd(width)}  print this help and exit`);
  if (spec.notes) lines.push("", spec.notes);
  return lines.join("\n");
}

/**
 * Parse `argv` against `spec`. Throws {@linkcode UsageError} naming the unknown flag, the switch
 * given a value, the value flag given none, or the argument too many. `help` is true for
 * `--help`/`-h` (then nothing else is checked).
 */
export function parseCommand(
  spec: CommandSpec,
  argv: readonly string[],
): ParsedCommand & { readonly help: boolean } {
  if (argv.includes("--help") || argv.includes("-h")) {
    return { values: {}, positionals: [], help: true };
  }
  const options: Record<string, { type: "boolean" | "string" }> = {};
  for (const [name, flag] of Object.entries(spec.flags)) {
    options[name] = { type: flag.kind === "switch" ? "boolean" : "string" };
  }
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options, strict: true, allowPositionals: true });
  } catch (error) {
    throw new UsageError(describeParseError(error, argv));
  }
  const allowed = spec.variadic ? Infinity : spec.positionals?.length ?? 0;
  if (parsed.positionals.length > allowed) {
    const extra = parsed.positionals[allowed];
    throw new UsageError(
      extra.startsWith("-")
        ? `unknown flag ${extra}`
        : `unexpected argument "${extra}" (this script takes ${
          allowed === 0 ? "no arguments" : `at most ${allowed}`
        })`,
    );
  }
  return { values: parsed.values, positionals: parsed.positionals, help: false };
}

/**
 * Parse the process's command line for an entry script: print the usage and exit 0 on
 * `--help`; print the error and exit 2 on a bad command line. Either way nothing else runs.
 */
export function commandLine(spec: CommandSpec, argv = process.argv.slice(2)): ParsedCommand {
  try {
    const parsed = parseCommand(spec, argv);
    if (parsed.help) {
      console.log(usage(spec));
      process.exit(0);
    }
    return parsed;
  } catch (error) {
    if (!(error instanceof UsageError)) throw error;
    console.error(`error: ${error.message}\n(run with --help for the usage)`);
    process.exit(2);
  }
}

/** A whole number from a flag or argument, at least `min`; a {@linkcode UsageError} if not. */
export function wholeNumber(
  name: string,
  text: string | boolean | undefined,
  fallback: number,
  min = 1,
): number {
  if (text === undefined) return fallback;
  const value = Number(text);
  if (typeof text !== "string" || !Number.isInteger(value) || value < min) {
    throw new UsageError(`${name} must be a whole number >= ${min}, got "${text}"`);
  }
  return value;
}

/** Like {@linkcode wholeNumber}, but prints the error and exits 2 (for entry scripts). */
export function numberArg(
  name: string,
  text: string | boolean | undefined,
  fallback: number,
  min = 1,
): number {
  try {
    return wholeNumber(name, text, fallback, min);
  } catch (error) {
    console.error(`error: ${(error as Error).message}\n(run with --help for the usage)`);
    process.exit(2);
  }
}
