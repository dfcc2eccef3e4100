import { describe, test } from "node:test";
import assert from "node:assert/strict";
import { decodeControllerFrame, decodeWorkerFrame, encodeFrame, encodeJobsFrame } from "../mod.ts";

describe("wire codec", () => {
  test("valid worker frames decode to typed frames", () => {
    const register = {
      type: "register",
      producer: "jobs",
      worker: "w",
      incarnation: "i",
      nonce: "n",
      resendInterval: 2000,
    } as const;
    assert.deepEqual(decodeWorkerFrame(encodeFrame(register)), { ok: true, frame: register });
  });

  test("decoding never throws and says why a frame is refused", () => {
    const cases: [unknown, string][] = [
      [new Uint8Array([1, 2]), "not-text"],
      ["{", "malformed-json"],
      ["null", "invalid-frame"],
      ['{"type":"bogus"}', "invalid-frame"],
      ['{"type":"ack","session":"s","nonce":"n","confirmed":-1}', "invalid-frame"],
      ['{"type":"ack","session":"s","nonce":"n","confirmed":1.5}', "invalid-frame"],
      ['{"type":"ack","session":"s","nonce":"n","confirmed":1e300}', "invalid-frame"],
      ['{"type":"ack","session":"","nonce":"n","confirmed":1}', "invalid-frame"],
      ['{"type":"ack","session":"s","nonce":"n","confirmed":1,"extra":1}', "invalid-frame"],
      [
        '{"type":"request","session":"s","nonce":"n","confirmed":1,"upTo":2,"resend":"yes"}',
        "invalid-frame",
      ],
      ["x".repeat(100_000), "too-large"],
      ["[".repeat(5000) + "]".repeat(5000), "invalid-frame"],
    ];
    for (const [frame, reason] of cases) {
      const result = decodeWorkerFrame(frame);
      assert.equal(result.ok, false, String(frame).slice(0, 60));
      if (!result.ok) assert.equal(result.reason, reason, String(frame).slice(0, 60));
    }
  });

  test("a heard frame (feature heard) decodes; any field makes it invalid", () => {
    assert.deepEqual(decodeControllerFrame('{"type":"heard"}'), {
      ok: true,
      frame: { type: "heard" },
    });
    for (
      const text of [
        '{"type":"heard","session":"s"}',
        '{"type":"heard","x":null}',
        '{"type":"Heard"}',
      ]
    ) {
      const decoded = decodeControllerFrame(text);
      assert.equal(decoded.ok, false, text);
      if (!decoded.ok) assert.equal(decoded.reason, "invalid-frame", text);
    }
  });

  test("a jobs frame splices payload JSON and round-trips", () => {
    const text = encodeJobsFrame("s", 3, [
      { messageId: "a", payload: '{"x":[1,2]}' },
      { messageId: 'q"uote', payload: '"text"' },
    ]);
    const decoded = decodeControllerFrame(text);
    assert.deepEqual(decoded, {
      ok: true,
      frame: {
        type: "jobs",
        session: "s",
        seq: 3,
        jobs: [{ id: "a", payload: { x: [1, 2] } }, { id: 'q"uote', payload: "text" }],
      },
    });
  });

  test("a jobs frame with tries escapes the MessageIDs that need it and round-trips", () => {
    const ids = ["plain-1", 'q"uote', "back\\slash", "new\nline", "tab\there", "emoji-🙂", "ü"];
    const jobs = ids.map((messageId, i) => ({
      messageId,
      payload: `{"n":${i}}`,
      attempt: i + 1,
      ...(i === 2 ? { timeout: 500 } : {}),
      ...(i === 3 ? { confirmFirst: true } : {}),
    }));
    const text = encodeJobsFrame("s", 7, jobs, true);
    JSON.parse(text); // valid JSON whatever the MessageIDs
    const decoded = decodeControllerFrame(text);
    assert.ok(decoded.ok, text);
    assert.equal(decoded.frame.type, "jobs");
    const frame = decoded.frame as unknown as {
      jobs: { id: string; payload: unknown; attempt: number }[];
    };
    assert.deepEqual(frame.jobs.map((job) => job.id), ids);
    assert.deepEqual(frame.jobs.map((job) => job.attempt), ids.map((_, i) => i + 1));
    assert.deepEqual(frame.jobs.map((job) => job.payload), ids.map((_, n) => ({ n })));
  });
});
