/**
 * The batched raw WebSocket baseline: the practical limit of workpull's wire protocol. It moves
 * jobs the way workpull does — many jobs in one frame, confirmed cumulatively within a window
 * that the client tops up at half — and does nothing else: no queue, no pool, no round-robin
 * over bindings, no sessions, nonces or sequences checks, no validation, no redelivery.
 *
 * Server (this process, Deno or Bun): per socket it keeps the demand the client granted (`upTo`),
 * what it sent (`sent`) and what is confirmed. When demand arrives, or a run starts, it sends
 * every granted job at once as one text frame
 * `{"type":"jobs","seq":s,"jobs":[{"id":<random UUID>,"payload":{"n":i}},…]}`, the shape of
 * workpull's jobs frame. The client (`bench/scenarios/batched_raw_client.ts`) parses the frame
 * with `JSON.parse`, takes each job in order, and after each one does what a workpull worker
 * endpoint does: `{"type":"request","confirmed":c,"upTo":c+window}` when at most half the
 * window remains granted, else `{"type":"ack","confirmed":c}` once the frame is used up. The
 * server parses every frame with `JSON.parse`, and answers one it sends no jobs for with
 * `{"type":"heard"}`, as workpull's controller does (feature `heard`: a client with Nagle's
 * algorithm on, Deno's, would otherwise hold its next frame for the delayed ACK, 40 ms, at the end
 * of every run). A run ends when every job is confirmed.
 *
 * Spoken as `"workpull"`, the same server is the **scripted controller**: it answers a workpull
 * worker's `register` with a `registered` (one session, one binding a socket), writes the same
 * jobs frames with the session in them, and reads the worker's `request` and `ack` frames, so
 * that real workpull worker processes (`connectWorker`, `bench/scenarios/worker_process.ts`) can
 * run at the limit of the wire: what workpull's worker side allows with a controller that costs
 * nothing (`tools/round_trips.ts`). A `request` with `resend` takes back what was sent and not
 * confirmed, and sends fresh jobs in its place.
 *
 * @module
 */

import { type Child, spawnChild, withTimeout } from "./proc.ts";
import { now, repoPath, runtime, scriptCommand, until } from "./runtime.ts";
import { type Setup, spawnWorker, type Topology, topologyLabel } from "./setups.ts";
import { HEARD } from "./servers.ts";
import { SUBPROTOCOL } from "../../src/protocol/schemas.ts";
import type { FrameRecorder } from "./timeline.ts";

/** The batched baseline server. */
export interface BatchedRawServer {
  readonly port: number;
  /** Sockets connected so far. */
  readonly sockets: number;
  /** Jobs confirmed so far, over every run. */
  readonly confirmed: number;
  /** Send `jobs` jobs over the connected sockets within their demand; resolves when confirmed. */
  run(jobs: number): Promise<void>;
  close(): Promise<void>;
}

/** Which clients the server talks to: the batched raw client, or workpull's worker endpoints. */
export type BatchedProtocol = "raw" | "workpull";

/** The scripted controller's session and binding names. */
const SESSION = "scripted";

interface Peer {
  readonly index: number;
  readonly send: (text: string) => void;
  /** Highest sequence granted, sent, confirmed. */
  upTo: number;
  sent: number;
  confirmed: number;
}

/** What both protocols' worker frames tell the server: a cumulative confirmation, and demand. */
interface BatchedFrame {
  confirmed: number;
  upTo?: number;
}

/**
 * Start the batched baseline server on 127.0.0.1, a free port; `recorder` (a tool's) notes the
 * frames its sockets handle; `protocol` `"workpull"` makes it the scripted controller.
 */
