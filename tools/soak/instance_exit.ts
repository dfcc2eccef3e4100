/**
 * The exit code of a soak instance that another instance took over (it was SIGSTOPped past its
 * lease and found itself fenced at its SIGCONT): the orchestrator expects it after an instance
 * stop and restarts the instance, as a supervisor would.
 *
 * @module
 */

/** The exit code of an instance that another instance took over. */
export const FENCED_EXIT = 4;
