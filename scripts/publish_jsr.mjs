#!/usr/bin/env node
// Publish to JSR with package.json's version (deno.json has none: one version for both
// registries). Arguments go on to `deno publish`, for example:
//   node scripts/publish_jsr.mjs --dry-run    (CI: checks what would ship, needs no network)
//   node scripts/publish_jsr.mjs              (publishes; needs jsr.io and a login or CI token)

import { spawnSync } from "node:child_process";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";
import { readJson } from "./manifest.mjs";

const root = join(fileURLToPath(import.meta.url), "..", "..");
const { version } = readJson(join(root, "package.json"));
const deno = join(root, "node_modules", ".bin", "deno");
const result = spawnSync(
  deno,
  ["publish", "--set-version", version, ...process.argv.slice(2)],
  { cwd: root, stdio: "inherit" },
);
process.exit(result.status ?? 1);