export async function batchedRawServer(
  recorder?: FrameRecorder,
  protocol: BatchedProtocol = "raw",
): Promise<BatchedRawServer> {
  const head = protocol === "workpull"
    ? `{"type":"jobs","session":"${SESSION}","seq":`
    : `{"type":"jobs","seq":`;
  const peers: Peer[] = [];
  let total = 0;
  let handedOut = 0;
  let confirmed = 0;
  let target = 0;
  let finish: (() => void) | undefined;

  /** Send `peer` every granted job still to hand out, as one frame; whether there were any. */
  const fill = (peer: Peer): boolean => {
    const count = Math.min(peer.upTo - peer.sent, total - handedOut);
    if (count <= 0) return false;
    let frame = `${head}${peer.sent + 1},"jobs":[`;
    for (let i = 0; i < count; i++) {
      handedOut += 1;
      frame += `${i === 0 ? "" : ","}{"id":"${crypto.randomUUID()}","payload":${
        JSON.stringify({ n: handedOut })
      }}`;
    }
    const text = `${frame}]}`;
    peer.send(text);
    recorder?.record(peer.index, "out", text.length);
    peer.sent += count;
    return true;
  };
  /** Take `frame`'s confirmation and demand, and answer: the granted jobs, or a `heard`. */
  const confirmAndFill = (peer: Peer, frame: BatchedFrame) => {
    if (frame.confirmed > peer.confirmed) {
      confirmed += frame.confirmed - peer.confirmed;
      peer.confirmed = frame.confirmed;
    }
    if (frame.upTo !== undefined && frame.upTo > peer.upTo) peer.upTo = frame.upTo;
    if (!fill(peer)) peer.send(HEARD); // no job to answer with (see HEARD)
    if (confirmed >= target) finish?.();
  };
  /** The batched limit: every frame is a confirmation with demand. */
  const onRawFrame = (peer: Peer, data: unknown) => {
    recorder?.record(peer.index, "in", (data as string).length);
    confirmAndFill(peer, JSON.parse(data as string));
    recorder?.record(peer.index, "done", 0);
  };
  /** The scripted controller: a registration too, and a `resend` takes back the unconfirmed. */
  const onWorkpullFrame = (peer: Peer, data: unknown) => {
    recorder?.record(peer.index, "in", (data as string).length);
    const frame = JSON.parse(data as string) as BatchedFrame & {
      type: string;
      resend?: boolean;
      nonce?: string;
      features?: string[];
    };
    if (frame.type === "register") {
      const features = frame.features?.includes("heard") ? ["heard"] : [];
      const registered = {
        type: "registered",
        session: SESSION,
        binding: `b${peer.index}`,
        nextSeq: peer.confirmed + 1,
        nonce: frame.nonce,
        features,
      };
      peer.send(JSON.stringify(registered));
    } else {
      if (frame.resend && peer.sent > peer.confirmed) {
        handedOut -= peer.sent - Math.max(peer.confirmed, frame.confirmed);
        peer.sent = Math.max(peer.confirmed, frame.confirmed);
      }
      confirmAndFill(peer, frame);
    }
    recorder?.record(peer.index, "done", 0);
  };
  const onFrame = protocol === "workpull" ? onWorkpullFrame : onRawFrame;
  const run = (jobs: number) =>
    new Promise<void>((resolve) => {
      total = jobs;
      handedOut = 0;
      target = confirmed + jobs;
      finish = () => {
        finish = undefined;
        resolve();
      };
      for (const peer of peers) fill(peer);
    });
  const peerOf = (send: (text: string) => void): Peer => {
    const peer: Peer = { index: peers.length, send, upTo: 0, sent: 0, confirmed: 0 };
    peers.push(peer);
    return peer;
  };
  const server = (port: number, close: () => Promise<void>): BatchedRawServer => ({
    port,
    get sockets() {
      return peers.length;
    },
    get confirmed() {
      return confirmed;
    },
    run,
    close,
  });

  if (runtime === "node") {
    // Node: a `ws` server, as for the per-job raw baseline (serveNode is built on it too).
    const { WebSocketServer } = await import("ws");
    const wss = new WebSocketServer({ port: 0, host: "127.0.0.1", perMessageDeflate: false });
    wss.on("connection", (socket) => {
      const peer = peerOf((text) => socket.send(text));
      socket.on("message", (data) => onFrame(peer, data.toString()));
    });
    await new Promise((resolve) => wss.once("listening", resolve));
    return server((wss.address() as { port: number }).port, () =>
      new Promise<void>((resolve) => {
        for (const client of wss.clients) client.terminate();
        wss.close(() => resolve());
      }));
  }
  if (runtime === "deno") {
    const deno = Deno.serve({ port: 0, hostname: "127.0.0.1", onListen() {} }, (request) => {
      const { socket, response } = Deno.upgradeWebSocket(
        request,
        protocol === "workpull" ? { protocol: SUBPROTOCOL } : {},
      );
      let peer: Peer | undefined;
      socket.onopen = () => peer = peerOf((text) => socket.send(text));
      socket.onmessage = (event) => onFrame(peer!, event.data);
      return response;
    });
    return server(deno.addr.port, () => deno.shutdown());
  }
  type BunSocket = { send(text: string): number; data: { peer?: Peer } };
  const bun = (globalThis as unknown as {
    Bun: {
      serve(options: unknown): { port: number; stop(force: boolean): Promise<void> | void };
    };
  }).Bun;
  const served = bun.serve({
    port: 0,
    hostname: "127.0.0.1",
    fetch: (request: Request, srv: { upgrade(request: Request, options: unknown): boolean }) =>
      srv.upgrade(request, {
          data: {},
          headers: protocol === "workpull" ? { "sec-websocket-protocol": SUBPROTOCOL } : undefined,
        })
        ? undefined
        : new Response("upgrade", { status: 426 }),
    websocket: {
      open: (ws: BunSocket) => ws.data.peer = peerOf((text) => void ws.send(text)),
      message: (ws: BunSocket, message: string) => onFrame(ws.data.peer!, message),
    },
  });
  return server(served.port, async () => void await served.stop(true));
}

