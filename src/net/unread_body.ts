/**
 * Closing the connection of a request whose body the server left unread, on Bun.
 *
 * A request can be refused before its body is read (no admission, no credentials, a declared
 * `Content-Length` over the limit, the wrong media type) or cut off at the chunk that breaks a
 * limit (`json_body.ts`). Its body is still on the way, and to use the connection for the next
 * request Bun's server receives all of it and throws it away. Answering with `Connection: close`
 * has Bun close the connection instead: against a client posting refused 8 MB bodies on two
 * connections, in four alternating pairs of 5 s, the server spent 0.75–1.03 ms of CPU a body
 * instead of 1.53–1.98 (0.35–0.43 s in all against 0.78–1.09).
 *
 * Only `serveBun` does this. Deno's server says `Connection: close` by itself to a request whose
 * body was not read (and still receives the rest), and told to close one whose body had been cut
 * off it spent more a body (2.2–2.3 ms against 1.4–1.5). Node's server with the header spent less
 * a body (2.1–2.4 ms against 6.5–7.1), but without it the client's next body waited about half a
 * second, so the header let 20–30 times as many through and cost more CPU in all.
 *
 * @module
 */

/**
 * The refusals of `json_body.ts` that may leave a body partly unread: 413 and 400 at the chunk that
 * breaks a limit, 415 before reading (a 400 after a full read closes needlessly, and harmlessly).
 */
const CUT_SHORT = new Set([400, 413, 415]);

/**
 * Whether the answer `status` to `request` leaves part of its body unread: the request carries
 * a body, and it was not read at all or was refused while being read.
 *
 * @example
 * ```ts
 * import { leavesBodyUnread } from "./unread_body.ts";
 * const post = () =>
 *   new Request("http://localhost/jobs", { method: "POST", body: "{}", headers: { "content-length": "2" } });
 * console.assert(leavesBodyUnread(post(), 401)); // refused before reading
 * console.assert(!leavesBodyUnread(new Request("http://localhost/stats"), 401)); // no body
 * const read = post();
 * await read.text();
 * console.assert(!leavesBodyUnread(read, 200));
 * ```
 */
export function leavesBodyUnread(request: Request, status: number): boolean {
  const length = request.headers.get("content-length");
  const carriesBody = (length !== null && length.trim() !== "0") ||
    request.headers.has("transfer-encoding");
  if (!carriesBody) return false;
  return !request.bodyUsed || CUT_SHORT.has(status);
}

/**
 * Wrap a server's `fetch` handler: an answer that leaves its request's body unread says
 * `Connection: close`. An upgrade (no answer) passes through.
 *
 * @example
 * ```ts
 * import { closingUnreadBodies } from "./unread_body.ts";
 *
 * const fetch = closingUnreadBodies(() => Response.json({ error: "unauthorized" }, { status: 401 }));
 * const request = new Request("http://localhost/jobs", { method: "POST", body: "{}", headers: { "content-length": "2" } });
 * const response = await fetch(request, undefined);
 * console.assert(response?.headers.get("connection") === "close");
 * ```
 */
export function closingUnreadBodies<Env>(
  fetch: (request: Request, env: Env) => Response | undefined | Promise<Response | undefined>,
): (request: Request, env: Env) => Promise<Response | undefined> {
  return async (request, env) => {
    const response = await fetch(request, env);
    if (response && leavesBodyUnread(request, response.status)) {
      try {
        response.headers.set("Connection", "close");
      } catch {
        // An immutable response (none of the app's own): it keeps its headers.
      }
    }
    return response;
  };
}
