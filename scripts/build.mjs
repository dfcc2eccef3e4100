#!/usr/bin/env node
// Build the npm package into dist/: ESM JavaScript and .d.ts declarations, one file per source
// module (dist/mod.js, dist/src/net/node.js, ...), so stack traces and declarations read like the
// source. Usage: node scripts/build.mjs (npm runs it before `npm pack` and `npm publish`).
//
// The entry points are deno.json's `exports` (the JSR package), so both registries ship the same
// modules; package.json's `exports` must map the same subpaths to dist/ (checked by
// scripts/manifest.mjs and its test). When cli.ts exists it is built too, as dist/cli.js with
// package.json's `bin` pointing at it: this script adds (or removes) that `bin` entry itself,
// and says so, so commit package.json after the first build with a CLI.
//
// TypeScript (pinned in package.json) compiles: it rewrites the sources' `.ts` import
// specifiers to `.js` (rewriteRelativeImportExtensions), and with noCheck it only transforms,
// since type checking is `deno task check`'s job. Declaration files keep `.ts` specifiers, so
// they are rewritten here.

import { spawnSync } from "node:child_process";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { dirname, join, relative } from "node:path";
import { fileURLToPath } from "node:url";
import { entryPoints, packageExports, writeJson } from "./manifest.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = join(root, "dist");
const CLI = "cli.ts";

const entries = entryPoints(root);
const hasCli = existsSync(join(root, CLI));
const files = [...Object.values(entries), ...(hasCli ? [`./${CLI}`] : [])];

rmSync(dist, { recursive: true, force: true });
const scratch = join(root, ".tmp", "build");
mkdirSync(scratch, { recursive: true });
const tsconfig = join(scratch, "tsconfig.json");
writeFileSync(
  tsconfig,
  JSON.stringify({
    compilerOptions: {
      target: "es2022",
      module: "nodenext",
      moduleResolution: "nodenext",
      lib: ["es2023", "dom", "dom.iterable"],
      types: [],
      strict: true,
      declaration: true,
      noCheck: true,
      skipLibCheck: true,
      allowImportingTsExtensions: true,
      rewriteRelativeImportExtensions: true,
      rootDir: root,
      outDir: dist,
      newLine: "lf",
    },
    files: files.map((file) => join(root, file)),
  }),
);
const tsc = spawnSync(join(root, "node_modules", ".bin", "tsc"), ["-p", tsconfig], {
  cwd: root,
  encoding: "utf8",
});
if (tsc.status !== 0) {
  console.error(`tsc failed (exit ${tsc.status ?? tsc.signal})\n${tsc.stdout}${tsc.stderr}`);
  process.exit(1);
}

// Declarations: "./x.ts" -> "./x.js" in every relative import, export and import type (code
// lines only: the documentation's examples keep the source paths).
const specifier = /((?:from|import)\s*\(?\s*["'])(\.{1,2}\/[^"']*)\.ts(["'])/g;
const isComment = (line) => /^\s*(\*|\/\*|\/\/)/.test(line);
for (const file of walk(dist)) {
  const lines = readFileSync(file, "utf8").split("\n");
  const code = lines.map((line) => isComment(line) ? line : line.replace(specifier, "$1$2.js$3"));
  if (file.endsWith(".d.ts")) writeFileSync(file, code.join("\n"));
  const left = code.find((line) => !isComment(line) && specifier.test(line));
  if (left !== undefined) {
    console.error(`build: ${relative(root, file)} still imports a .ts file: ${left.trim()}`);
    process.exit(1);
  }
}

// The CLI: executable, and package.json's bin follows whether it exists.
const pkgPath = join(root, "package.json");
const pkg = JSON.parse(readFileSync(pkgPath, "utf8"));
const bin = hasCli ? { workpull: "dist/cli.js" } : undefined;
if (hasCli) {
  const cli = join(dist, "cli.js");
  const text = readFileSync(cli, "utf8");
  if (!text.startsWith("#!")) writeFileSync(cli, `#!/usr/bin/env node\n${text}`);
  chmodSync(cli, 0o755);
}
if (JSON.stringify(pkg.bin) !== JSON.stringify(bin)) {
  if (bin) pkg.bin = bin;
  else delete pkg.bin;
  writeJson(pkgPath, pkg);
  console.log(
    `build: package.json "bin" ${bin ? "now points at dist/cli.js" : "removed (no cli.ts)"}`,
  );
}
const expected = JSON.stringify(packageExports(entries));
if (JSON.stringify(pkg.exports) !== expected) {
  console.error(
    `build: package.json "exports" does not match deno.json's; expected ${expected}`,
  );
  process.exit(1);
}
const count = [...walk(dist)].length;
console.log(`build: ${files.length} entry points, ${count} files in dist/`);

function* walk(dir) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) yield* walk(path);
    else yield path;
  }
}
