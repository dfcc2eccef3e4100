/**
 * The `workpull` command: `serve`, `token`, `worker`, `submit`, `stats`, `jobs`, `dead-letters`
 * and `demo` (see `src/cli/`). In a checkout: `npm run cli -- <command>` (Deno, pinned by npm);
 * installed from npm: `workpull <command>` (Node, the built `dist/cli.js`).
 *
 * @module
 */

import process from "node:process";
import { main } from "./src/cli/main.ts";
import { endWithNpm } from "./src/cli/npm_parent.ts";

endWithNpm();
const code = await main(process.argv.slice(2));
// Let piped standard output drain before exiting (Node writes to pipes asynchronously).
process.stdout.write("", () => process.exit(code));
