/**
 * `deno task soak`: the chaos soak's command line (see `orchestrator.ts` for what it does and
 * `options.ts` for the flags).
 *
 * Progress goes to stderr; the verdict is one line on stdout (see `summary.ts`), and the exit
 * code is 0 when the soak passed, 1 when it failed, 2 on a bad flag, 130 when interrupted.
 * Ctrl-C or SIGTERM stops the soak: every process it started is killed and reaped first.
 *
 * @module
 */

import { existsSync } from "node:fs";
import { join } from "node:path";
import { parseOptions, USAGE } from "./options.ts";
import { runSoak, verifyKept } from "./orchestrator.ts";
import { summaryLine } from "./summary.ts";

async function main(args: string[]): Promise<number> {
  let options;
  try {
    options = parseOptions(args);
  } catch (error) {
    console.error(error instanceof Error ? error.message : String(error));
    console.error(USAGE);
    return 2;
  }
  if (options.help) {
    console.log(USAGE);
    return 0;
  }
  if (options.verify !== undefined) {
    if (!existsSync(join(options.verify, "settings.json"))) {
      console.error(`Cannot verify: ${options.verify} holds no soak (no settings.json)`);
      return 2;
    }
    const summary = await verifyKept(options.verify);
    console.log(summaryLine(summary));
    return summary.ok ? 0 : 1;
  }

  const abort = new AbortController();
  const onSignal = () => {
    console.error("soak: interrupted; stopping every process");
    abort.abort();
  };
  Deno.addSignalListener("SIGINT", onSignal);
  Deno.addSignalListener("SIGTERM", onSignal);
  const started = performance.now();
  try {
    const { summary, out } = await runSoak(options, abort.signal, (line) => console.error(line));
    console.log(summaryLine(summary));
    const minutes = ((performance.now() - started) / 60_000).toFixed(1);
    console.error(
      out === undefined
        ? `soak: done in ${minutes} min (journals removed; keep them with --keep or --out DIR)`
        : `soak: done in ${minutes} min; journals and summary.json in ${out}`,
    );
    return summary.ok ? 0 : 1;
  } catch (error) {
    if (abort.signal.aborted) return 130;
    const message = error instanceof Error ? error.message : String(error);
    // A refusal to start is explained by its message; anything else needs its stack.
    console.error(message.startsWith("Cannot start") ? message : error);
    return 1;
  } finally {
    Deno.removeSignalListener("SIGINT", onSignal);
    Deno.removeSignalListener("SIGTERM", onSignal);
  }
}

Deno.exit(await main(Deno.args));
