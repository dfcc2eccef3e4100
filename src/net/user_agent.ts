/**
 * What a worker runs on, read from the `User-Agent` header of its WebSocket upgrade: the only
 * place the network edge learns it without a protocol change. Deno sends `Deno/2.9.6`, Node's
 * global WebSocket `node`, browsers their usual string; Bun's WebSocket and Node's `ws` send
 * none, so `connectWorker` adds one there (`Bun/1.4.5`, `Node.js/20.20.2`).
 *
 * The header is the peer's to choose: the result is a short, plain description for dashboards
 * and stats (letters, digits, spaces and `. _ -` only, at most 40 characters), never trusted.
 *
 * @module
 */

const BROWSERS: readonly (readonly [RegExp, string])[] = [
  [/\bEdg(?:e|A|iOS)?\/(\d+)/, "Edge"],
  [/\bFirefox\/(\d+)/, "Firefox"],
  [/\b(?:Headless)?Chrome\/(\d+)/, "Chrome"],
  [/\bVersion\/(\d+)(?:\.\d+)*.*\bSafari\//, "Safari"],
];
const RUNTIMES: readonly (readonly [RegExp, string])[] = [
  [/^Deno\/(\d+(?:\.\d+){0,2})/, "Deno"],
  [/^Bun\/(\d+(?:\.\d+){0,2})/, "Bun"],
  [/^Node(?:\.js)?\/v?(\d+(?:\.\d+){0,2})/i, "Node"],
];
const MAX_LENGTH = 40;

/**
 * A short description of the runtime behind a `User-Agent` header, or undefined without one.
 *
 * @example
 * ```ts
 * import { runtimeFromUserAgent } from "./user_agent.ts";
 * console.assert(runtimeFromUserAgent("Deno/2.9.6") === "Deno 2.9.6");
 * console.assert(runtimeFromUserAgent("node") === "Node");
 * console.assert(
 *   runtimeFromUserAgent("Mozilla/5.0 (X11; Linux x86_64) HeadlessChrome/131.0.0.0 Safari/537.36") ===
 *     "Chrome 131",
 * );
 * console.assert(runtimeFromUserAgent(null) === undefined);
 * ```
 */
export function runtimeFromUserAgent(header: string | null | undefined): string | undefined {
  if (typeof header !== "string") return undefined;
  const agent = header.slice(0, 512).trim();
  if (agent === "") return undefined;
  for (const [pattern, name] of RUNTIMES) {
    const match = pattern.exec(agent);
    if (match) return `${name} ${match[1]}`;
  }
  if (/^node$/i.test(agent)) return "Node";
  if (agent.startsWith("Mozilla/")) {
    for (const [pattern, name] of BROWSERS) {
      const match = pattern.exec(agent);
      if (match) return `${name} ${match[1]}`;
    }
    return "browser";
  }
  // Anything else: its first product token, cleaned.
  const first = agent.split(/\s/)[0].replace("/", " ").replace(/[^A-Za-z0-9 ._-]/g, "");
  return first.slice(0, MAX_LENGTH) || undefined;
}
