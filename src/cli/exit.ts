/**
 * How a `workpull` command ends: its exit codes, and the error that carries one. A command
 * throws a {@linkcode CliError} with the code that says what went wrong; `main.ts` prints its
 * message on standard error and exits with it.
 *
 * @module
 */

/** The exit codes of every command (`workpull --help` and the README list them). */
export const EXIT = {
  /** Done. */
  ok: 0,
  /**
   * The command failed: the server answered with an error, a job was not found, a worker was
   * refused for good, the demo lost a job.
   */
  failed: 1,
  /** The command line is wrong: an unknown command or flag, a bad value, a missing argument. */
  usage: 2,
  /** The server could not be reached, or refused the credentials (401). */
  unreachable: 3,
} as const;

/** The exit-code table for help texts. */
export const EXIT_CODES_HELP = [
  "Exit codes:",
  "  0    done",
  "  1    failed: an error answer from the server, a job not found, a worker refused for good,",
  "       a demo that lost jobs",
  "  2    usage: an unknown command or flag, a bad value, a missing argument",
  "  3    the server could not be reached, or refused the credentials (401)",
  "  130  stopped by SIGINT (Ctrl-C), 143 by SIGTERM: serve and worker drain first",
].join("\n");

/** A command failed with an exit code and a message for the user. */
export class CliError extends Error {
  override name = "CliError";

  constructor(message: string, readonly exitCode: number = EXIT.failed) {
    super(message);
  }
}
