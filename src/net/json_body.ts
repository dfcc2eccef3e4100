/**
 * Reading a JSON request body from the network with every limit checked before the expensive
 * step it protects:
 *
 * 1. the media type must be `application/json` (a browser sends a cross-site `text/plain` POST
 *    without asking first; a JSON one needs a CORS preflight) — else 415;
 * 2. a declared `Content-Length` over the limit is refused before a byte is read, and the body
 *    stream is cut as soon as it passes the limit (chunked bodies declare nothing) — 413;
 *    a body that has not arrived whole within `timeout` (a client trickling it, to hold the
 *    request open) is cut too — 408, and the route closes the connection;
 * 3. every chunk is scanned as it arrives ({@linkcode JsonScanner}) for nesting depth and,
 *    optionally, the number of items of one top-level array, and reading stops at the first
 *    chunk that passes a limit — 400 / 413 — so neither the rest of the body nor `JSON.parse`
 *    costs anything;
 * 4. then the text is parsed, and validated against a valibot schema that stops at the first
 *    issue.
 *
 * So the work done for a hostile body is bounded by the byte limit (one read, one scan), and the
 * objects built by the item limit. Every route that takes a JSON body uses this.
 *
 * @module
 */

import type { Context } from "hono";
import * as v from "valibot";
import { JsonScanner } from "./json_shape.ts";

/** Limits for {@linkcode readJsonBody}. */
export interface JsonBodyLimits {
  /** Largest body, bytes. */
  readonly maxBytes: number;
  /** Deepest nesting of arrays and objects in the whole body. */
  readonly maxDepth: number;
  /** Count the items of the array under this top-level key... */
  readonly countKey?: string;
  /** ...and refuse a body with more (413). */
  readonly maxItems?: number;
  /** Refuse a body that has not arrived whole this many ms after reading began (408). Default: none. */
  readonly timeout?: number;
}

/** A refused body: the status and JSON answer to send. */
export interface JsonBodyRefusal {
  /** Always false. */
  readonly ok: false;
  /** 400 (malformed or invalid), 408 (too slow), 413 (too large, too many items) or 415 (not JSON). */
  readonly status: 400 | 408 | 413 | 415;
  /** The JSON answer: `{ error, detail?, limit? }`, never echoing the body. */
  readonly body: {
    readonly error:
      | "unsupported-media-type"
      | "body-too-large"
      | "body-timeout"
      | "too-many-items"
      | "too-deep"
      | "malformed-json"
      | "invalid-body";
    readonly detail?: string;
    readonly limit?: number;
  };
}

/** The outcome of {@linkcode readJsonBody}. */
export type JsonBodyResult<T> = { readonly ok: true; readonly value: T } | JsonBodyRefusal;

/**
 * Read, check, parse and validate the JSON body of `request` (see the module documentation for
 * the order of the checks). Never throws.
 *
 * @example
 * ```ts
 * import * as v from "valibot";
 * import { readJsonBody } from "./json_body.ts";
 *
 * const schema = v.strictObject({ jobs: v.array(v.unknown()) });
 * const request = new Request("http://localhost/jobs", {
 *   method: "POST",
 *   headers: { "content-type": "application/json" },
 *   body: JSON.stringify({ jobs: [1, 2, 3] }),
 * });
 * const result = await readJsonBody(request, schema, { maxBytes: 1024, maxDepth: 8, countKey: "jobs", maxItems: 2 });
 * console.assert(!result.ok && result.status === 413 && result.body.error === "too-many-items");
 * ```
 */
export async function readJsonBody<T>(
  request: Request,
  schema: v.GenericSchema<unknown, T>,
  limits: JsonBodyLimits,
): Promise<JsonBodyResult<T>> {
  if (!isJsonMediaType(request.headers.get("content-type"))) {
    return refuse(415, "unsupported-media-type", { detail: "send Content-Type: application/json" });
  }
  const text = await readText(request, limits);
  if (typeof text !== "string") return text;
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch {
    return refuse(400, "malformed-json");
  }
  const parsed = v.safeParse(schema, json, { abortEarly: true });
  if (!parsed.success) {
    const issue = parsed.issues[0];
    const path = issue.path?.map((item) => String(item.key)).join(".") || "body";
    return refuse(400, "invalid-body", { detail: `${path}: ${issue.message}` });
  }
  return { ok: true, value: parsed.output };
}

/** Whether a Content-Type header names `application/json` (parameters allowed). */
function isJsonMediaType(header: string | null): boolean {
  if (header === null) return false;
  return header.split(";", 1)[0].trim().toLowerCase() === "application/json";
}

/** The body as text, read and scanned up to the first limit it passes; a refusal then. */
async function readText(
  request: Request,
  limits: JsonBodyLimits,
): Promise<string | JsonBodyRefusal> {
  const maxBytes = limits.maxBytes;
  const tooLarge = () => refuse(413, "body-too-large", { limit: maxBytes });
  const declared = request.headers.get("content-length");
  if (declared !== null && !(Number(declared) <= maxBytes)) return tooLarge();
  const body = request.body;
  if (body === null) return refuse(400, "malformed-json", { detail: "the body is empty" });
  const reader = body.getReader();
  const scanner = new JsonScanner(limits);
  const chunks: Uint8Array[] = [];
  let size = 0;
  const timeout = limits.timeout;
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = timeout === undefined ? undefined : new Promise<"late">((resolve) => {
    timer = setTimeout(() => resolve("late"), timeout);
  });
  try {
    for (;;) {
      const read = late ? await Promise.race([reader.read(), late]) : await reader.read();
      if (read === "late") {
        reader.cancel().catch(() => {});
        return refuse(408, "body-timeout", {
          limit: timeout,
          detail: `the body did not arrive within ${timeout} ms`,
        });
      }
      const { done, value } = read;
      if (done) break;
      size += value.byteLength;
      const violation = size > maxBytes ? "too-large" : scanner.push(value);
      if (violation !== undefined) {
        reader.cancel().catch(() => {});
        if (violation === "too-large") return tooLarge();
        return violation.reason === "too-deep"
          ? refuse(400, "too-deep", { limit: violation.limit, detail: "the body nests too deeply" })
          : refuse(413, "too-many-items", { limit: violation.limit });
      }
      chunks.push(value);
    }
  } catch {
    return refuse(400, "malformed-json", { detail: "the body could not be read" });
  } finally {
    clearTimeout(timer);
  }
  const bytes = chunks.length === 1 ? chunks[0] : new Uint8Array(size);
  if (chunks.length !== 1) {
    let offset = 0;
    for (const chunk of chunks) {
      bytes.set(chunk, offset);
      offset += chunk.byteLength;
    }
  }
  try {
    return new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    return refuse(400, "malformed-json", { detail: "the body is not UTF-8" });
  }
}

function refuse(
  status: JsonBodyRefusal["status"],
  error: JsonBodyRefusal["body"]["error"],
  extra: { detail?: string; limit?: number } = {},
): JsonBodyRefusal {
  return { ok: false, status, body: { error, ...extra } };
}

/**
 * The answer to a refused body. A body that came too slowly also closes the connection: its
 * client may still be trickling the rest, which the server would otherwise go on receiving.
 *
 * @example
 * ```ts ignore
 * const parsed = await readJsonBody(c.req.raw, schema, limits);
 * if (!parsed.ok) return bodyRefused(c, parsed);
 * ```
 */
export function bodyRefused(c: Context, refusal: JsonBodyRefusal): Response {
  if (refusal.status === 408) c.header("Connection", "close");
  return c.json(refusal.body, refusal.status);
}
