/**
 * How the client commands (`submit`, `stats`, `jobs`, `dead-letters`) talk to a `workpull serve`
 * server: each flow's routes live under `/flows/<flow>/`, every request carries a client token,
 * and the answers that are not what was asked become errors with the right exit code (the
 * server unreachable or the token refused: 3; any other refusal: 1).
 *
 * @module
 */

import { CliError, EXIT } from "./exit.ts";
import { UsageError } from "./args.ts";
import { programName } from "./runtime.ts";

/** The default server URL (what `serve` listens on by default). */
export const DEFAULT_URL = "http://127.0.0.1:8000";

/**
 * The base URL of `flow` on the server at `url`: `<url>/flows/<flow>/`. A URL that already ends
 * with `/flows/<flow>` is taken as it is.
 */
export function flowUrl(url: string, flow: string): URL {
  let base: URL;
  try {
    base = new URL(url);
  } catch {
    throw new UsageError(`--url must be a URL like ${DEFAULT_URL}, got "${url}"`);
  }
  if (base.protocol === "ws:") base.protocol = "http:";
  if (base.protocol === "wss:") base.protocol = "https:";
  if (base.protocol !== "http:" && base.protocol !== "https:") {
    throw new UsageError(`--url must be an http(s) URL, got "${url}"`);
  }
  const path = base.pathname.replace(/\/+$/, "");
  const suffix = `/flows/${encodeURIComponent(flow)}`;
  base.pathname = path.endsWith(suffix) ? `${path}/` : `${path}${suffix}/`;
  base.search = "";
  return base;
}

/** An answer from the server. */
export interface Answer {
  readonly status: number;
  /** The JSON body, or the text when it is not JSON. */
  readonly body: unknown;
  readonly headers: Headers;
}

/** Options of {@linkcode call}. */
export interface CallOptions {
  readonly method?: string;
  readonly token: string;
  readonly body?: unknown;
  /** Statuses the caller handles itself (besides 2xx). */
  readonly accept?: readonly number[];
}

/** Call `path` under the flow's base URL; see the module documentation for the errors. */
export async function call(base: URL, path: string, options: CallOptions): Promise<Answer> {
  const url = new URL(path, base);
  let response: Response;
  try {
    response = await fetch(url, {
      method: options.method ?? "GET",
      headers: {
        authorization: `Bearer ${options.token}`,
        ...(options.body === undefined ? {} : { "content-type": "application/json" }),
      },
      body: options.body === undefined ? undefined : JSON.stringify(options.body),
    });
  } catch (error) {
    throw new CliError(
      `cannot reach ${base.origin}: ${reason(error)} (is the server running? ` +
        `${programName()} serve)`,
      EXIT.unreachable,
    );
  }
  const text = await response.text();
  let body: unknown = text;
  try {
    body = text === "" ? undefined : JSON.parse(text);
  } catch {
    // Not JSON: keep the text.
  }
  const answer = { status: response.status, body, headers: response.headers };
  if (response.ok || options.accept?.includes(response.status)) return answer;
  throw answerError(base, answer);
}

/** The error for an answer the caller did not expect. */
export function answerError(base: URL, answer: Answer): CliError {
  const body = answer.body as { error?: string; reason?: string; detail?: string } | undefined;
  if (answer.status === 401 && body?.reason === "expired") {
    return new CliError(
      `the server refused the token: it expired; make a new one with ${programName()} token ` +
        "--flow <flow>",
      EXIT.unreachable,
    );
  }
  if (answer.status === 401) {
    return new CliError(
      `the server refused the token (${body?.reason ?? "unauthorized"}): a client token for ` +
        `this flow is needed (${programName()} token --flow <flow>)`,
      EXIT.unreachable,
    );
  }
  if (answer.status === 404 && body?.error !== "not-found") {
    return new CliError(`nothing is served at ${base.href} (is the flow served? serve --flow)`);
  }
  const detail = typeof body === "object" && body !== null
    ? [body.error, body.detail].filter(Boolean).join(": ")
    : String(body ?? "").slice(0, 200);
  return new CliError(`the server answered ${answer.status}${detail ? ` ${detail}` : ""}`);
}

/** Why a fetch failed, in a few words. */
export function reason(error: unknown): string {
  const cause = (error as { cause?: { code?: string; message?: string } })?.cause;
  return cause?.code ?? cause?.message ?? (error instanceof Error ? error.message : String(error));
}
