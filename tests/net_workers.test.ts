/**
 * Workers in real subprocesses over real loopback sockets: sharing, crashes, silence,
 * reconnects, fencing and backpressure. Runs under `deno test -A` and `bun test`.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { connectWorker } from "../client.ts";
import {
  type Flow,
  RawWebSocket,
  startFlow,
  TcpProxy,
  waitFor,
  within,
  type WorkerConfig,
  WorkerProcess,
} from "./fixtures/net_support.ts";

const TIMEOUT = { timeout: 60_000 };

/** Run `body` with a flow and worker processes, always cleaning up. */
type SpawnConfig = Omit<WorkerConfig, "url" | "producer"> & { url?: string };

async function withFlow(
  options: Parameters<typeof startFlow>,
  body: (flow: Flow, spawn: (config: SpawnConfig) => Promise<WorkerProcess>) => Promise<void>,
): Promise<void> {
  const flow = await startFlow(...options);
  const workers: WorkerProcess[] = [];
  const spawn = async (config: SpawnConfig) => {
    const worker = new WorkerProcess({
      url: flow.server.workersUrl.href,
      producer: "jobs",
      token: await flow.token(config.name),
      ...config,
    });
    workers.push(worker);
    return worker;
  };
  try {
    await body(flow, spawn);
  } finally {
    for (const worker of workers) worker.signal("SIGCONT");
    await Promise.all(workers.map((worker) => worker.kill()));
    await flow.close();
  }
}

function duplicates(ids: string[]): string[] {
  const seen = new Set<string>();
  return ids.filter((id) => seen.has(id) || !seen.add(id));
}

test("worker processes share one job stream, each job once", TIMEOUT, async () => {
  await withFlow([], async (flow, spawn) => {
    const workers = await Promise.all(
      ["a", "b", "c"].map((name) => spawn({ name, concurrency: 2, window: 20 })),
    );
    for (const worker of workers) {
      await worker.until(
        (r) => r.ev === "bound" && r.endpoint.endsWith("#2"),
        "both endpoints bound",
      );
    }
    const { ids, confirmed } = flow.submit(600);
    await within(confirmed, "600 confirmations", 30_000);
    const done = () => workers.flatMap((worker) => worker.done());
    await waitFor(() => done().length >= 600, "every job reported done");
    assert.deepEqual(duplicates(done()), []);
    assert.deepEqual(new Set(done()), new Set(ids));
    for (const worker of workers) assert.ok(worker.done().length > 0, "every process took jobs");
    const stats = flow.controller.stats();
    assert.deepEqual(stats.workers.map((w) => w.worker).sort(), [
      "a#1",
      "a#2",
      "b#1",
      "b#2",
      "c#1",
      "c#2",
    ]);
    assert.equal(stats.workers.reduce((sum, w) => sum + w.confirmed, 0), 600);
    assert.deepEqual(flow.of("worker-unbound"), []);
  });
});

test(
  "a worker process told SIGTERM drains: its running job finishes and is confirmed, the rest go back at once",
  TIMEOUT,
  async () => {
    // Defect: a graceful close re-ran finished work: the link closed before the running handler
    // finished and no final ack went out, so done and running jobs were requeued and run again.
    await withFlow([], async (flow, spawn) => {
      const leaving = await spawn({ name: "leaving", window: 20, delayMs: 300 });
      await leaving.until((r) => r.ev === "bound", "bound");
      const { ids, confirmed } = flow.submit(10);
      await leaving.until(() => leaving.done().length >= 2, "two jobs done, the third running");
      leaving.signal("SIGTERM");
      const stay = await spawn({ name: "stay", window: 20, delayMs: 1 });
      // The jobs never started come back at once, while the running one is still running.
      const requeued = flow.of("requeued").flatMap((event) => event.messageIds);
      await waitFor(() => stay.done().length > 0, "the other worker to get the released jobs");
      const exit = await within(leaving.exited, "the draining worker to exit", 10_000);
      assert.equal(exit.code, 143, `exit code ${exit.code}: drained, then 128 + SIGTERM`);
      await within(confirmed, "every job confirmed", 15_000);
      const ranTwice = leaving.done().filter((id) => stay.done().includes(id));
      assert.deepEqual(ranTwice, [], "no finished job ran again");
      const started = leaving.started();
      assert.deepEqual(started, leaving.done(), "the running job was allowed to finish");
      assert.ok(started.length >= 3, `${started.length} jobs ran on the leaving worker`);
      assert.deepEqual(
        requeued.filter((id) => started.includes(id)),
        [],
        "nothing it started was handed back",
      );
      assert.deepEqual(new Set([...leaving.done(), ...stay.done()]), new Set(ids));
    });
  },
);

