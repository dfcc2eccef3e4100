// The two package manifests and how they must agree. workpull ships to npm (package.json, built
// into dist/ by scripts/build.mjs) and to JSR (deno.json, the TypeScript sources).
//
// - One version: package.json's. deno.json has none; scripts/publish_jsr.mjs passes it to
//   `deno publish --set-version`, so the two registries cannot drift.
// - One list of entry points: deno.json's `exports`. package.json's `exports` maps the same
//   subpaths to dist/ (types first), and deno.json's `publish.include` ships every entry file.
// - One license: MIT, in LICENSE and in package.json's `license`.
// - package.json's `bin` exists exactly when cli.ts does (scripts/build.mjs keeps it so).
//
// Usage: node scripts/manifest.mjs   (prints each problem; exit 1 if there is any)

import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

/** deno.json's `exports`: subpath -> source file ("./mod.ts"). */
export function entryPoints(root) {
  const exports = readJson(join(root, "deno.json")).exports;
  if (typeof exports !== "object" || exports === null) {
    throw new Error('deno.json: "exports" must map subpaths to files');
  }
  return exports;
}

/** package.json's `exports` for the entry points: each subpath to its built file in dist/. */
export function packageExports(entries) {
  const map = {};
  for (const [subpath, file] of Object.entries(entries)) {
    const base = `./dist/${file.replace(/^\.\//, "").replace(/\.ts$/, "")}`;
    map[subpath] = { types: `${base}.d.ts`, default: `${base}.js` };
  }
  map["./package.json"] = "./package.json";
  return map;
}

/** Every way the manifests disagree with the rules above, as sentences; empty when they agree. */
export function manifestProblems(root) {
  const problems = [];
  const pkg = readJson(join(root, "package.json"));
  const deno = readJson(join(root, "deno.json"));
  if (!/^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$/.test(pkg.version ?? "")) {
    problems.push(`package.json: "version" must be a semantic version, got ${pkg.version}`);
  }
  if ("version" in deno) {
    problems.push(
      'deno.json: must not have a "version" (package.json\'s is passed to deno publish)',
    );
  }
  if (pkg.private) problems.push('package.json: must not be "private"');
  if (pkg.license !== "MIT") problems.push('package.json: "license" must be "MIT"');
  const license = join(root, "LICENSE");
  if (!existsSync(license) || !readFileSync(license, "utf8").startsWith("MIT License")) {
    problems.push("LICENSE: must exist and hold the MIT License");
  }
  const entries = entryPoints(root);
  const expected = packageExports(entries);
  if (JSON.stringify(pkg.exports) !== JSON.stringify(expected)) {
    problems.push(
      `package.json: "exports" must be ${JSON.stringify(expected)} (from deno.json's exports)`,
    );
  }
  if (pkg.types !== expected["."]?.types) {
    problems.push(`package.json: "types" must be ${expected["."]?.types}`);
  }
  const include = deno.publish?.include ?? [];
  for (const file of Object.values(entries)) {
    if (!include.includes(file.replace(/^\.\//, ""))) {
      problems.push(`deno.json: "publish.include" must list ${file}`);
    }
  }
  for (const file of ["dist/", "LICENSE", "README.md"]) {
    if (!(pkg.files ?? []).includes(file)) problems.push(`package.json: "files" must list ${file}`);
  }
  const hasCli = existsSync(join(root, "cli.ts"));
  if (hasCli && pkg.bin?.workpull !== "dist/cli.js") {
    problems.push('package.json: "bin" must be { "workpull": "dist/cli.js" }: run npm run build');
  }
  if (!hasCli && pkg.bin !== undefined) {
    problems.push('package.json: "bin" must be absent while there is no cli.ts');
  }
  return problems;
}

/** Read a JSON file. */
export function readJson(path) {
  return JSON.parse(readFileSync(path, "utf8"));
}

/** Write a JSON file as npm and deno fmt do (two spaces, final newline). */
export function writeJson(path, value) {
  writeFileSync(path, `${JSON.stringify(value, null, 2)}\n`);
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const root = join(fileURLToPath(import.meta.url), "..", "..");
  const problems = manifestProblems(root);
  for (const problem of problems) console.error(problem);
  if (problems.length === 0) console.log("manifests agree");
  process.exit(problems.length > 0 ? 1 : 0);
}
