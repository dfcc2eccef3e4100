/**
 * The command line of one `workpull` command: its flags declared once, with their help text and
 * the kind of value each takes, parsed by `parseArgs` from `node:util` (strict; the same on
 * Deno, Bun and Node) and then checked. An unknown flag, a switch given a value, a value flag
 * given none, a value out of range or a stray argument is a {@linkcode UsageError} that names
 * it; `--help` (or `-h`) short-circuits everything else.
 *
 * @module
 */

import { parseArgs } from "node:util";

/** What a flag takes. */
export type FlagKind = "switch" | "string" | "integer" | "duration" | "choice";

/** One flag of a command. */
export interface FlagSpec {
  readonly kind: FlagKind;
  readonly help: string;
  /** The value's placeholder in the usage text, e.g. `N` or `NAME`. */
  readonly value?: string;
  /** The flag may be given several times (its values are a list). */
  readonly repeatable?: boolean;
  /** Integers and durations: the smallest and largest value accepted. */
  readonly min?: number;
  readonly max?: number;
  /** Choices: the values accepted. */
  readonly choices?: readonly string[];
}

/** A positional argument. */
export interface PositionalSpec {
  readonly name: string;
  readonly help: string;
  /** Absent is a usage error. */
  readonly required?: boolean;
  /** It may repeat (only the last one). */
  readonly variadic?: boolean;
}

/** A command: its usage line, what it does, its flags and arguments. */
export interface CommandSpec {
  /** The command's name as typed, e.g. `serve` or `jobs get`. */
  readonly name: string;
  /** What it does, one line (the top-level help lists it). */
  readonly summary: string;
  /** More about it: paragraphs for its `--help`. */
  readonly description?: string;
  readonly flags: Readonly<Record<string, FlagSpec>>;
  readonly positionals?: readonly PositionalSpec[];
  /** Examples or notes printed at the end of its `--help`. */
  readonly notes?: string;
}

/** A command line the command cannot run with. */
export class UsageError extends Error {
  override name = "UsageError";
}

/** The parsed command line: checked values by flag name, and the positional arguments. */
export class ParsedArgs {
  constructor(
    readonly values: Readonly<Record<string, string | number | boolean | string[] | undefined>>,
    readonly positionals: readonly string[],
  ) {}

  /** A string flag's value, or `fallback`. */
  string(name: string, fallback: string): string;
  string(name: string): string | undefined;
  string(name: string, fallback?: string): string | undefined {
    const value = this.values[name];
    return typeof value === "string" ? value : fallback;
  }

  /** An integer or duration flag's value (durations in ms), or `fallback`. */
  number(name: string, fallback: number): number;
  number(name: string): number | undefined;
  number(name: string, fallback?: number): number | undefined {
    const value = this.values[name];
    return typeof value === "number" ? value : fallback;
  }

  /** Whether a switch was given. */
  has(name: string): boolean {
    return this.values[name] === true;
  }

  /** A repeatable flag's values, in order. */
  list(name: string): string[] {
    const value = this.values[name];
    return Array.isArray(value) ? value : typeof value === "string" ? [value] : [];
  }
}

const UNITS: Readonly<Record<string, number>> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
};

/**
 * A duration in ms: a whole number with a unit (`250ms`, `30s`, `5m`, `12h`, `1d`), or a bare
 * whole number of ms. Undefined when `text` is none of these.
 */
export function parseDuration(text: string): number | undefined {
  const match = /^(\d+)(ms|s|m|h|d)?$/.exec(text.trim());
  if (!match) return undefined;
  const value = Number(match[1]) * UNITS[match[2] ?? "ms"];
  return Number.isSafeInteger(value) ? value : undefined;
}

/** Parse `argv` against `spec` (see the module documentation). */
export function parseCommand(
  spec: CommandSpec,
  argv: readonly string[],
): ParsedArgs & { readonly help: boolean } {
  const help = argv.includes("--help") || argv.includes("-h");
  if (help) return Object.assign(new ParsedArgs({}, []), { help });
  const options: Record<string, { type: "boolean" | "string"; multiple?: boolean }> = {};
  for (const [name, flag] of Object.entries(spec.flags)) {
    options[name] = {
      type: flag.kind === "switch" ? "boolean" : "string",
      ...(flag.repeatable ? { multiple: true } : {}),
    };
  }
  let parsed;
  try {
    parsed = parseArgs({ args: [...argv], options, strict: true, allowPositionals: true });
  } catch (error) {
    throw new UsageError(describeParseError(error, argv));
  }
  const values: Record<string, string | number | boolean | string[] | undefined> = {};
  for (const [name, raw] of Object.entries(parsed.values)) {
    const flag = spec.flags[name];
    if (Array.isArray(raw)) {
      values[name] = raw.map((item) => String(check(name, flag, String(item))));
    } else if (typeof raw === "boolean") values[name] = raw;
    else if (raw !== undefined) {
      if (!flag.repeatable && argv.filter((arg) => isFlag(arg, name)).length > 1) {
        throw new UsageError(`--${name} was given more than once`);
      }
      values[name] = check(name, flag, raw);
    }
  }
  const declared = spec.positionals ?? [];
  const variadic = declared.at(-1)?.variadic === true;
  const positionals = parsed.positionals;
  if (!variadic && positionals.length > declared.length) {
    const extra = positionals[declared.length];
    throw new UsageError(
      `unexpected argument "${extra}" (${spec.name} takes ${
        declared.length === 0 ? "no arguments" : declared.map((p) => p.name).join(" ")
      })`,
    );
  }
  declared.forEach((positional, i) => {
    if (positional.required && positionals[i] === undefined) {
      throw new UsageError(`${positional.name} is missing`);
    }
  });
  return Object.assign(new ParsedArgs(values, positionals), { help: false });
}

