/**
 * The worker client: worker endpoints connected to a workpull server over the standard
 * `WebSocket`, the same code on Deno, Bun and in browsers (it imports no runtime module and no
 * server code).
 *
 * How it behaves:
 * - One socket per endpoint. A process hosting several endpoints (`concurrency > 1`) names them
 *   `name#1`, `name#2`…; one worker token for `name` admits them all. Each is its own binding
 *   with its own window, so a slow job holds up only its endpoint.
 * - The token travels as the second `Sec-WebSocket-Protocol` entry after `workpull.v1` (or in the
 *   `token` query parameter with `tokenIn: "query"`); a token function is called before every
 *   connect, so an expiring token can be refreshed. When the server closes a socket because its
 *   credential expired (or was revoked; close code 4003), the endpoint reconnects at once, with
 *   a fresh token from the function, without backing off.
 * - When a socket closes, or the endpoint hears nothing from the controller for
 *   `silenceIntervals` resend intervals (a half-open socket), the client reconnects with
 *   jittered exponential backoff. The endpoint object, and so its incarnation and sub-flow, is
 *   the same across reconnects: within the controller's reconnect grace the binding resumes and
 *   nothing is delivered twice. The backoff starts afresh once a registration is accepted on the
 *   new socket (not merely when it opens), so a server that keeps refusing is retried ever more
 *   slowly.
 * - A refused registration that cannot succeed by retrying (another process started under the
 *   same worker name, a token for another flow) stops that endpoint for good: a `refused` event
 *   carries a {@linkcode RegistrationRefusedError}.
 * - **A refused upgrade is told apart from an outage.** A WebSocket client does not show why its
 *   upgrade failed, so when a socket fails before it opens, the client asks once with a plain
 *   `GET` of the same URL and credential: the server answers `401` with the reason, `404` for a
 *   flow it does not serve, or `426` when the credential is good. A refusal that retrying cannot
 *   heal (a bad signature, an unknown key, another flow, a client token, a revoked token, an
 *   unknown flow, a forbidden origin) stops the endpoint with an `upgrade-refused` event carrying
 *   an {@linkcode UpgradeRefusedError}. An expired token is asked of the `token` function again
 *   (a fresh one reconnects at once); a fixed token, or the same expired token again, stops. An
 *   unreachable server, and every other answer, is an outage: retried with backoff.
 * - `close()` drains: buffered jobs go back to the controller at once, running handlers finish
 *   and are confirmed, then the sockets close. Where the runtime has signals (Deno, Node, Bun),
 *   SIGTERM and SIGINT do the same and then exit (`drainOnSignals: false` to opt out).
 *
 * @module
 */

import { booleanOption, durationOption, integerOption, optionsObject } from "../core/options.ts";
import { SafeEventTarget } from "../core/safe_event_target.ts";
import { SUBPROTOCOL } from "../protocol/schemas.ts";
import { CloseCode, type Link, type LinkReceiver } from "../transport/link.ts";
import {
  DEFAULT_DRAIN_TIMEOUT,
  type Delivery,
  MAX_DRAIN_TIMEOUT,
  type RefusedEvent,
  WorkerEndpoint,
} from "../worker/worker_endpoint.ts";
import { drainOnShutdown } from "./shutdown.ts";
import { type Backoff, backoffDelay, type BackoffOptions, resolveBackoff } from "./backoff.ts";
import { closeReason, guard as guardAs } from "./safety.ts";
import { type Logger, loggerOption } from "../core/logger.ts";

/**
 * A `WebSocket` constructor: the global one by default, or `WebSocket` from the `ws` package on
 * Node before 22. Typed by what the client uses ({@linkcode WebSocketLike}), so `ws` fits as it is.
 */
export type WebSocketConstructor = new (
  url: string,
  protocols?: string | string[],
) => WebSocketLike;

