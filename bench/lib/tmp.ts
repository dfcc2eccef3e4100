/**
 * Temporary directories of a benchmark run: each is removed by its scenario when done, and
 * whatever is left (an interrupted run) by {@linkcode removeTempDirs}.
 *
 * @module
 */

import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

const dirs = new Set<string>();

/** Create `$TMPDIR/workpull-bench-<name>-XXXXXX`. */
export function makeTempDir(name: string): string {
  const dir = mkdtempSync(join(tmpdir(), `workpull-bench-${name}-`));
  dirs.add(dir);
  return dir;
}

/** Remove a directory made by {@linkcode makeTempDir}. */
export function removeTempDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  dirs.delete(dir);
}

/** Remove every directory still registered. */
export function removeTempDirs(): void {
  for (const dir of [...dirs]) removeTempDir(dir);
}
