/**
 * Conformance cases for the single-call contract of the durable work queue (reference-semantics
 * §4.1–§4.7 cases 5–11, 13, 14): first-write-wins stores, accept and confirm, what load returns,
 * compaction, defensive copies, malformed state and the payload limit.
 *
 * @module
 */

import type { UnconfirmedMessage } from "../queue/work_queue.ts";
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
  repeat,
  resolves,
  utf8Length,
} from "./conformance_kit.ts";

/**
 * The store, accept, confirm and load cases.
 *
 * @example
 * ```ts
 * import { contractCases } from "./queue_cases_contract.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const cases = contractCases({ open: () => ({ queue: new MemoryWorkQueue(), close() {} }) });
 * for (const rule of cases) if (rule.requires.length === 0) await rule.run();
 * ```
 */
export function contractCases(factory: QueueFactory): ConformanceCase[] {
  const rule = casesFor(factory);
  return [
    rule("store of a new MessageID at currentSeq + 1 appends it", [], async ({ queue }) => {
      const { epoch } = await queue.load();
      equal(await queue.store(epoch, job("a", 1)), fresh(1, payloadOf("a")), "store a at 1");
      equal(await queue.store(epoch, job("b", 2)), fresh(2, payloadOf("b")), "store b at 2");
      equal((await queue.load()).state.currentSeq, 2, "currentSeq after two stores");
    }),

    rule(
      "store of a new MessageID at any other sequence is a conflict and changes nothing",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        await rejects(queue.store(epoch, job("a", 2)), "conflict", "store at 2 on an empty queue");
        equal(await queue.store(epoch, job("a", 1)), fresh(1, payloadOf("a")), "store a at 1");
        for (const seq of [1, 3, 5]) {
          await rejects(
            queue.store(epoch, job("b", seq)),
            "conflict",
            `store of b at ${seq} when the next is 2`,
          );
        }
        equal(
          await queue.store(epoch, job("b", 2)),
          fresh(2, payloadOf("b")),
          "store b at 2 afterwards",
        );
      },
    ),

    rule(
      "storing a retained MessageID again returns the first write and appends nothing",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        await queue.store(epoch, job("a", 1));
        const other = JSON.stringify("a different payload");
        for (const seq of [1, 2, 7]) {
          equal(
            await queue.store(epoch, job("a", seq, other)),
            repeat(1, payloadOf("a")),
            `re-store of a proposing ${seq}`,
          );
        }
        await queue.accept(epoch, "a");
        equal(
          await queue.store(epoch, job("a", 2, other)),
          repeat(1, payloadOf("a")),
          "re-store of an accepted job",
        );
        await queue.store(epoch, job("b", 2));
        await queue.confirmMessage(epoch, "b");
        equal(
          await queue.store(epoch, job("b", 3, other)),
          repeat(2, payloadOf("b")),
          "re-store of a confirmed, unaccepted job",
        );
        equal(
          await queue.store(epoch, job("c", 3)),
          fresh(3, payloadOf("c")),
          "the next new job still gets 3",
        );
      },
    ),

    rule(
      "accept of an unknown MessageID is a conflict; a repeated accept is a no-op",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        await rejects(queue.accept(epoch, "ghost"), "conflict", "accept of an unknown MessageID");
        await queue.store(epoch, job("a", 1));
        await queue.accept(epoch, "a");
        await resolves(queue.accept(epoch, "a"), "a repeated accept");
        const { epoch: next, state } = await queue.load();
        equal(state.unconfirmed, [message("a", 1)], "unconfirmed after repeated accepts");
        await resolves(queue.accept(next, "a"), "a repeated accept after a reload");
        equal(
          (await queue.load()).state.unconfirmed,
          [message("a", 1)],
          "unconfirmed after a later repeat",
        );
      },
    ),

    rule(
      "confirm is idempotent: of an unknown, a confirmed or a compacted MessageID it is a no-op",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        await resolves(queue.confirmMessage(epoch, "ghost"), "confirm of an unknown MessageID");
        equal(
          await queue.store(epoch, job("ghost", 1)),
          fresh(1, payloadOf("ghost")),
          "a confirm of an unknown MessageID stores nothing",
        );
        await queue.store(epoch, job("a", 2));
        await queue.confirmMessage(epoch, "a");
        await resolves(queue.confirmMessage(epoch, "a"), "a repeated confirm");
        equal(
          await queue.store(epoch, job("a", 3)),
          repeat(2, payloadOf("a")),
          "the confirmed, unaccepted job is retained",
        );
        await queue.accept(epoch, "a");
        const { epoch: next, state } = await queue.load();
        equal(state.unconfirmed, [], "unconfirmed once a is accepted and confirmed");
        await resolves(
          queue.confirmMessage(next, "a"),
          "a confirm repeated after compaction (a retry whose first attempt applied)",
        );
        equal((await queue.load()).state.unconfirmed, [], "nothing changed");
      },
    ),

    rule(
      "load returns accepted, unconfirmed jobs in ascending sequence, with holes",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        for (let seq = 1; seq <= 6; seq++) await queue.store(epoch, job(`j${seq}`, seq));
        for (const seq of [6, 1, 4, 3]) await queue.accept(epoch, `j${seq}`);
        await queue.confirmMessage(epoch, "j3");
        await queue.confirmMessage(epoch, "j5");
        const { state } = await queue.load();
        equal(state, {
          currentSeq: 6,
          unconfirmed: [message("j1", 1), message("j4", 4), message("j6", 6)],
        }, "the loaded state");
      },
    ),

    rule("payloads round-trip unchanged", [], async ({ queue }) => {
      const payloads = [
        "1.0",
        "null",
        ' { "spaced" : [ 1 , 2 ] }\n',
        JSON.stringify({ text: "héllo wörld ✓ 日本語 🎉", quote: '"', slash: "\\", nul: "\u0000" }),
        JSON.stringify("x".repeat(10_000)),
      ];
      const { epoch } = await queue.load();
      for (const [i, payload] of payloads.entries()) {
        equal(
          await queue.store(epoch, job(`p${i}`, i + 1, payload)),
          fresh(i + 1, payload),
          `store of payload ${i}`,
        );
        await queue.accept(epoch, `p${i}`);
      }
      const { state } = await queue.load();
      equal(
        state.unconfirmed,
        payloads.map((p, i) => message(`p${i}`, i + 1, p)),
        "the loaded payloads",
      );
    }),

    rule(
      "compaction keeps first-write-wins for retained jobs; a compacted MessageID counts as new",
      [],
      async ({ queue }) => {
        const { epoch } = await queue.load();
        await queue.store(epoch, job("a", 1));
        await queue.store(epoch, job("b", 2));
        await queue.accept(epoch, "a");
        await queue.accept(epoch, "b");
        await queue.confirmMessage(epoch, "a");
        equal(
          await queue.store(epoch, job("b", 3, "2")),
          repeat(2, payloadOf("b")),
          "re-store of the retained job b",
        );
        const again = await queue.store(epoch, job("a", 3, '"new"'));
        const ok = (again.alreadyStored && again.seq === 1 && again.payload === payloadOf("a")) ||
          (!again.alreadyStored && again.seq === 3 && again.payload === '"new"');
        check(
          ok,
          `re-store of the compacted job a must return the first write or append at 3, got ${
            JSON.stringify(again)
          }`,
        );
        const { state } = await queue.load();
        equal(
          state,
          { currentSeq: again.alreadyStored ? 2 : 3, unconfirmed: [message("b", 2)] },
          "the state after compaction",
        );
      },
    ),

    rule("returned states and results are copies the caller may change", [], async ({ queue }) => {
      const { epoch } = await queue.load();
      await queue.store(epoch, job("a", 1));
      await queue.store(epoch, job("b", 2));
      await queue.accept(epoch, "a");
      await queue.accept(epoch, "b");
      const expected = { currentSeq: 2, unconfirmed: [message("a", 1), message("b", 2)] };
      const first = await queue.load();
      tamper(() => (first.state.unconfirmed as UnconfirmedMessage[]).reverse());
      tamper(() => (first.state.unconfirmed as UnconfirmedMessage[]).push(message("x", 9)));
      tamper(() => ((first.state.unconfirmed[0] as { payload: string }).payload = '"tampered"'));
      tamper(() => ((first.state as { currentSeq: number }).currentSeq = 99));
      const second = await queue.load();
      equal(second.state, expected, "the state after tampering with a returned state");
      const result = await queue.store(second.epoch, job("a", 5));
      tamper(() => ((result as { payload: string }).payload = '"tampered"'));
      tamper(() => ((result as { seq: number }).seq = 42));
      equal(
        await queue.store(second.epoch, job("a", 5)),
        repeat(1, payloadOf("a")),
        "a store after tampering with its result",
      );
    }),

    rule(
      "requests are read when the call is made; later changes to them have no effect",
      [],
      async (ctx) => {
        const { queue } = ctx;
        const { epoch } = await queue.load();
        const request = { ...job("a", 1) };
        const pending = queue.store(epoch, request);
        Object.assign(request, { messageId: "zz", proposedSeq: 9, payload: '"zz"' });
        equal(
          await pending,
          fresh(1, payloadOf("a")),
          "the store whose request changed after the call",
        );
        await rejects(
          queue.accept(epoch, "zz"),
          "conflict",
          "accept of the MessageID written into the request later",
        );
        if (queue.commit) {
          const jobs = [{ messageId: "b", payload: payloadOf("b") }];
          const accept = ["a", "b"];
          const confirm: string[] = [];
          const committed = ctx.commit(epoch, { store: { firstSeq: 2, jobs }, accept, confirm });
          jobs.push({ messageId: "c", payload: "3" });
          accept.push("ghost");
          confirm.push("a");
          await resolves(committed, "the commit whose batch changed after the call");
        } else {
          await queue.store(epoch, job("b", 2));
          await queue.accept(epoch, "a");
          await queue.accept(epoch, "b");
        }
        equal((await queue.load()).state, {
          currentSeq: 2,
          unconfirmed: [message("a", 1), message("b", 2)],
        }, "the state");
      },
    ),

    rule("malformed persisted state makes load a conflict", ["corrupt"], async (ctx) => {
      const { queue } = ctx;
      const { epoch } = await queue.load();
      await queue.store(epoch, job("a", 1));
      await queue.accept(epoch, "a");
      await ctx.fixture.corrupt!();
      await rejects(queue.load(), "conflict", "load of corrupted state");
    }),

    rule("a payload of maxPayloadBytes is stored; one byte more is rejected and changes nothing", [
      "maxPayloadBytes",
    ], async ({ queue }) => {
      const max = queue.maxPayloadBytes!;
      check(
        Number.isSafeInteger(max) && max >= 2,
        `maxPayloadBytes must be an integer of at least 2, got ${max}`,
      );
      const largest = widePayload(max);
      const { epoch } = await queue.load();
      await rejects(
        queue.store(epoch, job("big", 1, widePayload(max + 1))),
        "any",
        `store of ${max + 1} bytes`,
      );
      equal(
        await queue.store(epoch, job("big", 1, largest)),
        fresh(1, largest),
        `store of ${max} bytes`,
      );
      await queue.accept(epoch, "big");
      equal(
        (await queue.load()).state.unconfirmed,
        [message("big", 1, largest)],
        "the loaded largest payload",
      );
    }),
  ];
}

/** A JSON string literal of exactly `bytes` UTF-8 bytes, mostly two-byte characters. */
function widePayload(bytes: number): string {
  const text = `"${"é".repeat(Math.floor((bytes - 2) / 2))}${(bytes - 2) % 2 === 1 ? "x" : ""}"`;
  if (utf8Length(text) !== bytes) throw new Error(`widePayload(${bytes}) is wrong`);
  return text;
}

/** Runs a mutation that a frozen value may refuse; refusing is fine. */
function tamper(mutate: () => unknown): void {
  try {
    mutate();
  } catch {
    // Frozen: also a defensive copy.
  }
}