/** What the client uses of a socket: a WHATWG `WebSocket` and a `ws` socket both have it. */
export interface WebSocketLike {
  /** 0 connecting, 1 open, 2 closing, 3 closed. */
  readonly readyState: number;
  /** Send a text frame. */
  send(data: string): void;
  /** Start the closing handshake. */
  close(code?: number, reason?: string): void;
  /** Set by the client: the socket opened. */
  onopen: ((event: never) => void) | null;
  /** Set by the client: a message arrived (`event.data`, a string for text frames). */
  onmessage: ((event: never) => void) | null;
  /** Set by the client: the socket closed (`event.code`, `event.reason`). */
  onclose: ((event: never) => void) | null;
  /** Set by the client: the socket failed (usually a close event follows). */
  onerror: ((event: never) => void) | null;
}

/** Options of {@linkcode connectWorker}. */
export interface ConnectWorkerOptions<T> {
  /** The server's workers route, for example `wss://jobs.example.com/workers` (http(s) works too). */
  readonly url: string | URL;
  /** A worker token for `name`, or a function returning one (called before every connect). */
  readonly token?: string | (() => string | Promise<string>);
  /** Where the token travels: the subprotocol list (default) or the `token` query parameter. */
  readonly tokenIn?: "protocol" | "query";
  /** The producer (flow) name to serve. */
  readonly producer: string;
  /** The worker name the token names; endpoints are `name` or `name#1..#N`. */
  readonly name: string;
  /** Processes one job; the job is confirmed when the returned promise resolves. */
  readonly handler: (delivery: Delivery<T>) => unknown;
  /** Endpoints in this process, each its own socket and binding. Default 1 (1..1,000). */
  readonly concurrency?: number;
  /**
   * Jobs granted per request and buffered at most, per endpoint. Default 50 (1..10,000). Across a
   * network, a window that takes two round trips to run keeps the endpoint busy (the README's
   * "Choosing a window").
   */
  readonly window?: number;
  /** Heartbeat, re-registration and resend cadence, ms. Default 2000. */
  readonly resendInterval?: number;
  /** Reconnect after this many resend intervals without controller traffic. Default 3 (2..1000). */
  readonly silenceIntervals?: number;
  /** Longest delay before a finished job is confirmed, ms. Default 5 (see `WorkerEndpoint`). */
  readonly ackDelay?: number;
  /** How long `close()` lets running handlers finish before aborting them, ms. Default 10,000. */
  readonly drainTimeout?: number;
  /**
   * Drain and exit on SIGTERM and SIGINT, where the runtime has signals (Deno, Node, Bun).
   * Default true.
   */
  readonly drainOnSignals?: boolean;
  /** The incarnation id of every endpoint of this start. Default: a random UUID per endpoint. */
  readonly incarnation?: string;
  /** Give up on a connection attempt after this long, ms. Default 10,000. */
  readonly connectTimeout?: number;
  /** Reconnect delays. Default: 250 ms doubling to 30 s, half of each delay random. */
  readonly backoff?: BackoffOptions;
  /** The `WebSocket` constructor. Default: `globalThis.WebSocket`. */
  readonly WebSocket?: WebSocketConstructor;
  /** Where contained failures are reported. Default: `console.error` (see `createLogger`). */
  readonly logger?: Logger;
}

/**
 * An endpoint's socket opened; the endpoint registers on it at once.
 *
 * @example
 * ```ts
 * import { ConnectedEvent } from "./client.ts";
 * console.assert(new ConnectedEvent("w#1").endpoint === "w#1");
 * ```
 */
export class ConnectedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The endpoint name. */
    readonly endpoint: string,
  ) {
    super("connected");
  }
}

/**
 * An endpoint's socket closed or could not open; a reconnect follows after `retryIn` ms
 * (unless the connection is being closed).
 *
 * @example
 * ```ts
 * import { DisconnectedEvent } from "./client.ts";
 * const event = new DisconnectedEvent("w", 1006, "", 250);
 * console.assert(event.retryIn === 250);
 * ```
 */
export class DisconnectedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** The endpoint name. */
    readonly endpoint: string,
    /** The WebSocket close code (1006 when the connection failed or dropped). */
    readonly code: number,
    /** The close reason, or why the attempt failed. */
    readonly reason: string,
    /** Milliseconds until the next attempt; undefined when not reconnecting. */
    readonly retryIn: number | undefined,
  ) {
    super("disconnected");
  }
}

