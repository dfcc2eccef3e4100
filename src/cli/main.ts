/**
 * The `workpull` command: which subcommand runs, the top-level help, and how errors end the
 * process. Each subcommand lives in its own module (its flags, its help, its run function);
 * this one only dispatches. A usage error prints the message and a pointer to `--help`, exit 2;
 * a {@linkcode CliError} prints its message with its own code; anything else is a bug in the
 * making and prints its stack, exit 1.
 *
 * @module
 */

import { existsSync, readFileSync } from "node:fs";
import process from "node:process";
import { type CommandSpec, parseCommand, type ParsedArgs, usage, UsageError } from "./args.ts";
import { CliError, EXIT, EXIT_CODES_HELP } from "./exit.ts";
import { programName } from "./runtime.ts";
import { runServe, serveSpec } from "./serve.ts";
import { runToken, tokenSpec } from "./token.ts";
import { runWorker, workerSpec } from "./worker.ts";
import { runSubmit, submitSpec } from "./submit.ts";
import { runStats, statsSpec } from "./stats.ts";
import { jobsCancelSpec, jobsGetSpec, runJob } from "./jobs.ts";
import { deadDeleteSpec, deadListSpec, deadRetrySpec, runDeadLetters } from "./dead_letters.ts";
import { pauseSpec, resumeSpec, runPause } from "./pause.ts";
import { demoSpec, runDemo } from "./demo.ts";

/** A subcommand: its spec and what runs it. */
interface Command {
  readonly spec: CommandSpec;
  run(args: ParsedArgs): Promise<number>;
}

/** Every subcommand by the words that name it (`jobs get` is two). */
const COMMANDS: readonly Command[] = [
  { spec: serveSpec, run: runServe },
  { spec: tokenSpec, run: runToken },
  { spec: workerSpec, run: runWorker },
  { spec: submitSpec, run: runSubmit },
  { spec: statsSpec, run: runStats },
  { spec: jobsGetSpec, run: (args) => runJob(args, false) },
  { spec: jobsCancelSpec, run: (args) => runJob(args, true) },
  { spec: deadListSpec, run: (args) => runDeadLetters(args, "list") },
  { spec: deadRetrySpec, run: (args) => runDeadLetters(args, "retry") },
  { spec: deadDeleteSpec, run: (args) => runDeadLetters(args, "delete") },
  { spec: pauseSpec, run: (args) => runPause(args, true) },
  { spec: resumeSpec, run: (args) => runPause(args, false) },
  { spec: demoSpec, run: runDemo },
];

/** The top-level help: every subcommand with its summary, the exit codes. */
export function topHelp(program = programName()): string {
  const width = Math.max(...COMMANDS.map((command) => command.spec.name.length));
  return [
    `Usage: ${program} <command> [flags]`,
    "",
    "workpull: a reliable work-pulling job dispatcher. A server holds each flow's jobs; worker",
    "processes pull them at their own pace; clients submit jobs and read their state.",
    "",
    "Commands:",
    ...COMMANDS.map(({ spec }) => `  ${spec.name.padEnd(width)}  ${spec.summary}`),
    "",
    `Run ${program} <command> --help for a command's flags.`,
    `Start with: ${program} demo`,
    "",
    EXIT_CODES_HELP,
  ].join("\n");
}

/** Run the command line `argv` (without the program); resolves to the exit code. */
export async function main(argv: readonly string[]): Promise<number> {
  const program = programName();
  try {
    const [first, second] = argv;
    if (first === undefined || first === "--help" || first === "-h" || first === "help") {
      console.log(topHelp(program));
      return first === undefined ? EXIT.usage : EXIT.ok;
    }
    if (first === "--version" || first === "-V") {
      console.log(version());
      return EXIT.ok;
    }
    const group = COMMANDS.filter(({ spec }) => spec.name.split(" ")[0] === first);
    if (group.length === 0) {
      throw new UsageError(`unknown command "${first}"`);
    }
    const command = group.length === 1 && !group[0].spec.name.includes(" ")
      ? group[0]
      : group.find(({ spec }) => spec.name === `${first} ${second}`);
    if (!command) {
      const choices = group.map(({ spec }) => spec.name.split(" ")[1]).join(", ");
      if (second === undefined || second === "--help" || second === "-h") {
        console.log(
          [`Usage: ${program} ${first} <${choices.replaceAll(", ", "|")}> [flags]`, ""]
            .concat(group.map(({ spec }) => `  ${spec.name.padEnd(22)}  ${spec.summary}`))
            .join("\n"),
        );
        return second === undefined ? EXIT.usage : EXIT.ok;
      }
      throw new UsageError(`unknown command "${first} ${second}" (${first} takes ${choices})`);
    }
    const rest = argv.slice(command.spec.name.split(" ").length);
    const args = parseCommand(command.spec, rest);
    if (args.help) {
      console.log(`${usage(command.spec, program)}\n\n${EXIT_CODES_HELP}`);
      return EXIT.ok;
    }
    return await command.run(args);
  } catch (error) {
    if (error instanceof UsageError) {
      console.error(
        `error: ${error.message}\n(${program} ${argv[0] ?? ""} --help shows the usage)`,
      );
      return EXIT.usage;
    }
    if (error instanceof CliError) {
      console.error(`error: ${error.message}`);
      return error.exitCode;
    }
    console.error("error:", error);
    return EXIT.failed;
  }
}

/** The package's version, from the package.json beside the build or the sources. */
function version(): string {
  for (const path of ["../../package.json", "../../../package.json"]) {
    const file = new URL(path, import.meta.url);
    if (!existsSync(file)) continue;
    const manifest = JSON.parse(readFileSync(file, "utf8"));
    if (manifest.name === "workpull") return `workpull ${manifest.version} (${process.version})`;
  }
  return "workpull (version unknown)";
}
