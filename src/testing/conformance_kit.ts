/**
 * The pieces every conformance case is built from: the fixture contract an adapter supplies,
 * the case record, and tiny assertions that throw plain Errors naming the violated rule. Uses
 * no runtime-specific API, so it runs under any test runner on Deno, Bun, Node or a browser.
 *
 * @module
 */

import {
  type DurableWorkQueue,
  type QueueBatch,
  type QueueBatchResult,
  type QueueCallOptions,
  QueueConflictError,
  type QueueEpoch,
  QueueFencedError,
  type StoreRequest,
  type StoreResult,
  type UnconfirmedMessage,
} from "../queue/work_queue.ts";

/** An optional ability of a fixture; a case needing an absent one is skipped. */
export type QueueCapability = "reopen" | "corrupt" | "failNextLoad" | "commit" | "maxPayloadBytes";

/** One queue under test, on storage of its own, opened fresh for every case. */
export interface QueueFixture {
  /** The handle under test. */
  readonly queue: DurableWorkQueue;
  /**
   * Opens another handle on the same storage, as another process would. The fixture closes it
   * in {@linkcode QueueFixture.close}. Enables the cross-handle fencing cases.
   */
  reopen?(): Promise<DurableWorkQueue> | DurableWorkQueue;
  /** Writes malformed persisted state, so that the next load must fail with a conflict. */
  corrupt?(): Promise<void> | void;
  /** Makes the next load fail partway with a backend error. */
  failNextLoad?(): void;
  /** Releases everything the fixture opened. */
  close(): Promise<void> | void;
}

/** Opens fixtures. */
export interface QueueFactory {
  /** Opens a fresh, empty queue. */
  open(): Promise<QueueFixture> | QueueFixture;
}

/** One runner-agnostic conformance case. */
export interface ConformanceCase {
  /** The rule, phrased as a behaviour. */
  readonly name: string;
  /** Capabilities the case needs. */
  readonly requires: readonly QueueCapability[];
  /**
   * Opens a fixture, checks the rule, closes the fixture. Rejects with an Error whose message
   * starts with `Conformance rule violated: <name>`, or with {@linkcode ConformanceSkipError}
   * when a required capability is missing.
   */
  run(): Promise<void>;
}

/**
 * Thrown by {@linkcode ConformanceCase.run} when the fixture lacks a capability the case needs.
 *
 * @example
 * ```ts
 * import { ConformanceSkipError } from "./conformance_kit.ts";
 *
 * const error = new ConformanceSkipError("needs reopen");
 * console.assert(error.name === "ConformanceSkipError");
 * ```
 */
export class ConformanceSkipError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ConformanceSkipError";
  }
}

/**
 * The capabilities a fixture offers.
 *
 * @example
 * ```ts
 * import { capabilitiesOf } from "./conformance_kit.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const caps = capabilitiesOf({ queue: new MemoryWorkQueue(), close() {} });
 * console.assert(caps.has("commit") && !caps.has("reopen"));
 * ```
 */
export function capabilitiesOf(fixture: QueueFixture): Set<QueueCapability> {
  const caps = new Set<QueueCapability>();
  if (typeof fixture.reopen === "function") caps.add("reopen");
  if (typeof fixture.corrupt === "function") caps.add("corrupt");
  if (typeof fixture.failNextLoad === "function") caps.add("failNextLoad");
  if (typeof fixture.queue.commit === "function") caps.add("commit");
  if (typeof fixture.queue.maxPayloadBytes === "number") caps.add("maxPayloadBytes");
  return caps;
}

/** What a case body gets: the fixture and helpers bound to it. */
export class CaseContext {
  /** The fixture. */
  readonly fixture: QueueFixture;
  /** The handle under test. */
  readonly queue: DurableWorkQueue;

  /** Wraps a fixture. */
  constructor(fixture: QueueFixture) {
    this.fixture = fixture;
    this.queue = fixture.queue;
  }

  /** A second handle on the same storage. */
  async reopen(): Promise<DurableWorkQueue> {
    return await this.fixture.reopen!();
  }