/**
 * Why the server refused a worker's upgrade for good: `reason` is the server's (`401` answers:
 * `bad-signature`, `unknown-key`, `expired`, `revoked`, `wrong-producer`, `wrong-kind`,
 * `malformed-token`, `missing-token`, `refused`), or `unknown-flow` (`404`) or
 * `forbidden-origin` (`403`).
 *
 * @example
 * ```ts
 * import { UpgradeRefusedError } from "./client.ts";
 * const error = new UpgradeRefusedError("w1", 401, "expired");
 * console.assert(error.message.includes("expired"));
 * ```
 */
export class UpgradeRefusedError extends Error {
  /** Always "UpgradeRefusedError". */
  override name = "UpgradeRefusedError";

  /** Creates the error. */
  constructor(
    /** The endpoint whose upgrade was refused. */
    readonly endpoint: string,
    /** The HTTP status of the server's answer. */
    readonly status: number,
    /** The server's reason. */
    readonly reason: string,
  ) {
    super(
      `the server refused worker ${endpoint}: ${describeRefusal(reason)} (${status} ${reason})`,
    );
  }
}

/** What a refusal reason means to whoever runs the worker. */
function describeRefusal(reason: string): string {
  switch (reason) {
    case "expired":
      return "its token expired";
    case "bad-signature":
      return "its token is not signed with the server's secret";
    case "unknown-key":
      return "its token is signed with a key the server does not hold";
    case "revoked":
      return "its token was revoked";
    case "wrong-producer":
      return "its token is for another flow";
    case "wrong-kind":
      return "its token is a client token; a worker needs a worker token";
    case "malformed-token":
      return "its token is not a workpull token";
    case "missing-token":
      return "it sent no token";
    case "unknown-flow":
      return "the server serves no such flow";
    case "forbidden-origin":
      return "its origin is not allowed";
    default:
      return "the server's authorization refused it";
  }
}

/**
 * The server refused an endpoint's upgrade for good: that endpoint stopped.
 *
 * @example
 * ```ts
 * import { UpgradeRefusedError, UpgradeRefusedEvent } from "./client.ts";
 * const event = new UpgradeRefusedEvent(new UpgradeRefusedError("w1", 404, "unknown-flow"));
 * console.assert(event.error.status === 404);
 * ```
 */
export class UpgradeRefusedEvent extends Event {
  /** Creates the event. */
  constructor(
    /** What the server said. */
    readonly error: UpgradeRefusedError,
  ) {
    super("upgrade-refused");
  }
}

/** The events of a {@linkcode WorkerConnection}. */
export interface WorkerConnectionEventMap {
  /** An endpoint's socket opened. */
  connected: ConnectedEvent;
  /** An endpoint's socket closed or failed to open. */
  disconnected: DisconnectedEvent;
  /** A registration was refused; when `error.retry` is false that endpoint stopped for good. */
  refused: RefusedEvent;
  /** The server refused an endpoint's upgrade in a way retrying cannot heal: it stopped. */
  "upgrade-refused": UpgradeRefusedEvent;
}

interface Settings {
  readonly url: URL;
  readonly token: (() => string | Promise<string>) | undefined;
  /** The token is a function, which may give a fresh one after an expiry. */
  readonly refreshable: boolean;
  /** How long a drain waits for running handlers, ms. */
  readonly drainTimeout: number;
  readonly tokenIn: "protocol" | "query";
  readonly connectTimeout: number;
  readonly backoff: Backoff;
  readonly WebSocket: WebSocketConstructor;
  readonly logger: Logger;
}

const OWNER = "connectWorker";
/** RFC 7230 token characters: what a subprotocol entry may contain. */
const SUBPROTOCOL_TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
/** How long an ack may wait for a request that supersedes it, ms. */
const ACK_HOLD = 2;
const CONNECTING = 0;
const OPEN = 1;

/**
 * A worker process's connection to a workpull server: its endpoints and their sockets.
 * Created by {@linkcode connectWorker}.
 */
export class WorkerConnection<T = unknown> extends SafeEventTarget<WorkerConnectionEventMap> {
  /** The endpoints, one per unit of concurrency. */
  readonly endpoints: readonly WorkerEndpoint<T>[];
  readonly #sockets: EndpointSocket[];
  #closing: Promise<void> | undefined;
  #unregister: () => void = () => {};

