/**
 * What the soak reads from the controller's KV file at the end (`tools/soak/queued.ts`): the job
 * numbers held accepted and unconfirmed, from a copy, so the kept file is left as it was. Runs
 * under `deno test` only (the soak reads the file with `Deno.openKv`).
 */

import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { DenoKvWorkQueue } from "../src/queue/deno_kv/queue.ts";
import { queuePrefix, readQueued } from "../tools/soak/queued.ts";

const skip = "Deno" in globalThis ? false : "runs under deno test only: it opens Deno KV";

test(
  "the soak reads what its queue still holds unconfirmed, from a copy of the file",
  { skip },
  async () => {
    const dir = mkdtempSync(join(tmpdir(), "soak-queued-"));
    try {
      const path = join(dir, "soak.kv");
      const kv = await Deno.openKv(path);
      const queue = new DenoKvWorkQueue(kv, { prefix: queuePrefix("soak") });
      const { epoch } = await queue.load();
      const jobs = ["j1", "j2", "j3", "j4", "other"].map((messageId) => ({
        messageId,
        payload: "{}",
      }));
      await queue.commit(epoch, {
        store: { firstSeq: 1, jobs },
        accept: ["j1", "j2", "j3", "other"],
      });
      await queue.commit(epoch, { confirm: ["j2"] });
      kv.close();
      const before = readFileSync(path);

      // j2 is confirmed, j4 stored but never accepted, "other" no soak job.
      assert.deepEqual([...(await readQueued(path, "soak"))!].sort(), [1, 3]);
      assert.deepEqual(readFileSync(path), before);
      assert.equal(await readQueued(join(dir, "none.kv"), "soak"), undefined);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  },
);
