/**
 * CPU profiles of a benchmark process through `node:inspector` (Deno 2.9 has no `--cpu-prof`;
 * the inspector's Profiler domain works in process). Written as `.cpuprofile` files that
 * Chrome DevTools opens and `bench/tools/profile_top.ts` summarizes.
 *
 * Enabled by the `--profile=<dir>` flag of `bench/run.ts`, which passes
 * `WORKPULL_BENCH_PROFILE=<dir>` to the worker processes.
 *
 * @module
 */

import { writeFileSync } from "node:fs";
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

/** Start sampling (interval in µs). A no-op on Bun, which profiles with `--cpu-prof`. */
export async function startProfiling(intervalMicros = 100): Promise<void> {
  if (!("Deno" in globalThis) || session) return;
  const { Session } = await import("node:inspector");
  session = new Session() as unknown as InspectorSession;
  session.connect();
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