  /** Use {@linkcode connectWorker}. */
  constructor(
    endpoints: readonly WorkerEndpoint<T>[],
    settings: Settings,
    drainOnSignals = false,
  ) {
    super();
    this.endpoints = endpoints;
    this.#sockets = endpoints.map((endpoint) =>
      new EndpointSocket(endpoint, settings, (event) => this.dispatchEvent(event))
    );
    for (const endpoint of endpoints) {
      endpoint.addEventListener("refused", (event) => this.dispatchEvent(event));
    }
    if (drainOnSignals) {
      this.#unregister = drainOnShutdown(async (signal) => {
        const started = Date.now();
        settings.logger.info(
          `${signal}: draining: buffered jobs go back; waiting for the running ones to finish ` +
            `and be confirmed (up to ${settings.drainTimeout} ms), then closing`,
        );
        await this.close();
        settings.logger.info(`drained and closed in ${Date.now() - started} ms; exiting`);
      });
    }
    for (const socket of this.#sockets) socket.connect();
  }

  /** How many endpoints have an open socket. */
  get connected(): number {
    return this.#sockets.filter((socket) => socket.open).length;
  }

  /** Jobs completed by all endpoints. */
  get processed(): number {
    return this.endpoints.reduce((sum, endpoint) => sum + endpoint.processed, 0);
  }

  /**
   * Drain and stop: no new job starts, buffered jobs go back to the controller at once, running
   * handlers finish (up to `drainTimeout`) and are confirmed, then the sockets close and
   * reconnecting stops. Resolves when that is done.
   */
  close(): Promise<void> {
    this.#closing ??= Promise.all(this.#sockets.map((socket) => socket.close())).then(() => {
      this.#unregister();
    });
    return this.#closing;
  }

  /** Same as {@linkcode WorkerConnection.close}. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.close();
  }
}

/**
 * Connect worker endpoints to a workpull server and keep them connected.
 *
 * @example A worker process with four endpoints
 * ```ts ignore
 * import { connectWorker } from "./client.ts";
 *
 * const worker = connectWorker<{ to: string }>({
 *   url: "wss://jobs.example.com/workers",
 *   token: () => fetch("/worker-token").then((r) => r.text()),
 *   producer: "emails",
 *   name: "mailer",
 *   concurrency: 4,
 *   handler: async ({ payload, messageId }) => {
 *     await sendMail(payload.to, { idempotencyKey: messageId });
 *   },
 * });
 * worker.addEventListener("disconnected", (e) => console.warn(e.endpoint, e.code, e.retryIn));
 * // later
 * await worker.close();
 * ```
 */
export function connectWorker<T = unknown>(options: ConnectWorkerOptions<T>): WorkerConnection<T> {
  optionsObject(OWNER, options);
  const url = new URL(options.url);
  if (url.protocol === "http:") url.protocol = "ws:";
  else if (url.protocol === "https:") url.protocol = "wss:";
  if (url.protocol !== "ws:" && url.protocol !== "wss:") {
    throw new TypeError(`Cannot create ${OWNER}: option "url" must be a ws(s) or http(s) URL`);
  }
  const token = options.token;
  if (token !== undefined && typeof token !== "string" && typeof token !== "function") {
    throw new TypeError(`Cannot create ${OWNER}: option "token" must be a string or a function`);
  }
  const tokenIn = options.tokenIn ?? "protocol";
  if (tokenIn !== "protocol" && tokenIn !== "query") {
    throw new TypeError(`Cannot create ${OWNER}: option "tokenIn" must be "protocol" or "query"`);
  }
  const WebSocketCtor = options.WebSocket ?? globalThis.WebSocket;
  if (typeof WebSocketCtor !== "function") {
    throw new TypeError(`Cannot create ${OWNER}: no WebSocket constructor is available`);
  }
  const concurrency = integerOption(OWNER, "concurrency", options.concurrency, 1, 1, 1000);
  const settings: Settings = {
    url,
    token: typeof token === "string" ? () => token : token,
    refreshable: typeof token === "function",
    drainTimeout: durationOption(
      OWNER,
      "drainTimeout",
      options.drainTimeout,
      DEFAULT_DRAIN_TIMEOUT,
      0,
      MAX_DRAIN_TIMEOUT,
    ),
    tokenIn,
    connectTimeout: durationOption(
      OWNER,
      "connectTimeout",
      options.connectTimeout,
      10_000,
      1,
      3_600_000,
    ),
    backoff: resolveBackoff(OWNER, options.backoff),
    WebSocket: WebSocketCtor,
    logger: loggerOption(OWNER, options.logger),
  };
  const endpoints = Array.from({ length: concurrency }, (_, i) =>
    new WorkerEndpoint<T>({
      producer: options.producer,
      name: concurrency === 1 ? options.name : `${options.name}#${i + 1}`,
      handler: options.handler,
      window: options.window,
      resendInterval: options.resendInterval,
      silenceIntervals: options.silenceIntervals ?? 3,
      ackDelay: options.ackDelay,
      drainTimeout: options.drainTimeout,
      incarnation: options.incarnation,
      logger: settings.logger,
    }));
  const drainOnSignals = booleanOption(OWNER, "drainOnSignals", options.drainOnSignals, true);
  return new WorkerConnection(endpoints, settings, drainOnSignals);
}

