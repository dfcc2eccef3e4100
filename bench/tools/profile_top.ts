/**
 * Summarize `.cpuprofile` files: self time by function and by source file, the hottest first.
 *
 *   deno run -A bench/tools/profile_top.ts <file.cpuprofile>... [--top=30]
 *
 * @module
 */

import { commandLine, numberArg } from "../lib/cli.ts";
import { printTop } from "../lib/profile.ts";

const { values, positionals } = commandLine({
  usage: "deno run -A bench/tools/profile_top.ts <file.cpuprofile>... [--top=N]",
  summary: "Print self time by function and by source file of CPU profiles, the hottest first.",
  positionals: [{ name: "file.cpuprofile", help: "a CPU profile (.cpuprofile); several allowed" }],
  variadic: true,
  flags: { top: { kind: "value", value: "N", help: "functions to list (default 30)" } },
});
const top = numberArg("--top", values.top, 30);
for (const path of positionals) printTop(path, 15, top);
