/**
 * One attack in its own process, so a flood cannot slow the soak's bookkeeping down. Configured
 * by the `WORKPULL_ATTACKER` environment variable: `{ attack, port, secret, seconds, scale, bodyTimeout, headTimeout }`.
 * Prints one JSON line `{"ev":"done","counts":{...}}` when the attack's time is up.
 *
 * @module
 */

import process from "node:process";
import { ATTACKS, EXTRA_ATTACKS } from "./attacks.ts";

const { attack, port, secret, seconds, scale, bodyTimeout, headTimeout } = JSON.parse(
  process.env.WORKPULL_ATTACKER ?? "{}",
);
const run = ATTACKS[attack] ?? EXTRA_ATTACKS[attack];
if (!run) {
  console.error(`unknown attack ${attack}`);
  process.exit(2);
}
const counts = await run({
  port,
  secret,
  scale,
  bodyTimeout,
  headTimeout,
  until: Date.now() + seconds * 1000,
});
process.stdout.write(JSON.stringify({ ev: "done", counts }) + "\n");
process.exit(0);