  /** The queue's `commit`, bound. */
  commit(
    epoch: QueueEpoch,
    batch: QueueBatch,
    options?: QueueCallOptions,
    queue: DurableWorkQueue = this.queue,
  ): Promise<QueueBatchResult> {
    return queue.commit!(epoch, batch, options);
  }
}

/**
 * Builds a case: opens a fixture per run, skips on missing capabilities, closes the fixture and
 * prefixes any failure with the rule.
 *
 * @example
 * ```ts
 * import { check, defineCase } from "./conformance_kit.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const factory = { open: () => ({ queue: new MemoryWorkQueue(), close() {} }) };
 * const rule = defineCase(factory, "load issues a positive epoch", [], async ({ queue }) => {
 *   check((await queue.load()).epoch > 0, "the epoch must be positive");
 * });
 * await rule.run();
 * ```
 */
export function defineCase(
  factory: QueueFactory,
  name: string,
  requires: readonly QueueCapability[],
  body: (context: CaseContext) => Promise<void>,
): ConformanceCase {
  return {
    name,
    requires,
    async run() {
      const fixture = await factory.open();
      try {
        const caps = capabilitiesOf(fixture);
        const missing = requires.filter((cap) => !caps.has(cap));
        if (missing.length > 0) {
          throw new ConformanceSkipError(`${name}: the fixture lacks ${missing.join(", ")}`);
        }
        await body(new CaseContext(fixture));
      } catch (error) {
        if (error instanceof ConformanceSkipError) throw error;
        const detail = error instanceof ConformanceFailure
          ? error.message
          : `unexpected ${describe(error)}`;
        throw new Error(`Conformance rule violated: ${name}\n  ${detail}`, { cause: error });
      } finally {
        await fixture.close();
      }
    },
  };
}

/**
 * {@linkcode defineCase} bound to one factory: how each case module writes its rules.
 *
 * @example
 * ```ts
 * import { casesFor } from "./conformance_kit.ts";
 * import { MemoryWorkQueue } from "../queue/memory_queue.ts";
 *
 * const rule = casesFor({ open: () => ({ queue: new MemoryWorkQueue(), close() {} }) });
 * const loads = rule("load works", [], async ({ queue }) => void await queue.load());
 * await loads.run();
 * ```
 */
export function casesFor(
  factory: QueueFactory,
): (
  name: string,
  requires: readonly QueueCapability[],
  body: (context: CaseContext) => Promise<void>,
) => ConformanceCase {
  return (name, requires, body) => defineCase(factory, name, requires, body);
}

/** A failed check inside a case. */
class ConformanceFailure extends Error {}

/** Fails the case with `message` unless `condition` holds. */
export function check(condition: unknown, message: string): asserts condition {
  if (!condition) throw new ConformanceFailure(message);
}

/** Fails the case unless `actual` deeply equals `expected` (JSON-like values). */
export function equal(actual: unknown, expected: unknown, what: string): void {
  if (!same(withoutHints(actual, expected), expected)) {
    throw new ConformanceFailure(`${what}: expected ${show(expected)}, got ${show(actual)}`);
  }
}

/** Optional, advisory fields of a loaded state: compared only where the expected value names them. */
const HINTS = new Set(["recentlyCompleted", "attempt", "timeout", "lost"]);

/**
 * `actual` without the optional hints (`recentlyCompleted` of a state; `attempt`, `timeout`, `lost` of
 * an unconfirmed job) that `expected` does not name, at any depth.
 */
function withoutHints(actual: unknown, expected: unknown): unknown {
  if (Array.isArray(actual) && Array.isArray(expected)) {
    return actual.map((item, i) => withoutHints(item, expected[i]));
  }
  if (
    typeof actual !== "object" || actual === null || Array.isArray(actual) ||
    typeof expected !== "object" || expected === null
  ) {
    return actual;
  }
  const result: Record<string, unknown> = {};
  for (const [key, value] of Object.entries(actual)) {
    if (HINTS.has(key) && !(key in expected)) continue;
    result[key] = withoutHints(value, (expected as Record<string, unknown>)[key]);
  }
  return result;
}

