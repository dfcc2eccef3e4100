/**
 * Scenario 7, the browser worker client's size: `client.ts` bundled for the browser with the
 * pinned esbuild (`--bundle --minify --format=esm --platform=browser --target=es2022`, hono and
 * valibot included, tree-shaken), then gzipped (level 9) and brotli-compressed. Also lists the
 * largest inputs of the bundle.
 *
 * @module
 */

import { readFileSync } from "node:fs";
import { join } from "node:path";
import process from "node:process";
import { brotliCompressSync, constants, gzipSync } from "node:zlib";
import { runToEnd } from "../lib/proc.ts";
import { repoPath } from "../lib/runtime.ts";
import { makeTempDir, removeTempDir } from "../lib/tmp.ts";

/** The scenario's result, bytes. */
export interface ClientSizeResult {
  readonly entry: string;
  readonly esbuild: string;
  readonly minified: number;
  readonly gzip: number;
  readonly brotli: number;
  /** The largest inputs, by minified bytes in the bundle. */
  readonly inputs: { readonly path: string; readonly bytes: number }[];
}

/** Bundle `client.ts` and measure it. */
export async function clientSize(): Promise<ClientSizeResult> {
  const esbuild = repoPath("node_modules", ".bin", "esbuild");
  const dir = makeTempDir("size");
  try {
    const out = join(dir, "client.min.js");
    const meta = join(dir, "meta.json");
    const { code, stderr } = await runToEnd(esbuild, [
      repoPath("client.ts"),
      "--bundle",
      "--minify",
      "--format=esm",
      "--platform=browser",
      "--target=es2022",
      `--outfile=${out}`,
      `--metafile=${meta}`,
      "--log-level=warning",
    ], { cwd: repoPath(), timeout: 60_000 });
    if (code !== 0) throw new Error(`esbuild failed: ${stderr}`);
    const version = await runToEnd(esbuild, ["--version"], { timeout: 10_000 });
    const bundle = readFileSync(out);
    const metafile = JSON.parse(readFileSync(meta, "utf8"));
    const inputs = Object.entries(
      Object.values(
        metafile.outputs as Record<string, { inputs: Record<string, { bytesInOutput: number }> }>,
      )[0]
        .inputs,
    ).map(([path, info]) => ({ path, bytes: info.bytesInOutput }))
      .sort((a, b) => b.bytes - a.bytes)
      .slice(0, 8);
    return {
      entry: "client.ts",
      esbuild: version.stdout.trim(),
      minified: bundle.length,
      gzip: gzipSync(bundle, { level: 9 }).length,
      brotli: brotliCompressSync(bundle, {
        params: { [constants.BROTLI_PARAM_QUALITY]: 11 },
      }).length,
      inputs,
    };
  } finally {
    removeTempDir(dir);
  }
}

if (import.meta.main) {
  console.log(JSON.stringify(await clientSize(), null, 1));
  process.exit(0);
}
