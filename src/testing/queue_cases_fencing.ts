/**
 * Conformance cases for epochs and ownership (reference-semantics §4.1, §4.7 cases 1–4): each
 * load issues a greater epoch that fences every earlier one, across handles too; a load that
 * fails, or any call whose signal is already aborted, changes nothing.
 *
 * @module
 */

import {
  casesFor,
  check,
  type ConformanceCase,
  equal,
  fresh,
  job,
  message,
  payloadOf,
  type QueueFactory,
  rejects,
  resolves,
} from "./conformance_kit.ts";

/**
 * The epoch and ownership cases.
 *
 * @example
 * ```ts
 * import { fencingCases } from "./queue_cases_fencing.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const cases = fencingCases({ open: () => ({ queue: new MemoryWorkQueue(), close() {} }) });
 * for (const rule of cases) if (rule.requires.length === 0) await rule.run();
 * ```
 */
export function fencingCases(factory: QueueFactory): ConformanceCase[] {
  const rule = casesFor(factory);
  return [
    rule(
      "load on an empty queue returns currentSeq 0, no jobs and a positive epoch",
      [],
      async ({ queue }) => {
        const { epoch, state } = await queue.load();
        check(isEpoch(epoch), `the epoch must be a positive integer, got ${epoch}`);
        equal(state, { currentSeq: 0, unconfirmed: [] }, "the state of an empty queue");
      },
    ),

    rule("every load returns a strictly greater epoch", [], async ({ queue }) => {
      let last = 0;
      for (let i = 1; i <= 5; i++) {
        const { epoch } = await queue.load();
        check(isEpoch(epoch) && epoch > last, `load ${i} returned epoch ${epoch} after ${last}`);
        last = epoch;
      }
    }),

    rule(
      "writes under an earlier epoch or under epoch 0 are fenced and change nothing",
      [],
      async (ctx) => {
        const { queue } = ctx;
        const { epoch: old } = await queue.load();
        await queue.store(old, job("a", 1));
        await queue.accept(old, "a");
        await queue.store(old, job("b", 2));
        const { epoch } = await queue.load();
        for (const stale of [old, 0]) {
          const under = `under epoch ${stale} (current ${epoch})`;
          await rejects(queue.store(stale, job("c", 3)), "fenced", `store of a new job ${under}`);
          await rejects(
            queue.store(stale, job("b", 3)),
            "fenced",
            `store of a stored job ${under}`,
          );
          await rejects(queue.accept(stale, "b"), "fenced", `accept ${under}`);
          await rejects(queue.accept(stale, "a"), "fenced", `a repeated accept ${under}`);
          await rejects(queue.accept(stale, "zz"), "fenced", `accept of an unknown job ${under}`);
          await rejects(queue.confirmMessage(stale, "a"), "fenced", `confirm ${under}`);
          if (queue.commit) {
            const batch = {
              store: { firstSeq: 3, jobs: [{ messageId: "c", payload: "1" }] },
              accept: ["b"],
            };
            await rejects(ctx.commit(stale, batch), "fenced", `commit ${under}`);
            await rejects(ctx.commit(stale, {}), "fenced", `an empty commit ${under}`);
          }
        }
        const after = await queue.load();
        equal(
          after.state,
          { currentSeq: 2, unconfirmed: [message("a", 1)] },
          "the state after fenced writes",
        );
        equal(
          await queue.store(after.epoch, job("c", 3)),
          fresh(3, payloadOf("c")),
          "store of c afterwards",
        );
      },
    ),

    rule("an epoch that was never issued is fenced", [], async ({ queue }) => {
      const { epoch } = await queue.load();
      await rejects(
        queue.store(epoch + 1, job("a", 1)),
        "fenced",
        `store under epoch ${epoch + 1}`,
      );
      await rejects(queue.accept(epoch + 1, "a"), "fenced", `accept under epoch ${epoch + 1}`);
      equal(
        await queue.store(epoch, job("a", 1)),
        fresh(1, payloadOf("a")),
        "store under the real epoch",
      );
    }),

    rule(
      "a handle that loaded earlier is fenced once another handle loads",
      ["reopen"],
      async (ctx) => {
        const first = ctx.queue;
        const { epoch: e1 } = await first.load();
        await first.store(e1, job("a", 1));
        await first.accept(e1, "a");
        await first.store(e1, job("b", 2));
        const second = await ctx.reopen();
        const { epoch: e2, state } = await second.load();
        check(e2 > e1, `the second handle's epoch ${e2} must exceed ${e1}`);
        equal(
          state,
          { currentSeq: 2, unconfirmed: [message("a", 1)] },
          "the state seen by the second handle",
        );
        await rejects(first.store(e1, job("c", 3)), "fenced", "store through the first handle");
        await rejects(first.accept(e1, "b"), "fenced", "accept through the first handle");
        await rejects(first.confirmMessage(e1, "a"), "fenced", "confirm through the first handle");
        if (first.commit) {
          await rejects(
            ctx.commit(e1, { accept: ["b"] }),
            "fenced",
            "commit through the first handle",
          );
        }
        equal(
          await second.store(e2, job("c", 3)),
          fresh(3, payloadOf("c")),
          "store through the second handle",
        );
        const { epoch: e3, state: again } = await first.load();
        check(e3 > e2, `the first handle's new epoch ${e3} must exceed ${e2}`);
        equal(again.currentSeq, 3, "currentSeq seen by the first handle after reloading");
        await rejects(
          second.store(e2, job("d", 4)),
          "fenced",
          "store through the second handle after the first reloaded",
        );
      },
    ),

    rule(
      "a load rejected by an aborted signal does not change the owner",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        await queue.store(epoch, job("a", 1));
        const reason = new Error("aborted by the conformance suite");
        await rejects(
          queue.load({ signal: AbortSignal.abort(reason) }),
          (e) => e === reason,
          "an aborted load",
        );
        equal(
          await resolves(
            queue.store(epoch, job("b", 2)),
            "store by the owner after the aborted load",
          ),
          fresh(2, payloadOf("b")),
          "store b",
        );
      },
    ),

    rule("a load that fails partway does not change the owner", ["failNextLoad"], async (ctx) => {
      const { queue } = ctx;
      const { epoch } = await queue.load();
      await queue.store(epoch, job("a", 1));
      ctx.fixture.failNextLoad!();
      await rejects(queue.load(), "any", "the load made to fail");
      equal(
        await resolves(queue.store(epoch, job("b", 2)), "store by the owner after the failed load"),
        fresh(2, payloadOf("b")),
        "store b",
      );
      const next = await queue.load();
      check(next.epoch > epoch, `the next load's epoch ${next.epoch} must exceed ${epoch}`);
      equal(next.state.currentSeq, 2, "currentSeq after the failed load");
    }),

    rule(
      "a call with an already-aborted signal rejects with its reason and changes nothing",
      [],
      async (ctx) => {
        const { queue } = ctx;
        const { epoch } = await queue.load();
        await queue.store(epoch, job("a", 1));
        await queue.store(epoch, job("b", 2));
        await queue.accept(epoch, "a");
        const reason = new Error("aborted by the conformance suite");
        const options = { signal: AbortSignal.abort(reason) };
        const isReason = (error: unknown) => error === reason;
        await rejects(queue.load(options), isReason, "load");
        await rejects(queue.store(epoch, job("c", 3), options), isReason, "store");
        await rejects(queue.accept(epoch, "b", options), isReason, "accept");
        await rejects(queue.confirmMessage(epoch, "a", options), isReason, "confirm");
        if (queue.commit) {
          const batch = {
            store: { firstSeq: 3, jobs: [{ messageId: "c", payload: "3" }] },
            accept: ["b"],
          };
          await rejects(ctx.commit(epoch, batch, options), isReason, "commit");
        }
        equal(
          await resolves(queue.store(epoch, job("c", 3)), "store by the owner afterwards"),
          fresh(3, payloadOf("c")),
          "store c",
        );
        equal((await queue.load()).state.unconfirmed, [message("a", 1)], "unconfirmed afterwards");
      },
    ),
  ];
}

function isEpoch(epoch: number): boolean {
  return Number.isSafeInteger(epoch) && epoch > 0;
}
