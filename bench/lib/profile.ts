/**
 * CPU profiles of a benchmark process through `node:inspector`, started and stopped around the
 * part worth profiling (whole-process profiles: `deno run --cpu-prof` / `bun --cpu-prof`), and
 * their summary: self time by function and by file. Written as `.cpuprofile` files that Chrome
 * DevTools opens and `bench/tools/profile_top.ts` summarizes.
 *
 * Enabled by the `--profile=<dir>` flag of `bench/run.ts`, which passes
 * `WORKPULL_BENCH_PROFILE=<dir>` to the worker processes.
 *
 * @module
 */

import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";

interface InspectorSession {
  connect(): void;
  disconnect(): void;
  post(method: string, params: object, callback: (error: unknown, result: unknown) => void): void;
}

let session: InspectorSession | undefined;

function post<T>(method: string, params: object = {}): Promise<T> {
  return new Promise((resolve, reject) =>
    session!.post(method, params, (error, result) => error ? reject(error) : resolve(result as T))
  );
}

async function connect(): Promise<void> {
  const { Session } = await import("node:inspector");
  session = new Session() as unknown as InspectorSession;
  session.connect();
}

/** Start sampling (interval in µs). A no-op on Bun, which profiles with `--cpu-prof`. */
export async function startProfiling(intervalMicros = 100): Promise<void> {
  if (!("Deno" in globalThis) || session) return;
  await connect();
  await post("Profiler.enable");
  await post("Profiler.setSamplingInterval", { interval: intervalMicros });
  await post("Profiler.start");
}

/** Stop sampling and write `<dir>/<name>.cpuprofile`; returns the path (or undefined). */
export async function stopProfiling(dir: string, name: string): Promise<string | undefined> {
  if (!session) return undefined;
  const { profile } = await post<{ profile: unknown }>("Profiler.stop");
  await post("Profiler.disable");
  session.disconnect();
  session = undefined;
  const path = join(dir, `${name}.cpuprofile`);
  writeFileSync(path, JSON.stringify(profile));
  return path;
}

/**
 * Start V8's sampling heap profiler, counting every allocation whether or not it is collected
 * later (one sample per `intervalBytes` on average). Deno only; false elsewhere.
 */
export async function startAllocationSampling(intervalBytes = 256): Promise<boolean> {
  if (!("Deno" in globalThis) || session) return false;
  await connect();
  await post("HeapProfiler.enable");
  await post("HeapProfiler.startSampling", {
    samplingInterval: intervalBytes,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
  return true;
}

interface AllocationNode {
  callFrame: { functionName: string; url: string; lineNumber: number };
  selfSize: number;
  children: AllocationNode[];
}

/**
 * Stop the sampling started by {@linkcode startAllocationSampling}: bytes allocated per
 * function (where V8 inlined a function, its caller is charged), the largest first.
 */
export async function stopAllocationSampling(): Promise<[string, number][]> {
  if (!session) return [];
  const { profile } = await post<{ profile: { head: AllocationNode } }>(
    "HeapProfiler.stopSampling",
  );
  await post("HeapProfiler.disable");
  session.disconnect();
  session = undefined;
  const bytes = new Map<string, number>();
  const walk = (node: AllocationNode) => {
    const key = functionKey(node.callFrame);
    bytes.set(key, (bytes.get(key) ?? 0) + node.selfSize);
    for (const child of node.children) walk(child);
  };
  walk(profile.head);
  return [...bytes].filter(([, size]) => size > 0).sort((a, b) => b[1] - a[1]);
}

/**
 * Stop the sampling started by {@linkcode startAllocationSampling} and print the bytes each
 * function allocated per job over `jobs` jobs, the largest 30.
 */
export async function printAllocationsPerJob(jobs: number): Promise<void> {
  const perJob = (size: number) => (size / jobs).toFixed(1).padStart(7);
  const functions = await stopAllocationSampling();
  const total = functions.reduce((sum, [, size]) => sum + size, 0);
  console.log(`allocations sampled: ${perJob(total).trim()} bytes/job; by function (self):`);
  for (const [key, size] of functions.slice(0, 30)) console.log(`  ${perJob(size)} B/job  ${key}`);
}

/** "name file:line" of a call frame, the file relative to src/, bench/ or node_modules/. */
function functionKey(frame: { functionName: string; url: string; lineNumber: number }): string {
  const file = fileOf(frame.url);
  return `${frame.functionName || "(anonymous)"} ${file}:${frame.lineNumber + 1}`;
}

function fileOf(url: string): string {
  return url.replace(/^.*\/(src|bench|node_modules)\//, "$1/") || "(native)";
}

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
}
interface Profile {
  nodes: ProfileNode[];
  samples: number[];
  timeDeltas: number[];
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
    const frame = nodes.get(id)!.callFrame;
    const file = fileOf(frame.url);
    const key = functionKey(frame);
    byFunction.set(key, (byFunction.get(key) ?? 0) + ms);
    byFile.set(file, (byFile.get(file) ?? 0) + ms);
    total += ms;
  }
  return { total, byFunction, byFile };
}

/** Print a `.cpuprofile`'s hottest files and functions (self time). */
export function printTop(path: string, files = 15, functions = 30): void {
  const { total, byFunction, byFile } = summarize(JSON.parse(readFileSync(path, "utf8")));
  const show = (title: string, map: Map<string, number>, count: number) => {
    console.log(`  ${title}`);
    for (const [key, ms] of [...map].sort((a, b) => b[1] - a[1]).slice(0, count)) {
      console.log(
        `    ${ms.toFixed(1).padStart(9)} ms ${(100 * ms / total).toFixed(1).padStart(5)}%  ${key}`,
      );
    }
  };
  console.log(`${path}: ${total.toFixed(0)} ms sampled`);
  if (files > 0) show("by file", byFile, files);
  show("by function (self)", byFunction, functions);
}