function isFlag(arg: string, name: string): boolean {
  return arg === `--${name}` || arg.startsWith(`--${name}=`);
}

/** A flag's text checked and converted: an integer, a duration in ms, a choice, a string. */
function check(name: string, flag: FlagSpec, text: string): string | number {
  const min = flag.min ?? 0;
  const max = flag.max ?? Number.MAX_SAFE_INTEGER;
  const range = () =>
    max === Number.MAX_SAFE_INTEGER ? `at least ${min}` : `between ${min} and ${max}`;
  switch (flag.kind) {
    case "integer": {
      const value = /^-?\d+$/.test(text.trim()) ? Number(text) : NaN;
      if (!Number.isSafeInteger(value) || value < min || value > max) {
        throw new UsageError(`--${name} must be a whole number ${range()}, got "${text}"`);
      }
      return value;
    }
    case "duration": {
      const value = parseDuration(text);
      if (value === undefined || value < min || value > max) {
        throw new UsageError(
          `--${name} must be a duration (250ms, 30s, 5m, 12h, 1d) ${
            max === Number.MAX_SAFE_INTEGER ? `of at least ${min} ms` : `of ${min}..${max} ms`
          }, got "${text}"`,
        );
      }
      return value;
    }
    case "choice":
      if (!flag.choices?.includes(text)) {
        throw new UsageError(
          `--${name} must be one of ${flag.choices?.join(", ")}, got "${text}"`,
        );
      }
      return text;
    default:
      if (text.trim() === "") throw new UsageError(`--${name} must not be empty`);
      return text;
  }
}

/**
 * `parseArgs`' error message, reduced to the flag it is about (the benchmark scripts' command
 * lines say it the same way).
 *
 * @example
 * ```ts
 * import { parseArgs } from "node:util";
 * import { describeParseError } from "./args.ts";
 * try {
 *   parseArgs({ args: ["--nope"], options: {} });
 * } catch (error) {
 *   console.assert(describeParseError(error, ["--nope"]) === "unknown flag --nope");
 * }
 * ```
 */
export function describeParseError(error: unknown, argv: readonly string[]): string {
  const message = error instanceof Error ? error.message : String(error);
  const named = message.match(/option '([^']+)'/i)?.[1];
  const flag = named?.split(/[ ,]/)[0] ?? argv.find((arg) => message.includes(arg));
  if (/unknown option/i.test(message)) return `unknown flag ${flag ?? message}`;
  if (/does not take an argument/i.test(message)) return `${flag} is a switch: it takes no value`;
  if (/argument missing/i.test(message)) return `${flag} needs a value (${flag} VALUE)`;
  if (/ambiguous/i.test(message)) {
    return `${flag}'s value starts with "-": write it as ${flag}=VALUE`;
  }
  return message;
}

/** The `--help` text of `spec`, run as `program`. */
export function usage(spec: CommandSpec, program: string): string {
  const args = (spec.positionals ?? []).map((p) => {
    const name = p.variadic ? `${p.name}...` : p.name;
    return p.required ? name : `[${name}]`;
  });
  const lines = [`Usage: ${program} ${spec.name} [flags]${args.map((a) => ` ${a}`).join("")}`];
  lines.push("", spec.summary);
  if (spec.description) lines.push("", spec.description);
  const positionals = spec.positionals ?? [];
  const flags = Object.entries(spec.flags);
  const shown = flags.map(([name, flag]) =>
    flag.kind === "switch" ? `--${name}` : `--${name} ${flag.value ?? "VALUE"}`
  );
  const width = Math.max(
    12,
    ...shown.map((text) => text.length),
    ...positionals.map((p) => p.name.length),
  );
  if (positionals.length > 0) {
    lines.push("", "Arguments:");
    for (const p of positionals) lines.push(`  ${p.name.padEnd(width)}  ${p.help}`);
  }
  lines.push("", "Flags:");
  flags.forEach(([, flag], i) => {
    const repeat = flag.repeatable ? " (repeatable)" : "";
    lines.push(`  ${shown[i].padEnd(width)}  ${flag.help}${repeat}`);
  });
  lines.push(`  ${"--help, -h".padEnd(width)}  print this help and exit`);
  if (spec.notes) lines.push("", spec.notes);
  return lines.join("\n");
}
