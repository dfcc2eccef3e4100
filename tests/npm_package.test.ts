/**
 * The npm package as a user gets it: `npm pack` builds and packs it, a temporary project
 * installs the tarball (and its dependencies from the registry), type-checks against its
 * declarations, resolves every entry point, and runs a Node server with two Node workers over
 * real loopback sockets: one on Node 22 with the global `WebSocket`, one on the machine's Node
 * (`WORKPULL_HOST_NODE`, set by `scripts/test.mjs`; Node 20 here) with `WebSocket` from `ws`.
 * Node only (`node --test`): it spawns Node itself, so running it again elsewhere adds nothing.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import process from "node:process";
import { runtime, waitFor, within } from "./fixtures/net_support.ts";

const root = new URL("..", import.meta.url).pathname;
const hostNode = process.env.WORKPULL_HOST_NODE || process.execPath;

/** Run a command to completion; fail with its output when it fails. */
function run(command: string, args: string[], cwd: string, timeout = 180_000): string {
  const result = spawnSync(command, args, { cwd, encoding: "utf8", timeout });
  if (result.status !== 0) {
    throw new Error(
      `${command} ${args.join(" ")} failed (${result.status ?? result.signal})\n` +
        `${result.stdout}\n${result.stderr}`,
    );
  }
  return result.stdout;
}

/** A child process whose stdout lines are collected. */
class Child {
  readonly lines: string[] = [];
  readonly exited: Promise<number | null>;
  readonly #process: ChildProcess;
  #stderr = "";

  constructor(command: string, args: string[], cwd: string) {
    this.#process = spawn(command, args, { cwd, stdio: ["ignore", "pipe", "pipe"] });
    this.exited = new Promise((resolve) => this.#process.on("exit", (code) => resolve(code)));
    let pending = "";
    this.#process.stdout!.setEncoding("utf8").on("data", (chunk: string) => {
      pending += chunk;
      const lines = pending.split("\n");
      pending = lines.pop()!;
      this.lines.push(...lines.filter((line) => line.trim()));
    });
    this.#process.stderr!.setEncoding("utf8").on("data", (chunk: string) => {
      this.#stderr += chunk;
    });
  }

  get stderr(): string {
    return this.#stderr;
  }

  /** The first line that parses as JSON and has `key`. */
  message(key: string): Record<string, unknown> | undefined {
    for (const line of this.lines) {
      try {
        const value = JSON.parse(line);
        if (value && typeof value === "object" && key in value) return value;
      } catch {
        // Not a JSON line.
      }
    }
    return undefined;
  }

  async kill(): Promise<void> {
    if (this.#process.exitCode === null && this.#process.signalCode === null) {
      this.#process.kill("SIGKILL");
    }
    await within(this.exited, "a child process to exit");
  }
}

const SERVER = `
import { BufferedProducer, WorkPullingController } from "workpull";
import { serveNode } from "workpull/node";
import { signToken } from "workpull/server";

const secret = "package-test-secret-0123456789-abcdefghijklmnop";
const producer = new BufferedProducer();
const controller = new WorkPullingController({ name: "jobs", producer, deliveryConfirmation: true });
let bound = 0;
let allBound;
const twoBound = new Promise((resolve) => (allBound = resolve));
controller.addEventListener("worker-bound", () => ++bound === 2 && allBound());
await controller.start();
const server = await serveNode({ controller, producer, auth: { secret } });
const token = (worker) => signToken(secret, { producer: "jobs", worker, expiresIn: 600_000 });
console.log(JSON.stringify({
  url: server.workersUrl.href,
  tokens: { modern: await token("modern"), legacy: await token("legacy") },
}));
await twoBound;
const receipts = await Promise.all(
  Array.from({ length: 200 }, (_, n) => producer.submit({ n }, { messageId: "job-" + n })),
);
await Promise.all(receipts.map((receipt) => receipt.confirmed));
const workers = Object.fromEntries(controller.stats().workers.map((w) => [w.worker, w.confirmed]));
console.log(JSON.stringify({ confirmed: receipts.length, workers, node: process.version }));
`;

