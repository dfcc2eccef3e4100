/**
 * Feature `heard` over real sockets: a worker that names it gets a `heard` frame for a request the
 * pool cannot fill and for an ack (nothing else answers them), so its TCP stack is acknowledged at
 * once. Without it (Deno's WebSocket client leaves Nagle's algorithm on) the worker's next frame
 * waited for the controller's delayed ACK, 40 ms on Linux: the last confirmations of every burst
 * came 40 ms late (`bench/README.md`). A worker that does not name the feature never gets one.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { startFlow, waitFor, within } from "./fixtures/net_support.ts";

/** A worker speaking raw frames over the runtime's own WebSocket client. */
async function rawWorker(url: string, token: string, features?: string[]) {
  const messages: { type: string; session?: string; seq?: number; jobs?: unknown[] }[] = [];
  const socket = new WebSocket(url, ["workpull.v1", token]);
  socket.onmessage = (event) => messages.push(JSON.parse(event.data as string));
  await within(
    new Promise<void>((resolve, reject) => {
      socket.onopen = () => resolve();
      socket.onerror = () => reject(new Error("the socket failed"));
    }),
    "the socket to open",
  );
  const nonce = crypto.randomUUID();
  socket.send(JSON.stringify({
    type: "register",
    producer: "jobs",
    worker: "raw",
    incarnation: crypto.randomUUID(),
    nonce,
    resendInterval: 60_000,
    ...(features ? { features } : {}),
  }));
  await waitFor(() => messages.some((m) => m.type === "registered"), "the registration");
  const session = messages.find((m) => m.type === "registered")!.session!;
  const send = (frame: Record<string, unknown>) =>
    socket.send(JSON.stringify({ ...frame, session, nonce }));
  const closed = new Promise<void>((resolve) => socket.onclose = () => resolve());
  return {
    messages,
    types: () => messages.map((m) => m.type),
    request: (confirmed: number, upTo: number) =>
      send({ type: "request", confirmed, upTo, resend: false }),
    ack: (confirmed: number) => send({ type: "ack", confirmed }),
    close: async () => {
      socket.close();
      await within(closed, "the socket to close");
    },
  };
}

test("a worker naming heard is answered at once when nothing else answers it", async () => {
  const flow = await startFlow();
  try {
    const worker = await rawWorker(flow.server.workersUrl.href, await flow.token("raw"), [
      "heard",
    ]);
    worker.request(0, 2); // the pool is empty: no jobs frame answers it
    await waitFor(() => worker.types().includes("heard"), "a heard frame");
    const { confirmed } = flow.submit(2);
    await waitFor(
      () => worker.messages.filter((m) => m.type === "jobs").flatMap((m) => m.jobs!).length === 2,
      "both jobs",
    );
    const heardBefore = worker.types().filter((type) => type === "heard").length;
    worker.ack(2); // an ack has no other answer
    await waitFor(
      () => worker.types().filter((type) => type === "heard").length > heardBefore,
      "a heard frame for the ack",
    );
    await within(confirmed, "both jobs confirmed");
    await worker.close();
  } finally {
    await flow.close();
  }
});

test("a worker that does not name heard never gets one", async () => {
  const flow = await startFlow();
  try {
    const worker = await rawWorker(flow.server.workersUrl.href, await flow.token("raw"));
    worker.request(0, 1); // unanswered: no heard for this worker
    const { confirmed } = flow.submit(1);
    await waitFor(() => worker.types().includes("jobs"), "the job");
    worker.ack(1);
    await within(confirmed, "the job confirmed");
    // The controller has handled the ack (the job is confirmed); anything it sent for the ack
    // went out in the same turn, before the confirmation resolved.
    const more = flow.submit(1);
    worker.request(1, 2);
    await waitFor(() => worker.messages.filter((m) => m.type === "jobs").length === 2, "job 2");
    worker.ack(2);
    await within(more.confirmed, "job 2 confirmed");
    assert.deepEqual(worker.types(), ["registered", "jobs", "jobs"]);
    await worker.close();
  } finally {
    await flow.close();
  }
});
