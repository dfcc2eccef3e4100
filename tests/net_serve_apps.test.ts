/**
 * Several flows on one port: `apps` mounts more workpull apps beside the first, each with its
 * own queue and credentials, on the runtime running the test.
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { JobQueue } from "../mod.ts";
import { signToken } from "../server.ts";
import { SECRET, serve } from "./fixtures/net_support.ts";

test("apps serves each flow under its own base path with its own credentials", async () => {
  const emails = new JobQueue({ name: "emails" });
  const thumbs = new JobQueue({ name: "thumbs" });
  await emails.start();
  await thumbs.start();
  const server = await serve({
    queue: emails,
    auth: { secret: SECRET },
    basePath: "/flows/emails",
    apps: [{ queue: thumbs, auth: { secret: SECRET }, basePath: "/flows/thumbs" }],
    drainOnSignals: false,
  });
  try {
    const client = (flow: string) => signToken(SECRET, { producer: flow, expiresIn: 60_000 });
    const post = async (flow: string, token: string) =>
      await fetch(new URL(`/flows/${flow}/jobs`, server.url), {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body: JSON.stringify({ payload: { flow } }),
      });
    const added = await post("thumbs", await client("thumbs"));
    assert.equal(added.status, 201, await added.text());
    assert.equal((await post("emails", await client("emails"))).status, 201);
    const crossed = await post("thumbs", await client("emails"));
    assert.equal(crossed.status, 401, "a token for another flow");
    await crossed.body?.cancel();
    assert.equal(thumbs.stats().backlog.waiting, 1);
    assert.equal(emails.stats().backlog.waiting, 1);
    assert.equal(server.url.pathname, "/flows/emails/");
  } finally {
    await server.close();
    await emails.close();
    await thumbs.close();
  }
});

test("apps entries are checked at once, naming the bad one", async () => {
  const queue = new JobQueue({ name: "jobs" });
  await assert.rejects(
    async () =>
      await serve({
        queue,
        auth: { secret: SECRET },
        basePath: "/a",
        apps: [{ queue, auth: { secret: SECRET }, basePath: "/a/" }],
        drainOnSignals: false,
      }),
    /option "apps\.0\.basePath" must start with "\/" and differ from the others/,
  );
  await queue.close();
});
