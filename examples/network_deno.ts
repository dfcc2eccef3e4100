/**
 * workpull over the network on Deno, in one file: a server, two worker endpoints connected
 * over loopback WebSockets with a signed token, jobs submitted over HTTP, and the stats route.
 *
 *   deno run -A examples/network_deno.ts
 *
 * In a real deployment the workers run elsewhere (other processes, machines or browser tabs)
 * with only `client.ts`, and the secret stays on the server.
 */

import { BufferedProducer, WorkPullingController } from "../mod.ts";
import { serveDeno } from "../deno.ts";
import { signToken } from "../server.ts";
import { connectWorker } from "../client.ts";

const secret = "example-secret-at-least-32-bytes-long!";
const producer = new BufferedProducer<{ to: string }>();
const controller = new WorkPullingController({
  name: "emails",
  producer,
  reconnectGrace: 5_000, // a worker that reconnects within 5 s keeps its jobs
});
await controller.start();
const server = await serveDeno({ controller, producer, auth: { secret }, port: 0 });
console.log("serving", server.url.href);

// A worker process with two endpoints (mailer#1, mailer#2), each its own binding.
const worker = connectWorker<{ to: string }>({
  url: server.workersUrl,
  token: await signToken(secret, { producer: "emails", worker: "mailer", expiresIn: 3_600_000 }),
  producer: "emails",
  name: "mailer",
  concurrency: 2,
  handler: ({ payload, messageId }) => console.log(`sending to ${payload.to} (${messageId})`),
});

// Another process submits jobs over HTTP with a client token; the answer comes once the jobs
// are accepted into the pool.
const client = await signToken(secret, { producer: "emails", expiresIn: 60_000 });
const response = await fetch(new URL("jobs", server.url), {
  method: "POST",
  headers: { authorization: `Bearer ${client}`, "content-type": "application/json" },
  body: JSON.stringify({
    jobs: ["ada@example.com", "grace@example.com", "edsger@example.com"].map((to) => ({
      messageId: `welcome-${to}`,
      payload: { to },
    })),
  }),
});
console.log("submitted", response.status, await response.json());

while (controller.stats().totals.confirmed < 3) await new Promise((r) => setTimeout(r, 10));
const stats = await fetch(new URL("stats", server.url), {
  headers: { authorization: `Bearer ${client}` },
});
const { workers, totals } = await stats.json();
console.log("stats", workers, totals);

await worker.close();
await server.close();
await controller.close();