/** What a rejection must be. */
export type Expected = "fenced" | "conflict" | "any" | ((error: unknown) => boolean);

/** Awaits a promise that must reject as expected; returns the error. */
export async function rejects(
  promise: Promise<unknown>,
  expected: Expected,
  what: string,
): Promise<unknown> {
  let value: unknown;
  try {
    value = await promise;
  } catch (error) {
    const ok = expected === "any" ||
      (expected === "fenced"
        ? isFenced(error)
        : expected === "conflict"
        ? isConflict(error)
        : expected(error));
    if (!ok) {
      throw new ConformanceFailure(`${what}: expected ${label(expected)}, got ${describe(error)}`);
    }
    return error;
  }
  throw new ConformanceFailure(
    `${what}: expected ${label(expected)}, but it resolved to ${show(value)}`,
  );
}

/** Awaits a promise that must resolve; a rejection fails the case naming `what`. */
export async function resolves<T>(promise: Promise<T>, what: string): Promise<T> {
  try {
    return await promise;
  } catch (error) {
    throw new ConformanceFailure(`${what}: expected success, got ${describe(error)}`);
  }
}

/** True for {@linkcode QueueFencedError} (by class or by name, for copies of the module). */
export function isFenced(error: unknown): boolean {
  return error instanceof QueueFencedError ||
    (error as Error | undefined)?.name === "QueueFencedError";
}

/** True for {@linkcode QueueConflictError} (by class or by name). */
export function isConflict(error: unknown): boolean {
  return error instanceof QueueConflictError ||
    (error as Error | undefined)?.name === "QueueConflictError";
}

/** The payload every case stores for `id` unless it needs another. */
export function payloadOf(id: string): string {
  return JSON.stringify({ job: id });
}

/** A store request for `id` at `seq`. */
export function job(id: string, seq: number, payload: string = payloadOf(id)): StoreRequest {
  return { messageId: id, proposedSeq: seq, payload };
}

/** The result of a first write. */
export function fresh(seq: number, payload: string): StoreResult {
  return { seq, alreadyStored: false, payload };
}

/** The result of a repeated write. */
export function repeat(seq: number, payload: string): StoreResult {
  return { seq, alreadyStored: true, payload };
}

/** An unconfirmed message as load returns it. */
export function message(
  id: string,
  seq: number,
  payload: string = payloadOf(id),
): UnconfirmedMessage {
  return { messageId: id, seq, payload };
}

/** A JSON string literal of exactly `bytes` UTF-8 bytes (at least 2). */
export function payloadOfBytes(bytes: number, fill = "x"): string {
  return `"${fill.repeat(Math.max(0, bytes - 2))}"`;
}

/** The UTF-8 length of a string. */
export function utf8Length(text: string): number {
  return new TextEncoder().encode(text).length;
}

function same(a: unknown, b: unknown): boolean {
  if (Object.is(a, b)) return true;
  if (typeof a !== "object" || typeof b !== "object" || a === null || b === null) return false;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const keysA = Object.keys(a).filter((key) => (a as Record<string, unknown>)[key] !== undefined);
  const keysB = Object.keys(b).filter((key) => (b as Record<string, unknown>)[key] !== undefined);
  if (keysA.length !== keysB.length) return false;
  return keysA.every((key) =>
    same((a as Record<string, unknown>)[key], (b as Record<string, unknown>)[key])
  );
}

function show(value: unknown): string {
  try {
    const text = JSON.stringify(value, (_key, inner) =>
      typeof inner === "string" && inner.length > 60
        ? `${inner.slice(0, 40)}…(${inner.length} chars)`
        : inner) ?? String(value);
    return text.length > 600 ? `${text.slice(0, 600)}…` : text;
  } catch {
    return String(value);
  }
}

function describe(error: unknown): string {
  if (error instanceof Error) return `${error.name}: ${error.message}`;
  return `a thrown ${show(error)}`;
}

function label(expected: Expected): string {
  return expected === "fenced"
    ? "QueueFencedError"
    : expected === "conflict"
    ? "QueueConflictError"
    : expected === "any"
    ? "a rejection"
    : "a matching rejection";
}