test("a worker killed with SIGKILL mid-job loses its jobs to the survivors", TIMEOUT, async () => {
  await withFlow([], async (flow, spawn) => {
    const victim = await spawn({ name: "victim", window: 10, delayMs: 20 });
    const survivors = await Promise.all(
      ["s1", "s2"].map((name) => spawn({ name, window: 10, delayMs: 5 })),
    );
    for (const worker of [victim, ...survivors]) {
      await worker.until((r) => r.ev === "bound", "bound");
    }
    const { ids, confirmed } = flow.submit(300);
    await victim.until(
      (r) => r.ev === "start" && victim.done().length >= 3,
      "the victim to be busy",
    );
    victim.signal("SIGKILL");
    await victim.exited;
    const inFlight = victim.started().filter((id) => !victim.done().includes(id));
    await within(confirmed, "every job confirmed", 30_000);

    const unbound = flow.of("worker-unbound").filter((e) => e.worker === "victim");
    assert.equal(unbound.length, 1);
    assert.equal(unbound[0].reason, "disconnected");
    assert.ok(unbound[0].requeued > 0, "the victim held unconfirmed jobs");
    const requeued = flow.of("requeued").flatMap((e) => e.messageIds);
    const survivorsDone = () => new Set(survivors.flatMap((worker) => worker.done()));
    await waitFor(
      () => requeued.every((id) => survivorsDone().has(id)),
      "the survivors to report the requeued jobs done",
    );
    const survived = survivorsDone();
    for (const id of inFlight) assert.ok(requeued.includes(id), `${id} (in flight) was requeued`);
    const everyone = new Set([...victim.done(), ...survived]);
    assert.deepEqual(ids.filter((id) => !everyone.has(id)), []);
  });
});

test(
  "a worker that stops answering is ended as silent; a survivor takes its jobs",
  TIMEOUT,
  async () => {
    await withFlow([{ silenceIntervals: 3, retryInterval: 25 }], async (flow, spawn) => {
      const frozen = await spawn({ name: "frozen", window: 5, delayMs: 40, resendInterval: 100 });
      const survivor = await spawn({ name: "alive", window: 5, delayMs: 2, resendInterval: 100 });
      for (const worker of [frozen, survivor]) await worker.until((r) => r.ev === "bound", "bound");
      const { confirmed } = flow.submit(100);
      await frozen.until((r) => r.ev === "start", "the frozen worker to start a job");
      frozen.signal("SIGSTOP"); // like a suspended tab: the socket stays open, nothing is sent
      const stoppedAt = performance.now();
      await within(confirmed, "every job confirmed by the survivor", 30_000);
      const unbound = flow.events.find((r) =>
        r.type === "worker-unbound" && r.event.worker === "frozen"
      );
      assert.ok(unbound && unbound.type === "worker-unbound");
      assert.equal(unbound.event.reason, "silent");
      assert.ok(unbound.event.requeued > 0);
      // Bound: 3 intervals of 100 ms since the last frame, checked every 25 ms (+ scheduling slack).
      assert.ok(unbound.at - stoppedAt < 2000, `detected after ${unbound.at - stoppedAt} ms`);
      const requeued = flow.of("requeued").filter((e) => e.worker === "frozen");
      const survived = new Set(survivor.done());
      for (const id of requeued.flatMap((e) => e.messageIds)) assert.ok(survived.has(id));
    });
  },
);

test(
  "a reconnect within the grace resumes the binding with no duplicate delivery",
  TIMEOUT,
  async () => {
    await withFlow([{ reconnectGrace: 10_000 }], async (flow, spawn) => {
      const proxy = await TcpProxy.start(flow.server.port);
      try {
        const url = new URL(flow.server.workersUrl);
        url.port = String(proxy.port);
        const worker = await spawn({ name: "w", window: 20, delayMs: 3, url: url.href });
        await worker.until((r) => r.ev === "bound", "bound");
        const { ids, confirmed } = flow.submit(400);
        await waitFor(() => worker.done().length >= 50, "50 jobs done");
        proxy.cut(); // both ends see the TCP connection drop, no WebSocket close frame
        await worker.until((r) => r.ev === "disconnected", "the worker to notice");
        await within(confirmed, "every job confirmed after the reconnect", 30_000);
        await waitFor(() => worker.done().length >= ids.length, "every job reported done");
        assert.ok(proxy.connections >= 2, "the worker reconnected");
        assert.deepEqual(
          duplicates(worker.started()),
          [],
          "no job was handed to the handler twice",
        );
        assert.deepEqual(new Set(worker.done()), new Set(ids));
        assert.deepEqual(flow.of("worker-unbound"), []);
        assert.deepEqual(flow.of("requeued"), []);
        assert.equal(flow.of("worker-bound").length, 1, "one binding throughout");
        assert.equal(worker.reports.filter((r) => r.ev === "bound").length, 1);
      } finally {
        await proxy.close();
      }
    });
  },
);

