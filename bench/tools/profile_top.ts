/**
 * Summarize `.cpuprofile` files: self time by function and by source file, the hottest first.
 *
 *   deno run -A bench/tools/profile_top.ts <file.cpuprofile>... [--top=30]
 *
 * @module
 */

import process from "node:process";
import { printTop } from "../lib/profile.ts";

const top = Number(process.argv.find((arg) => arg.startsWith("--top="))?.slice(6) ?? 30);
for (const path of process.argv.slice(2).filter((arg) => !arg.startsWith("--"))) {
  printTop(path, 15, top);
}
