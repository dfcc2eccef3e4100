/**
 * The worker side's CPU cost per job, without sockets: 4 `WorkerEndpoint`s (window 100, no-op
 * handler) fed by a scripted controller that answers each registration and sends, for every
 * `request`, the jobs it grants in one jobs frame (as the controller does; 36-character
 * MessageIDs, payload `{"n":i}`). The other half of `controller_cpu.ts`: what a worker process
 * spends per job in the network benchmark, minus the socket work. Prints the CPU time and (on
 * Deno) the bytes allocated per job. `--allocations` (Deno) samples every allocation of the
 * measured rounds and prints the bytes per job each function allocated, the scripted
 * controller's frames included (as `controller_cpu.ts` does).
 *
 *   deno run -A bench/tools/worker_cpu.ts [jobs=300000] [rounds=5] [--profile] [--allocations]
 *     [--outcomes]
 *
 * @module
 */

import { mkdirSync } from "node:fs";
import process from "node:process";
import v8 from "node:v8";
import { type Link, type LinkReceiver, WorkerEndpoint } from "../../mod.ts";
import {
  printAllocationsPerJob,
  printTop,
  startAllocationSampling,
  startProfiling,
  stopProfiling,
} from "../lib/profile.ts";
import { median } from "../lib/stats.ts";
import { commandLine, numberArg } from "../lib/cli.ts";
import { repoPath } from "../lib/runtime.ts";

const { values, positionals } = commandLine({
  usage:
    "deno run -A bench/tools/worker_cpu.ts [jobs] [rounds] [--profile] [--allocations] [--outcomes]",
  summary:
    "The worker endpoints' CPU time per job without sockets (4 endpoints, window 100, a scripted controller).",
  positionals: [
    { name: "jobs", help: "jobs per round (default 300000)" },
    { name: "rounds", help: "measured rounds (default 5)" },
  ],
  flags: {
    profile: { kind: "switch", help: "record a CPU profile into .tmp/profiles and summarize it" },
    allocations: {
      kind: "switch",
      help: "Deno: sample every allocation and print the bytes per job of each function",
    },
    outcomes: { kind: "switch", help: "the controller agrees feature outcomes (jobs carry tries)" },
  },
});
const jobs = numberArg("jobs", positionals[0], 300_000);
const rounds = numberArg("rounds", positionals[1], 5);
const outcomes = values.outcomes === true;
const SESSION = "2f1c3d4e-5a6b-4c7d-8e9f-0a1b2c3d4e5f";

let handled = 0;
let target = 0;
let finish: () => void = () => {};
/** Jobs not yet sent, for all endpoints: each request takes what it grants. */
let unsent = 0;
let nextJob = 0;

/** A MessageID of 36 characters, unique per job (the shape of a random UUID). */
function messageId(n: number): string {
  return `00000000-0000-4000-8000-${n.toString(16).padStart(12, "0")}`;
}

/** The scripted controller's view of one endpoint. */
interface Peer {
  receiver: LinkReceiver | undefined;
  /** Highest sequence sent, and the demand granted. */
  sent: number;
  upTo: number;
}
const peers: Peer[] = [];

/** Send every peer what it asked for and the supply allows, one jobs frame each. */
function pump(): void {
  for (const peer of peers) {
    const count = Math.min(peer.upTo - peer.sent, unsent);
    if (count <= 0) continue;
    unsent -= count;
    const first = peer.sent + 1;
    peer.sent += count;
    let text = `{"type":"jobs","session":"${SESSION}","seq":${first},"jobs":[`;
    for (let i = 0; i < count; i++) {
      const n = nextJob++;
      text += `${i ? "," : ""}{"id":"${messageId(n)}","payload":{"n":${n}}${
        outcomes ? ',"attempt":1' : ""
      }}`;
    }
    text += "]}";
    const receiver = peer.receiver!;
    queueMicrotask(() => receiver.receive(text));
  }
}

for (let w = 0; w < 4; w++) {
  const peer: Peer = { receiver: undefined, sent: 0, upTo: 0 };
  peers.push(peer);
  const link: Link = {
    send(frame) {
      const message = JSON.parse(frame);
      if (message.type === "register") {
        const features = message.features ? `,"features":${outcomes ? '["outcomes"]' : "[]"}` : "";
        queueMicrotask(() =>
          peer.receiver!.receive(
            `{"type":"registered","session":"${SESSION}","binding":"b${w}","nextSeq":1,"nonce":"${message.nonce}"${features}}`,
          )
        );
        return;
      }
      if (message.type !== "request") return;
      peer.upTo = message.upTo;
      pump();
    },
    close() {},
  };
  const endpoint = new WorkerEndpoint<{ n: number }>({
    producer: "bench",
    name: `w${w}`,
    window: 100,
    handler: () => {
      if (++handled === target) finish();
    },
  });
  peer.receiver = endpoint.attach(link);
}

/** Bytes allocated on the JavaScript heap so far (V8 only: Bun's figure is not a running total). */
function allocatedBytes(): number | undefined {
  if ("Bun" in globalThis) return undefined;
  const stats = v8.getHeapStatistics() as { total_allocated_bytes?: number };
  return stats.total_allocated_bytes;
}

async function batch(count: number): Promise<{ ms: number; bytes: number | undefined }> {
  target = handled + count;
  const finished = new Promise<void>((resolve) => (finish = resolve));
  const allocated = allocatedBytes();
  const start = process.cpuUsage();
  unsent += count;
  pump();
  await finished;
  const used = process.cpuUsage(start);
  const after = allocatedBytes();
  const bytes = allocated === undefined || after === undefined ? undefined : after - allocated;
  return { ms: (used.user + used.system) / 1000, bytes };
}

// Let the endpoints register and grant their first demand.
await new Promise((resolve) => setTimeout(resolve, 10));
await batch(jobs / 2);
const profile = values.profile === true;
if (profile) await startProfiling();
const sampling = values.allocations === true && !profile && await startAllocationSampling();
const times: number[] = [];
const bytes: number[] = [];
for (let i = 0; i < rounds; i++) {
  const round = await batch(jobs);
  times.push(round.ms);
  if (round.bytes !== undefined) bytes.push(round.bytes / jobs);
}
console.log(
  `worker endpoints${outcomes ? " (outcomes)" : ""}, CPU time: ${
    median(times.map((ms) => ms * 1000 / jobs)).toFixed(2)
  } µs/job ` +
    `(rounds: ${times.map((ms) => (ms * 1000 / jobs).toFixed(2)).join(", ")})` +
    (bytes.length ? `; allocated: ${Math.round(median(bytes))} bytes/job` : ""),
);
if (sampling) await printAllocationsPerJob(jobs * rounds);
if (profile) {
  const dir = repoPath(".tmp", "profiles");
  mkdirSync(dir, { recursive: true });
  printTop((await stopProfiling(dir, "worker_cpu"))!, 0, 40);
}
process.exit(0);