/** What the reconnect loop needs of an endpoint. */
type SocketEndpoint = Pick<
  WorkerEndpoint<unknown>,
  "attach" | "close" | "closed" | "name" | "live"
>;

/** One endpoint's socket and its reconnect loop. */
class EndpointSocket {
  readonly #endpoint: SocketEndpoint;
  readonly #settings: Settings;
  readonly #emit: (event: Event) => void;
  #socket: WebSocket | undefined;
  /** Ends the current socket's life (idempotent): called at its close or when it is given up. */
  #release: ((code: number, reason: string) => void) | undefined;
  #socketClosed: Promise<void> = Promise.resolve();
  #attempt = 0;
  #retry: ReturnType<typeof setTimeout> | undefined;
  #stopped = false;
  /** The last token the server refused as expired. */
  #expired: string | undefined;

  constructor(
    endpoint: SocketEndpoint,
    settings: Settings,
    emit: (event: Event) => void,
  ) {
    this.#endpoint = endpoint;
    this.#settings = settings;
    this.#emit = emit;
  }

  get open(): boolean {
    return this.#socket?.readyState === OPEN;
  }

  async connect(): Promise<void> {
    this.#retry = undefined;
    if (this.#stopped) return;
    let url: string;
    let protocols: string[];
    let token: string | undefined;
    try {
      token = await this.#settings.token?.();
      if (this.#stopped) return;
      ({ url, protocols } = this.#target(token));
    } catch (error) {
      return this.#scheduleRetry(1006, `cannot get a token: ${String(error)}`);
    }
    let socket: WebSocket;
    try {
      socket = openSocket(this.#settings.WebSocket, url, protocols) as WebSocket;
    } catch (error) {
      return this.#scheduleRetry(1006, String(error));
    }
    this.#watch(socket, url, token);
  }

  /**
   * The socket to `url` failed before it opened: ask the server why (see the module
   * documentation), then stop, reconnect at once with a fresh token, or retry with backoff.
   */
  async #failedToOpen(code: number, reason: string, url: string, token: string | undefined) {
    const refusal = await askWhyRefused(url, token, this.#settings);
    if (this.#stopped || this.#endpoint.closed) return this.#scheduleRetry(code, reason);
    if (!refusal) return this.#scheduleRetry(code, reason);
    if (refusal.reason === "expired" && this.#settings.refreshable && token !== this.#expired) {
      this.#expired = token; // the same token expired again: the function has no fresh one
      return this.#scheduleRetry(CloseCode.credentialExpired, "the token expired");
    }
    this.#stopped = true;
    const error = new UpgradeRefusedError(this.#endpoint.name, refusal.status, refusal.reason);
    void this.#endpoint.close();
    this.#emit(new UpgradeRefusedEvent(error));
    this.#scheduleRetry(code, error.message);
  }

  /** Stop for good; resolves when the handler settled and the socket closed (bounded). */
  async close(): Promise<void> {
    this.#stopped = true;
    clearTimeout(this.#retry);
    const socket = this.#socket;
    if (socket?.readyState === CONNECTING) this.#release?.(1000, "worker closed");
    await this.#endpoint.close(); // closes the link, and so the socket
    let timer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      this.#socketClosed,
      new Promise((resolve) => (timer = setTimeout(resolve, 2000))),
    ]);
    clearTimeout(timer);
  }

  #target(token: string | undefined): { url: string; protocols: string[] } {
    const url = new URL(this.#settings.url);
    if (token === undefined) return { url: url.href, protocols: [SUBPROTOCOL] };
    if (typeof token !== "string" || token === "") throw new TypeError("the token is empty");
    if (this.#settings.tokenIn === "query") {
      url.searchParams.set("token", token);
      return { url: url.href, protocols: [SUBPROTOCOL] };
    }
    if (!SUBPROTOCOL_TOKEN.test(token)) {
      throw new TypeError('the token cannot travel as a subprotocol; use tokenIn: "query"');
    }
    return { url: url.href, protocols: [SUBPROTOCOL, token] };
  }

  #watch(socket: WebSocket, url: string, token: string | undefined): void {
    const guard = (body: () => void) =>
      guardAs("a worker socket handler", body, this.#settings.logger);
    this.#socket = socket;
    let receiver: LinkReceiver | undefined;
    let live = true;
    let opened = false;
    let markClosed!: () => void;
    this.#socketClosed = new Promise((resolve) => (markClosed = resolve));
    const openTimer = setTimeout(
      () => release(1006, "connect timeout"),
      this.#settings.connectTimeout,
    );

    // An ack is held briefly and dropped if a request follows (a request confirms at least as
    // much). Two small frames back to back stall ~40 ms on a client without TCP_NODELAY
    // (Deno's WebSocket client): Nagle holds the second until the server's delayed ACK.
    let heldAck: string | undefined;
    let ackTimer: ReturnType<typeof setTimeout> | undefined;
    const write = (frame: string) => {
      if (live && socket.readyState === OPEN) socket.send(frame);
    };
    const flushAck = () => {
      clearTimeout(ackTimer);
      ackTimer = undefined;
      const frame = heldAck;
      heldAck = undefined;
      if (frame !== undefined) write(frame);
    };
    /** This socket is done (closed, failed, or given up by the endpoint): move on, once. */
    const release = (code: number, reason: string) => {
      clearTimeout(openTimer);
      clearTimeout(ackTimer);
      if (!live) return;
      live = false;
      if (socket.readyState === CONNECTING || socket.readyState === OPEN) {
        try {
          socket.close(closableCode(code), closeReason(reason));
        } catch {
          // Already closing.
        }
      }
      const target = receiver;
      receiver = undefined;
      if (target) guard(() => target.closed(code, reason));
      if (this.#socket === socket) this.#socket = undefined;
      if (opened || this.#stopped) this.#scheduleRetry(code, reason);
      else void this.#failedToOpen(code, reason, url, token);
    };
    this.#release = release;

    const link: Link = {
      send(frame) {
        if (frame.startsWith('{"type":"ack"')) {
          heldAck = frame;
          ackTimer ??= setTimeout(flushAck, ACK_HOLD);
          return;
        }
        if (frame.startsWith('{"type":"request"')) heldAck = undefined;
        flushAck();
        write(frame);
      },
      // The endpoint gives the link up (silence, a bad frame, or close): send a held ack first
      // (a draining endpoint's last confirmation), and do not wait for the close handshake,
      // which a half-open socket never completes.
      close: (code = CloseCode.normal, reason = "") => {
        flushAck();
        release(code, reason);
      },
    };

    socket.onopen = () =>
      guard(() => {
        clearTimeout(openTimer);
        if (!live) return;
        opened = true;
        receiver = this.#endpoint.attach(link);
        this.#emit(new ConnectedEvent(this.#endpoint.name));
      });
    socket.onmessage = (event: MessageEvent) =>
      guard(() => {
        if (!live || !receiver) return;
        receiver.receive(event.data);
        // Registered on this socket: the next outage starts the backoff afresh.
        if (this.#endpoint.live) this.#attempt = 0;
      });
    socket.onclose = (event: CloseEvent) =>
      guard(() => {
        markClosed();
        release(event.code, event.reason);
      });
    socket.onerror = () =>
      guard(() => {
        // Usually a close event follows. Node 22's WebSocket fires only this one when the
        // handshake is refused (and stays CONNECTING): before open, the attempt failed now,
        // rather than at the connect timeout.
        if (receiver || !live) return;
        markClosed();
        release(1006, "connection failed");
      });
  }

  #scheduleRetry(code: number, reason: string): void {
    if (this.#stopped || this.#endpoint.closed) {
      this.#emit(new DisconnectedEvent(this.#endpoint.name, code, reason, undefined));
      return;
    }
    // An expired credential is not an outage: get a fresh token and reconnect now.
    const renew = code === CloseCode.credentialExpired;
    this.#attempt = renew ? 0 : this.#attempt + 1;
    const delay = renew ? 0 : backoffDelay(this.#attempt, this.#settings.backoff, Math.random());
    this.#emit(new DisconnectedEvent(this.#endpoint.name, code, reason, delay));
    this.#retry = setTimeout(() => void this.connect(), delay);
  }
}

/** Answers that retrying cannot change, by status. */
const LASTING_REFUSALS = new Set([401, 403, 404]);

/**
 * Ask the workers route at `url` with a plain `GET` why an upgrade with `token` was refused: the
 * status and reason of a lasting refusal, or undefined for an outage (no answer, or any other).
 */
async function askWhyRefused(
  url: string,
  token: string | undefined,
  settings: Settings,
): Promise<{ status: number; reason: string } | undefined> {
  const target = new URL(url);
  target.protocol = target.protocol === "wss:" ? "https:" : "http:";
  const headers: Record<string, string> = {};
  // A query token is in the URL already.
  if (token !== undefined && settings.tokenIn === "protocol") {
    headers.authorization = `Bearer ${token}`;
  }
  const fetch = (globalThis as { fetch?: typeof globalThis.fetch }).fetch;
  if (typeof fetch !== "function") return undefined;
  try {
    const response = await fetch(target, {
      headers,
      signal: AbortSignal.timeout(settings.connectTimeout),
    });
    const body = await response.json().catch(() => undefined) as
      | { error?: unknown; reason?: unknown }
      | undefined;
    if (!LASTING_REFUSALS.has(response.status)) return undefined;
    const reason = response.status === 404
      ? "unknown-flow"
      : typeof body?.reason === "string"
      ? body.reason
      : typeof body?.error === "string"
      ? body.error
      : "refused";
    return { status: response.status, reason };
  } catch {
    return undefined;
  }
}

/** Browsers (and the WHATWG API elsewhere) accept only 1000 and 3000..4999 in `close()`. */
function closableCode(code: number): number {
  return code === 1000 || (code >= 3000 && code <= 4999) ? code : 1000;
}

/** What the client may read of the runtime it is in (nothing of it exists in a browser). */
interface RuntimeGlobals {
  readonly Bun?: { readonly version?: string };
  readonly Deno?: unknown;
  readonly process?: { readonly versions?: { readonly node?: string } };
  readonly WebSocket?: unknown;
}

/**
 * Open a socket that tells the server what it runs on (shown on its dashboard) where the
 * runtime would not: Bun's WebSocket sends no `User-Agent` (its constructor takes headers in an
 * options object), nor does `ws` on Node (its third argument; a WHATWG constructor ignores a
 * third argument). Browsers, Deno and Node's global WebSocket send their own.
 */
function openSocket(
  WebSocket: WebSocketConstructor,
  url: string,
  protocols: string[],
): WebSocketLike {
  const runtime = globalThis as RuntimeGlobals;
  const open = WebSocket as unknown as new (...args: unknown[]) => WebSocketLike;
  const bun = runtime.Bun?.version;
  if (bun !== undefined && WebSocket === runtime.WebSocket) {
    return new open(url, { protocols, headers: { "user-agent": `Bun/${bun}` } });
  }
  const node = runtime.Deno === undefined && runtime.Bun === undefined
    ? runtime.process?.versions?.node
    : undefined;
  if (node !== undefined && WebSocket !== runtime.WebSocket) {
    return new open(url, protocols, { headers: { "user-agent": `Node.js/${node}` } });
  }
  return new WebSocket(url, protocols);
}
