/**
 * Fuzz: an authenticated worker sends thousands of random and mutated frames over a real
 * socket, reconnecting whenever it is cut off, while two honest workers keep completing jobs.
 * The controller must stay up, the honest workers must keep their bindings and their pace, and
 * only the offender's bindings may end.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { connectWorker } from "../client.ts";
import { decodeWorkerFrame, MAX_SEQ } from "../mod.ts";
import { prng, startFlow, waitFor, within } from "./fixtures/net_support.ts";

const FRAMES = 5000;
const SEED = 0x5eed;
(globalThis as unknown as { kinds: Record<string, number> }).kinds = {};
(globalThis as unknown as { got: Record<string, number> }).got = {};

type Json = null | boolean | number | string | Json[] | { [key: string]: Json };

/** Builds frames from a seeded PRNG: valid ones, mutated ones and garbage. */
class FrameFactory {
  session = "none";
  nonce = "n0";
  confirmed = 0;
  readonly #random: () => number;
  readonly #incarnations = new Map<string, string>();
  #started = 0;

  constructor(random: () => number) {
    this.#random = random;
  }

  int(n: number): number {
    return Math.floor(this.#random() * n);
  }

  pick<T>(items: readonly T[]): T {
    return items[this.int(items.length)];
  }

  /** A valid frame for the fuzzer's own identity, or one that is valid but stale. */
  valid(): Record<string, Json> {
    const kind = this.pick(
      ["register", "request", "ack", "release", "done", "fail", "progress"] as const,
    );
    if (kind === "register") {
      this.nonce = `n${this.int(1000)}`;
      const worker = this.pick(["fuzzer", "fuzzer#1", "fuzzer#2"]);
      // The same incarnation again or a newer one, never an older one: a stale incarnation is
      // refused and its connection closed, which the fuzzer could not predict.
      if (!this.#incarnations.has(worker) || this.#random() < 0.3) {
        this.#incarnations.set(worker, `i${++this.#started}`);
      }
      return {
        type: "register",
        producer: "jobs",
        worker,
        incarnation: this.#incarnations.get(worker)!,
        nonce: this.nonce,
        resendInterval: this.pick([100, 2000, 3_600_000]),
        // Half the time with feature heard: the controller then answers frames it has nothing
        // else for (`heard`), which a flood must not turn into a flood back.
        ...(this.#random() < 0.5 ? { features: ["heard"] } : {}),
      };
    }
    const session = this.pick([this.session, this.session, "stale-session"]);
    const nonce = this.pick([this.nonce, this.nonce, "stale-nonce"]);
    const confirmed = this.pick([0, this.confirmed, this.confirmed + 1, this.int(50)]);
    if (kind === "ack") return { type: "ack", session, nonce, confirmed };
    if (kind === "release") {
      return { type: "release", session, nonce, confirmed, upTo: confirmed + this.int(3) };
    }
    const seq = 1 + this.int(60);
    if (kind === "done") return { type: "done", session, nonce, seq, result: this.value() };
    if (kind === "progress") return { type: "progress", session, nonce, seq, value: this.value() };
    if (kind === "fail") {
      return { type: "fail", session, nonce, seq, error: { name: "Error", message: "boom" } };
    }
    return {
      type: "request",
      session,
      nonce,
      confirmed,
      upTo: confirmed + this.pick([0, 1, 10, 100, 10_000, 10_001]),
      resend: this.#random() < 0.5,
    };
  }

  /** Something of a random JSON type, sometimes hostile. */
  value(depth = 0): Json {
    switch (this.int(depth > 2 ? 8 : 10)) {
      case 0:
        return null;
      case 1:
        return this.#random() < 0.5;
      case 2:
        return this.pick([-1, 0.5, 1e21, MAX_SEQ + 1, Number.MAX_SAFE_INTEGER + 2, -0, 2 ** 53]);
      case 3:
        return "x".repeat(this.pick([0, 1, 257, 5000]));
      case 4:
        return this.pick(["", " ", "\u0000", "\u{1F4A5}", "__proto__", "constructor"]);
      case 5:
        return this.int(1_000_000);
      case 6:
        return `s${this.int(100)}`;
      case 7:
        return this.pick(["register", "request", "ack", "jobs", "registered", "reset", "hello"]);
      case 8:
        return Array.from({ length: this.int(4) }, () => this.value(depth + 1));
      default:
        return Object.fromEntries(
          Array.from({ length: this.int(4) }, () => [`k${this.int(10)}`, this.value(depth + 1)]),
        );
    }
  }

  /** A valid frame with one or more fields dropped, retyped, or added. */
  mutated(): Record<string, Json> {
    const frame = this.valid();
    for (let i = 0, n = 1 + this.int(3); i < n; i++) {
      // Not the incarnation: a mutated one that collides with an earlier one is a stale
      // incarnation, whose connection is closed in a way the fuzzer cannot predict.
      const keys = Object.keys(frame).filter((key) => key !== "incarnation");
      const key = this.pick(keys);
      switch (this.int(4)) {
        case 0:
          delete frame[key];
          break;
        case 1:
        case 2:
          frame[key] = this.value();
          break;
        default:
          frame[this.pick(["extra", "type", "jobs", "constructor"])] = this.value();
      }
    }
    return frame;
  }

  /** One frame to send: text (usually) or binary. */
  next(): string | Uint8Array {
    const roll = this.int(100);
    if (roll < 50) return JSON.stringify(this.valid());
    if (roll < 75) return JSON.stringify(this.mutated());
    if (roll < 78) {
      // Spoofing: a registration for an honest worker's name.
      return JSON.stringify({
        ...this.valid(),
        type: "register",
        producer: "jobs",
        worker: "honest-1",
        incarnation: "x",
        nonce: "x",
        resendInterval: 100,
      });
    }
    if (roll < 84) return JSON.stringify({ ...this.valid(), producer: "other-flow" });
    if (roll < 87) {
      const depth = this.pick([10, 1000, 100_000]);
      return "[".repeat(depth) + "]".repeat(depth);
    }
    if (roll < 89) return `{"type":"ack","pad":"${"y".repeat(70_000 + this.int(10_000))}"}`;
    if (roll < 92) return Uint8Array.from({ length: this.int(64) }, () => this.int(256));
    if (roll < 96) {
      return Array.from({ length: this.int(200) }, () => String.fromCharCode(this.int(0x3000)))
        .join("");
    }
    return this.pick([
      "",
      "null",
      "[]",
      '"register"',
      "{",
      "{}",
      "1e999",
      '{"type":null}',
      '{"type":"ack","__proto__":{"polluted":1}}',
    ]);
  }
}

/** Whether the server must close the connection on `frame`: undecodable, oversized or spoofed. */
function fatal(frame: string | Uint8Array): boolean {
  if (typeof frame !== "string") return true;
  if (new TextEncoder().encode(frame).length > 65_536) return true;
  const decoded = decodeWorkerFrame(frame);
  if (!decoded.ok) return true;
  const { frame: parsed } = decoded;
  // Outcome frames without the outcomes feature (this flow is a plain controller) are refused.
  if (parsed.type === "done" || parsed.type === "fail") return true;
  // A registration for another worker (spoofing) or another flow is refused and closed.
  return parsed.type === "register" &&
    (parsed.producer !== "jobs" ||
      (parsed.worker !== "fuzzer" && !parsed.worker.startsWith("fuzzer#")));
}

test(
  "thousands of hostile frames end only the offender's bindings",
  { timeout: 120_000 },
  async () => {
    const flow = await startFlow();
    const honest = [1, 2].map(async (i) =>
      connectWorker({
        url: flow.server.workersUrl,
        token: await flow.token(`honest-${i}`),
        producer: "jobs",
        name: `honest-${i}`,
        window: 50,
        handler: () => new Promise((resolve) => setTimeout(resolve, 1)),
      })
    );
    const workers = await Promise.all(honest);
    const factory = new FrameFactory(prng(SEED));
    let socket: WebSocket | undefined;
    try {
      await waitFor(() => flow.of("worker-bound").length === 2, "the honest workers to bind");
      const honestBindings = flow.controller.stats().workers.map((w) => [w.worker, w.binding]);
      const processed = () => workers.reduce((sum, worker) => sum + worker.processed, 0);

      // A steady job stream for the honest workers while the fuzzer runs.
      let feeding = true;
      const feed = (async () => {
        while (feeding) await flow.submit(100).confirmed;
      })();

      // Count the frames that reached the controller (frames sent after a fatal one are dropped
      // with their connection).
      let delivered = 0;
      const attach = flow.controller.attach.bind(flow.controller);
      flow.controller.attach = (link, identity) => {
        const receiver = attach(link, identity);
        if (identity?.worker !== "fuzzer") return receiver;
        return {
          receive: (frame) => {
            delivered++;
            const kind = typeof frame !== "string" ? "binary" : (() => {
              const d = decodeWorkerFrame(frame);
              return d.ok ? d.frame.type + (fatal(frame) ? "-fatal" : "") : d.reason;
            })();
            (globalThis as unknown as { got: Record<string, number> }).got[kind] =
              ((globalThis as unknown as { got: Record<string, number> }).got[kind] ?? 0) + 1;
            receiver.receive(frame);
          },
          closed: (code, reason) => receiver.closed(code, reason),
        };
      };
      const token = await flow.token("fuzzer");
      const checkpoints: number[] = [];
      let sent = 0;
      const cuts: Promise<number>[] = [];
      let connections = 0;
      while (sent < FRAMES) {
        if (!socket || socket.readyState >= WebSocket.CLOSING) {
          socket = new WebSocket(flow.server.workersUrl.href, ["workpull.v1", token]);
          connections += 1;
          const opening = socket;
          opening.onmessage = (event) => {
            if (typeof event.data !== "string") return;
            const frame = JSON.parse(event.data);
            if (frame.type === "registered") factory.session = frame.session;
            if (frame.type === "jobs") factory.confirmed = frame.seq + frame.jobs.length - 1;
          };
          await within(
            new Promise<void>((resolve) => {
              opening.onopen = () => resolve();
              opening.onclose = () => resolve();
            }),
            "the fuzzer's socket to open",
          );
          continue;
        }
        const frame = factory.next();
        const open = socket;
        const kind = typeof frame !== "string" ? "binary" : (() => {
          const d = decodeWorkerFrame(frame);
          return d.ok ? d.frame.type + (fatal(frame) ? "-fatal" : "") : d.reason;
        })();
        (globalThis as unknown as { kinds: Record<string, number> }).kinds[kind] =
          ((globalThis as unknown as { kinds: Record<string, number> }).kinds[kind] ?? 0) + 1;
        open.send(frame);
        if (++sent % 500 === 0) checkpoints.push(processed());
        if (fatal(frame)) {
          // The server must cut this connection; send nothing more on it and move on.
          cuts.push(
            new Promise<number>((resolve) => {
              if (open.readyState === WebSocket.CLOSED) resolve(-1);
              open.addEventListener("close", (event) => resolve(event.code));
            }),
          );
          socket = undefined;
        } else if (sent % 20 === 0) {
          await new Promise((resolve) => setTimeout(resolve, 0)); // let the honest workers run
        }
      }
      socket?.close();
      console.log("sent", (globalThis as unknown as { kinds: Record<string, number> }).kinds);
      console.log("got", (globalThis as unknown as { got: Record<string, number> }).got);
      feeding = false;
      await within(feed, "the job stream to drain", 60_000);

      console.log(
        `fuzz: ${sent} frames sent (${cuts.length} fatal), ${delivered} delivered over ${connections} connections; ${
          flow.of("frame-rejected").length
        } rejected, ${
          flow.of("worker-unbound").length
        } offender bindings ended; honest jobs ${processed()}`,
      );
      assert.equal(flow.controller.state, "running");
      // Every fatal frame made the server close that connection (racing connections of the same
      // worker may instead see a supersede or a silence close first).
      const codes = await within(Promise.all(cuts), "every offending connection to be closed");
      assert.ok(
        codes.includes(1007) && codes.includes(1008) && codes.includes(1009) &&
          codes.includes(4004),
        `close codes ${[...new Set(codes)]}`,
      );
      // Frames after a fatal one are dropped with their connection, and so are the frames of an
      // abandoned connection whose registration the server reads after a newer connection's:
      // frames of different connections are not ordered, so it can be a stale incarnation,
      // whose connection is closed (4004).
      assert.ok(delivered >= sent * 0.85, `${delivered} of ${sent} frames reached the controller`);
      assert.ok(
        connections > 20,
        `the fuzzer was cut off and reconnected (${connections} connections)`,
      );
      // Honest throughput never stopped: jobs completed between every two checkpoints.
      for (let i = 1; i < checkpoints.length; i++) {
        assert.ok(
          checkpoints[i] > checkpoints[i - 1],
          `honest workers progressed between checkpoints: ${checkpoints.join(", ")}`,
        );
      }
      // Only the offender's bindings ended; the honest ones are the same bindings as before.
      const unbound = flow.of("worker-unbound");
      assert.ok(unbound.length > 0);
      assert.deepEqual(unbound.filter((e) => !e.worker.startsWith("fuzzer")), []);
      assert.deepEqual(
        flow.of("frame-rejected").filter((e) => !e.worker?.startsWith("fuzzer")),
        [],
      );
      const stillBound = flow.controller.stats().workers
        .filter((w) => w.worker.startsWith("honest"))
        .map((w) => [w.worker, w.binding]);
      assert.deepEqual(stillBound, honestBindings);
      const reasons = new Set(flow.of("frame-rejected").map((e) => e.reason));
      for (
        const reason of [
          "malformed-json",
          "invalid-frame",
          "not-text",
          "identity-mismatch",
          "wrong-producer",
        ]
      ) {
        assert.ok(reasons.has(reason as never), `saw ${reason}: ${[...reasons].join(", ")}`);
      }
      assert.ok(flow.net.some((e) => e.kind === "frame-too-large"));
    } finally {
      socket?.close();
      await Promise.all(workers.map((worker) => worker.close()));
      await flow.close();
    }
  },
);