const WORKER = `
import { connectWorker } from "workpull/client";

const [url, token, name, socket] = process.argv.slice(2);
const options = { url, token, producer: "jobs", name, handler: async () => {} };
if (socket === "ws") options.WebSocket = (await import("ws")).WebSocket;
else if (typeof WebSocket !== "function") throw new Error("no global WebSocket on " + process.version);
connectWorker(options).addEventListener("connected", () => {
  console.log(JSON.stringify({ connected: name, node: process.version, socket }));
});
`;

const RESOLVE = `
import { existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const manifest = JSON.parse(await (await import("node:fs/promises")).readFile(
  fileURLToPath(import.meta.resolve("workpull/package.json")), "utf8"));
const resolved = {};
for (const subpath of Object.keys(manifest.exports)) {
  const specifier = subpath === "." ? "workpull" : "workpull/" + subpath.slice(2);
  const file = fileURLToPath(import.meta.resolve(specifier));
  if (!existsSync(file)) throw new Error(specifier + " resolves to a missing " + file);
  resolved[subpath] = file;
}
// Everything meant for Node loads on Node (./deno and ./bun need their runtime to serve).
for (const specifier of ["workpull", "workpull/server", "workpull/client", "workpull/node",
  "workpull/testing", "workpull/deno-kv"]) await import(specifier);
console.log(JSON.stringify({ resolved: Object.keys(resolved), bin: manifest.bin ?? null }));
`;

/** A TypeScript user of the package: compiled against the shipped declarations only. */
const CONSUMER = `
import { BufferedProducer, WorkPullingController } from "workpull";
import { nodeWebSocket, serveNode } from "workpull/node";
import { createWorkpullApp, signToken, type WorkpullServer } from "workpull/server";
import { connectWorker } from "workpull/client";
import { WebSocket } from "ws";

const producer = new BufferedProducer<{ n: number }>();
const controller = new WorkPullingController({ name: "jobs", producer });
const served: Promise<WorkpullServer> = serveNode({ controller, producer, auth: { secret: "s" } });
const sockets = nodeWebSocket({ idleTimeout: 20_000 });
const app = createWorkpullApp({ controller, upgradeWebSocket: sockets.upgradeWebSocket, auth: { secret: "s" } });
const token: Promise<string> = signToken("s", { producer: "jobs", worker: "w", expiresIn: 1 });
const worker = connectWorker<{ n: number }>({
  url: "ws://127.0.0.1:1/workers",
  producer: "jobs",
  name: "w",
  WebSocket,
  handler: ({ payload }) => {
    const n: number = payload.n;
    void n;
  },
});
void [served, app, token, worker];
`;

