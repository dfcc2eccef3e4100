/**
 * With `--instances`: after the drain, wait until every killed instance has been taken over.
 *
 * The verifier measures, for each instance killed, the time until a survivor took its lease over,
 * and fails the soak for a kill that never was. A survivor takes over only once the dead
 * instance's lease has run out (2–3 s in the short soaks), so a kill in the last seconds of the
 * load phase could meet the shutdown first: the drain ends as soon as every acknowledged job has
 * run, and a dead instance that held none does not hold it up. Waiting here (within the drain's
 * deadline) gives every kill its takeover; one that still has none when the time is up is the
 * verifier's failure, as before.
 *
 * It follows the orchestrator's journal for the kills and the controller journals for each
 * process's instance id and the takeovers, reading only what was appended since the last look.
 *
 * @module
 */

import { journals } from "./evidence.ts";
import { JournalTail } from "./journal.ts";
import type { SoakPaths } from "./records.ts";

/** How the wait went: kills still without a takeover when it ended, and how long it took. */
export interface TakeoverWait {
  readonly pending: number;
  readonly ms: number;
}

/** Wait until every `instance-kill` has a later takeover of that instance, at most `deadline` ms. */
export async function awaitTakeovers(
  paths: SoakPaths,
  deadline: number,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<TakeoverWait> {
  const started = performance.now();
  const soak = new JournalTail(paths.soak);
  const controllers = new Map<string, JournalTail>();
  const kills: { pid: number; t: number }[] = [];
  const instanceOf = new Map<number, string>();
  const takeovers: { of: string; t: number }[] = [];
  let reported = false;
  for (;;) {
    soak.read((r) => {
      if (r.ev === "fault" && r.kind === "instance-kill") {
        kills.push({ pid: r.pid as number, t: r.t as number });
      }
    });
    for (const file of journals(paths.controllers)) {
      let tail = controllers.get(file);
      if (!tail) controllers.set(file, tail = new JournalTail(file));
      tail.read((r) => {
        if (r.ev === "ready" && typeof r.instance === "string") {
          instanceOf.set(r.pid as number, r.instance);
        } else if (r.ev === "takeover") takeovers.push({ of: r.of as string, t: r.t as number });
      });
    }
    const pending = kills.filter((kill) => {
      const id = instanceOf.get(kill.pid);
      return !takeovers.some((takeover) => takeover.of === id && takeover.t >= kill.t);
    }).length;
    const ms = Math.round(performance.now() - started);
    if (pending === 0 || ms >= deadline || signal.aborted) return { pending, ms };
    if (!reported) {
      reported = true;
      log(`drain: waiting for ${pending} killed instances to be taken over`);
    }
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}
