/**
 * The core is runtime-agnostic: no Deno, Bun or Node APIs and no Hono. `deno task check` also
 * type-checks mod.ts against a lib without the Deno namespace (deno.core.json); this test
 * catches what a type check cannot (a `node:` import resolves on Deno).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join } from "node:path";

const CORE_DIRS = [
  "src/core",
  "src/controller",
  "src/producer",
  "src/worker",
  "src/protocol",
  "src/transport",
  "src/lifecycle",
];
const CORE_FILES = [
  "mod.ts",
  "src/queue/work_queue.ts",
  "src/queue/memory_queue.ts",
  "src/backlog/job_store.ts",
  "src/backlog/memory_job_store.ts",
  "src/backlog/backlog_producer.ts",
  "src/backlog/job_queue.ts",
  "src/backlog/store_settings.ts",
];
const root = new URL("..", import.meta.url).pathname;

function files(dir: string): string[] {
  return readdirSync(join(root, dir)).flatMap((name) => {
    const path = join(dir, name);
    return statSync(join(root, path)).isDirectory()
      ? files(path)
      : path.endsWith(".ts")
      ? [path]
      : [];
  });
}

test("the core imports nothing runtime-specific", () => {
  const paths = [...CORE_DIRS.flatMap(files), ...CORE_FILES];
  assert.ok(paths.length > 15);
  const offences: string[] = [];
  for (const path of paths) {
    const source = readFileSync(join(root, path), "utf8");
    const imports = [...source.matchAll(/(?:from|import)\s*\(?\s*["']([^"']+)["']/g)].map((m) =>
      m[1]
    );
    for (const specifier of imports) {
      if (!specifier.startsWith(".") && specifier !== "valibot") {
        offences.push(`${path} imports ${specifier}`);
      }
    }
    // Code, not comments: strip comments before looking for runtime globals.
    const code = source.replace(/\/\*[\s\S]*?\*\//g, "").replace(/\/\/.*$/gm, "")
      .replace(/"[^"\n]*"/g, '""');
    for (const global of [/\bDeno\./, /\bBun\./, /\bprocess\./, /\brequire\(/]) {
      if (global.test(code)) offences.push(`${path} uses ${global.source}`);
    }
  }
  assert.deepEqual(offences, []);
});
