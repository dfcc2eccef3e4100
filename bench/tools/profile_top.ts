/**
 * Summarize `.cpuprofile` files: self time by function and by source file, the hottest first.
 *
 *   deno run -A bench/tools/profile_top.ts <file.cpuprofile>... [--top=30]
 *
 * @module
 */

import { readFileSync } from "node:fs";
import process from "node:process";

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
  startTime: number;
  endTime: number;
}

/** Self time (ms) per function key and per file, plus the total sampled time. */
export function summarize(profile: Profile): {
  total: number;
  byFunction: Map<string, number>;
  byFile: Map<string, number>;
} {
  const nodes = new Map(profile.nodes.map((node) => [node.id, node]));
  const self = new Map<number, number>();
  for (let i = 0; i < profile.samples.length; i++) {
    const delta = (profile.timeDeltas[i + 1] ?? 0) / 1000;
    self.set(profile.samples[i], (self.get(profile.samples[i]) ?? 0) + delta);
  }
  const byFunction = new Map<string, number>();
  const byFile = new Map<string, number>();
  let total = 0;
  for (const [id, ms] of self) {
    const { functionName, url, lineNumber } = nodes.get(id)!.callFrame;
    const file = url.replace(/^.*\/(src|bench|node_modules)\//, "$1/") || "(native)";
    const key = `${functionName || "(anonymous)"} ${file}:${lineNumber + 1}`;
    byFunction.set(key, (byFunction.get(key) ?? 0) + ms);
    byFile.set(file, (byFile.get(file) ?? 0) + ms);
    total += ms;
  }
  return { total, byFunction, byFile };
}

if (import.meta.main) {
  const top = Number(process.argv.find((arg) => arg.startsWith("--top="))?.slice(6) ?? 30);
  for (const path of process.argv.slice(2).filter((arg) => !arg.startsWith("--"))) {
    const { total, byFunction, byFile } = summarize(JSON.parse(readFileSync(path, "utf8")));
    const show = (title: string, map: Map<string, number>, count: number) => {
      console.log(`  ${title}`);
      for (const [key, ms] of [...map].sort((a, b) => b[1] - a[1]).slice(0, count)) {
        console.log(
          `    ${ms.toFixed(1).padStart(9)} ms ${
            (100 * ms / total).toFixed(1).padStart(5)
          }%  ${key}`,
        );
      }
    };
    console.log(`${path}: ${total.toFixed(0)} ms sampled`);
    show("by file", byFile, 15);
    show("by function (self)", byFunction, top);
  }
}