test("the packed npm package installs and runs a Node server with Node workers", {
  timeout: 300_000,
  skip: runtime === "node" ? false : "it runs Node processes itself: once, under node --test",
}, async () => {
  const work = mkdtempSync(join(tmpdir(), "workpull-package-"));
  const children: Child[] = [];
  try {
    // npm pack runs the build (prepack) and prints the tarball's name last.
    const packed = run("npm", ["pack", "--silent", "--pack-destination", work], root);
    const tarball = join(work, packed.trim().split("\n").pop()!);
    const listing = run("tar", ["-tzf", tarball], work).trim().split("\n");
    const outside = listing.filter((entry) =>
      !/^package\/(dist\/.+\.(js|d\.ts)|LICENSE|README\.md|package\.json)$/.test(entry)
    );
    assert.deepEqual(outside, [], "only the build, the license and the README ship");
    assert.ok(
      listing.includes("package/dist/node.js") && listing.includes("package/dist/node.d.ts"),
    );

    const app = join(work, "app");
    run("mkdir", ["-p", app], work);
    writeFileSync(
      join(app, "package.json"),
      JSON.stringify({ name: "consumer", private: true, type: "module" }),
    );
    run("npm", [
      "install",
      "--no-audit",
      "--no-fund",
      "--prefer-offline",
      "--loglevel=error",
      tarball,
      "ws@8.23.0",
      "@types/ws@8.18.2",
      "@types/node@24.19.4",
    ], app);

    // Declarations: a TypeScript user compiles against the shipped .d.ts files.
    writeFileSync(join(app, "consumer.ts"), CONSUMER);
    writeFileSync(
      join(app, "tsconfig.json"),
      JSON.stringify({
        compilerOptions: {
          target: "es2022",
          module: "nodenext",
          moduleResolution: "nodenext",
          lib: ["es2023", "dom"],
          types: ["node"],
          strict: true,
          noEmit: true,
          skipLibCheck: false,
        },
        files: ["consumer.ts"],
      }),
    );
    run(join(root, "node_modules", ".bin", "tsc"), ["-p", "tsconfig.json"], app);

    // Every entry point resolves to a shipped file, and the Node ones load.
    writeFileSync(join(app, "resolve.mjs"), RESOLVE);
    const resolved = JSON.parse(run(hostNode, ["resolve.mjs"], app).trim());
    assert.deepEqual(resolved.resolved.sort(), [
      ".",
      "./bun",
      "./client",
      "./deno",
      "./deno-kv",
      "./node",
      "./package.json",
      "./server",
      "./testing",
    ]);
    const hasCli = existsSync(join(root, "cli.ts"));
    assert.deepEqual(resolved.bin, hasCli ? { workpull: "dist/cli.js" } : null);
    if (hasCli) {
      // The installed command, as `npx workpull` runs it: on Node, from the built package.
      const help = run(join(app, "node_modules", ".bin", "workpull"), ["--help"], app);
      assert.match(help, /^Usage: workpull <command>/);
      assert.match(help, /^ {2}dead-letters retry /m);
    }

    // A Node server and two Node workers, each in its own process, over loopback.
    writeFileSync(join(app, "server.mjs"), SERVER);
    writeFileSync(join(app, "worker.mjs"), WORKER);
    const server = new Child(hostNode, ["server.mjs"], app);
    children.push(server);
    await waitFor(() => server.message("url") !== undefined, () => `the server\n${server.stderr}`);
    const { url, tokens } = server.message("url") as {
      url: string;
      tokens: Record<string, string>;
    };
    const modern = new Child(
      process.execPath,
      ["worker.mjs", url, tokens.modern, "modern", "global"],
      app,
    );
    const legacy = new Child(hostNode, ["worker.mjs", url, tokens.legacy, "legacy", "ws"], app);
    children.push(modern, legacy);
    await waitFor(
      () => server.message("confirmed") !== undefined,
      () => `200 jobs confirmed\n${server.stderr}\n${modern.stderr}\n${legacy.stderr}`,
      60_000,
    );
    const done = server.message("confirmed") as {
      confirmed: number;
      workers: Record<string, number>;
    };
    assert.equal(done.confirmed, 200);
    assert.equal(done.workers.modern + done.workers.legacy, 200);
    assert.ok(done.workers.modern > 0 && done.workers.legacy > 0, JSON.stringify(done.workers));
    for (const [worker, socket] of [[modern, "global"], [legacy, "ws"]] as const) {
      assert.equal(worker.message("connected")?.socket, socket);
    }
    const versions = JSON.parse(
      readFileSync(join(app, "node_modules/workpull/package.json"), "utf8"),
    );
    assert.equal(
      versions.version,
      JSON.parse(readFileSync(join(root, "package.json"), "utf8")).version,
    );
  } finally {
    await Promise.all(children.map((child) => child.kill()));
    rmSync(work, { recursive: true, force: true });
  }
});