test("a replaced incarnation cannot bind again", TIMEOUT, async () => {
  await withFlow([], async (flow, spawn) => {
    const old = await spawn({ name: "w", incarnation: "inc-old", resendInterval: 100 });
    await old.until((r) => r.ev === "bound", "the old incarnation bound");
    const current = await spawn({ name: "w", incarnation: "inc-new", resendInterval: 100 });
    await current.until((r) => r.ev === "bound", "the new incarnation bound");
    // The old process is still running and keeps registering: every attempt is refused.
    await waitFor(
      () => flow.of("frame-rejected").some((e) => e.reason === "stale-incarnation"),
      "a stale registration to be refused",
    );
    const { confirmed } = flow.submit(50);
    await within(confirmed, "jobs confirmed", 20_000);
    await waitFor(() => current.done().length >= 50, "every job reported done");
    const bound = flow.of("worker-bound");
    assert.deepEqual(bound.map((e) => e.incarnation), ["inc-old", "inc-new"]);
    assert.deepEqual(
      flow.of("worker-unbound").map((e) => [e.incarnation, e.reason]),
      [["inc-old", "replaced"]],
    );
    assert.equal(current.done().length, 50);
    assert.equal(old.done().length, 0);
    const stats = flow.controller.stats();
    assert.deepEqual(stats.workers.map((w) => [w.worker, w.incarnation]), [["w", "inc-new"]]);
  });
});

test(
  "a worker that stops reading is cut off by its outbound buffer; its jobs requeue",
  TIMEOUT,
  async () => {
    // The controller's byte budget per worker (maxInFlightBytes, default 4 MiB) is raised so the
    // reader is granted 8 MiB: it is the edge's buffer limit that must catch it here.
    const controllerOptions = { maxInFlightBytes: 64 * 1024 * 1024 };
    await withFlow([controllerOptions, { maxBufferedBytes: 1024 * 1024 }], async (flow) => {
      const token = await flow.token("reader");
      const { response, ws } = await RawWebSocket.connect(flow.server.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
      assert.equal(response.status, 101);
      assert.equal(response.headers["sec-websocket-protocol"], "workpull.v1");
      const honest = connectWorker({
        url: flow.server.workersUrl,
        token: await flow.token("honest"),
        producer: "jobs",
        name: "honest",
        window: 50,
        handler: () => {},
      });
      try {
        ws.send(JSON.stringify({
          type: "register",
          producer: "jobs",
          worker: "reader",
          incarnation: "i1",
          nonce: "n1",
          resendInterval: 60_000,
        }));
        await waitFor(() => ws.messages.length > 0, "the registration answer");
        const registered = JSON.parse(ws.messages[0]);
        ws.pause(); // from here on nothing is read: the kernel buffers fill up
        ws.send(JSON.stringify({
          type: "request",
          session: registered.session,
          nonce: "n1",
          confirmed: 0,
          upTo: 2000,
          resend: false,
        }));
        // 1000 jobs of 8 KiB: the reader's grant lets 8 MiB go its way; the honest worker's
        // window of 50 keeps its bursts at 400 KiB, below the 1 MiB limit.
        const payload = "x".repeat(8 * 1024);
        const { confirmed } = flow.submit(1000, () => payload);
        await within(confirmed, "every job confirmed by the honest worker", 30_000);
        const unbound = flow.of("worker-unbound").find((e) => e.worker === "reader");
        assert.equal(unbound?.reason, "backpressure");
        assert.deepEqual(flow.of("worker-unbound").map((e) => e.worker), ["reader"]);
        assert.ok(unbound!.requeued > 0);
        const report = flow.net.find((e) => e.kind === "backpressure");
        assert.ok(report && report.kind === "backpressure" && report.worker === "reader");
        assert.ok(report.bufferedBytes > 1024 * 1024);
      } finally {
        ws.destroy();
        await honest.close();
      }
    });
  },
);