/** The batched baseline as a {@linkcode Setup}: its server here, client processes. */
export class BatchedRawSetup implements Setup {
  readonly label: string;
  readonly server: BatchedRawServer;
  readonly clients: Child[];

  private constructor(label: string, server: BatchedRawServer, clients: Child[]) {
    this.label = label;
    this.server = server;
    this.clients = clients;
  }

  /**
   * `topology.processes` client processes with `topology.perProcess` sockets each; `recorder`
   * (a tool's) notes the frames the server handles.
   */
  static async start(
    topology: Topology,
    window: number,
    recorder?: FrameRecorder,
  ): Promise<BatchedRawSetup> {
    const server = await batchedRawServer(recorder);
    const clients: Child[] = [];
    try {
      const { command, args } = scriptCommand(
        runtime,
        repoPath("bench/scenarios/batched_raw_client.ts"),
      );
      for (let i = 0; i < topology.processes; i++) {
        const env = {
          WORKPULL_BENCH: JSON.stringify({
            url: `ws://127.0.0.1:${server.port}/`,
            sockets: topology.perProcess,
            window,
          }),
        };
        const client = spawnChild(`batched raw client ${i}`, command, args, { env, stdin: true });
        clients.push(client);
        await client.next((report) => report.ev === "ready", "ready", 30_000);
      }
      const sockets = topology.processes * topology.perProcess;
      await until(() => server.sockets === sockets, "batched raw sockets", 10_000);
    } catch (error) {
      await Promise.all(clients.map((client) => client.kill()));
      await server.close();
      throw error;
    }
    return new BatchedRawSetup(`batched raw WebSocket ${topologyLabel(topology)}`, server, clients);
  }

  /** Hand out `jobs` jobs; jobs/s from the first frame to the last confirmation. */
  async run(jobs: number): Promise<number> {
    const started = now();
    await withTimeout(this.server.run(jobs), 120_000, `${jobs} batched raw confirmations`);
    return jobs / ((now() - started) / 1000);
  }

  async close(): Promise<void> {
    await Promise.all(this.clients.map((client) => client.kill()));
    await withTimeout(this.server.close(), 10_000, "the batched raw server to close");
  }
}

/**
 * The scripted controller as a {@linkcode Setup}: the batched server here, speaking workpull's
 * worker protocol, and real workpull worker processes (no-op handler). Nothing of the controller
 * runs: what is left is the wire and workpull's worker side.
 */
export class ScriptedControllerSetup implements Setup {
  readonly label: string;
  readonly server: BatchedRawServer;
  readonly workers: Child[];

  private constructor(label: string, server: BatchedRawServer, workers: Child[]) {
    this.label = label;
    this.server = server;
    this.workers = workers;
  }

  /** `topology.processes` worker processes of `topology.perProcess` endpoints each. */
  static async start(topology: Topology, window: number): Promise<ScriptedControllerSetup> {
    const server = await batchedRawServer(undefined, "workpull");
    const workers: Child[] = [];
    try {
      for (let i = 0; i < topology.processes; i++) {
        workers.push(
          await spawnWorker(`scripted controller's worker ${i}`, {
            mode: "workpull",
            url: `ws://127.0.0.1:${server.port}/`,
            name: `w${i}`,
            concurrency: topology.perProcess,
            window,
          }),
        );
      }
    } catch (error) {
      await Promise.all(workers.map((worker) => worker.kill()));
      await server.close();
      throw error;
    }
    return new ScriptedControllerSetup(
      `scripted controller ${topologyLabel(topology)}`,
      server,
      workers,
    );
  }

  /** Hand out `jobs` jobs; jobs/s from the first frame to the last confirmation. */
  async run(jobs: number): Promise<number> {
    const started = now();
    await withTimeout(this.server.run(jobs), 120_000, `${jobs} scripted confirmations`);
    return jobs / ((now() - started) / 1000);
  }

  async close(): Promise<void> {
    await Promise.all(this.workers.map((worker) => worker.kill()));
    await withTimeout(this.server.close(), 10_000, "the scripted controller to close");
  }
}
