/**
 * Signed access tokens: HMAC-SHA256 through Web Crypto, so the same code signs and verifies on
 * Deno, Bun, Node and in browsers.
 *
 * A token is three dot-separated parts, every character URL- and subprotocol-safe:
 *
 * ```
 * wp1.<base64url(JSON claims)>.<base64url(HMAC-SHA256(key, "wp1." + claims part))>
 * ```
 *
 * The claims name the producer (flow), optionally one worker endpoint, and an expiry in Unix
 * seconds. A token **with** a `worker` claim admits that worker to the WebSocket route; a token
 * **without** one is a client token for the HTTP routes (submit jobs, read stats).
 *
 * Verification checks the signature first (in constant time, through `crypto.subtle.verify`),
 * and only then parses the claims, so unsigned input is never interpreted.
 *
 * @module
 */

import * as v from "valibot";
import { MAX_ID_LENGTH } from "../protocol/schemas.ts";

/** The first part of every token: the format version. */
const VERSION = "wp1";
/** Tokens longer than this are refused without any work. */
export const MAX_TOKEN_LENGTH = 4096;
/** The shortest secret accepted for signing, in bytes (the HMAC-SHA256 output size). */
export const MIN_SECRET_BYTES = 32;

/** What a token says. */
export interface TokenClaims {
  /** The producer (flow) name the token is for. */
  readonly producer: string;
  /** The worker the token admits (its endpoints `worker#1`, `worker#2`… too); absent: a client token. */
  readonly worker?: string;
  /** Expiry, Unix time in seconds. */
  readonly exp: number;
}

/** Why a token was refused. */
export type TokenErrorReason = "malformed" | "bad-signature" | "expired";

/**
 * A token could not be verified. `reason` says why; the message never contains the token.
 *
 * @example
 * ```ts
 * import { TokenError } from "./token.ts";
 * const error = new TokenError("expired", "the token expired at 2024-01-01T00:00:00.000Z");
 * console.assert(error.reason === "expired" && error.name === "TokenError");
 * ```
 */
export class TokenError extends Error {
  /** Creates the error. */
  constructor(
    /** Why the token was refused. */
    readonly reason: TokenErrorReason,
    message: string,
  ) {
    super(message);
    this.name = "TokenError";
  }
}

/** A signing secret (at least 32 bytes; a string counts its UTF-8 bytes) or an HMAC `CryptoKey`. */
export type TokenSecret = string | Uint8Array | CryptoKey;

/** Options of {@linkcode signToken}. */
export interface SignTokenOptions {
  /** The producer (flow) name. */
  readonly producer: string;
  /** The worker endpoint name the token admits; omit for a client token. */
  readonly worker?: string;
  /** Lifetime in milliseconds from `now`. */
  readonly expiresIn: number;
  /** The current time in Unix milliseconds. Default: `Date.now()`. */
  readonly now?: number;
}

/** Options of {@linkcode verifyToken}. */
export interface VerifyTokenOptions {
  /** The current time in Unix milliseconds. Default: `Date.now()`. */
  readonly now?: number;
}

const Claims = v.strictObject({
  producer: v.pipe(v.string(), v.minLength(1), v.maxLength(MAX_ID_LENGTH)),
  worker: v.optional(v.pipe(v.string(), v.minLength(1), v.maxLength(MAX_ID_LENGTH))),
  exp: v.pipe(v.number(), v.safeInteger(), v.minValue(0)),
});

const encoder = new TextEncoder();
const keys = new WeakMap<Uint8Array, CryptoKey>();
const stringKeys = new Map<string, Promise<CryptoKey>>();

/**
 * Import a secret as an HMAC-SHA256 key usable by {@linkcode signToken} and
 * {@linkcode verifyToken}. Throws a `RangeError` for a secret shorter than 32 bytes.
 *
 * @example
 * ```ts
 * import { importTokenKey } from "./token.ts";
 * const key = await importTokenKey("a-secret-of-at-least-32-bytes-length!");
 * console.assert(key.algorithm.name === "HMAC");
 * ```
 */
export function importTokenKey(secret: string | Uint8Array): Promise<CryptoKey> {
  const bytes = typeof secret === "string" ? encoder.encode(secret) : secret;
  if (!(bytes instanceof Uint8Array) || bytes.length < MIN_SECRET_BYTES) {
    return Promise.reject(
      new RangeError(
        `Cannot import the token secret: it must be at least ${MIN_SECRET_BYTES} bytes`,
      ),
    );
  }
  return crypto.subtle.importKey(
    "raw",
    bytes.slice(),
    { name: "HMAC", hash: "SHA-256" },
    false,
    ["sign", "verify"],
  );
}

/** The key for `secret`, imported once per secret value. */
function keyFor(secret: TokenSecret): Promise<CryptoKey> {
  if (typeof secret === "string") {
    let key = stringKeys.get(secret);
    if (!key) {
      key = importTokenKey(secret);
      key.catch(() => stringKeys.delete(secret as string));
      stringKeys.set(secret, key);
    }
    return key;
  }
  if (secret instanceof Uint8Array) {
    const known = keys.get(secret);
    if (known) return Promise.resolve(known);
    return importTokenKey(secret).then((key) => (keys.set(secret, key), key));
  }
  return Promise.resolve(secret);
}

/**
 * Sign a token. With `worker` it admits that worker endpoint (and its numbered endpoints) to
 * the WebSocket route; without, it is a client token for `POST /jobs` and `GET /stats`.
 *
 * @example A worker token valid for one hour
 * ```ts
 * import { signToken, verifyToken } from "./token.ts";
 * const secret = "a-secret-of-at-least-32-bytes-length!";
 * const token = await signToken(secret, { producer: "emails", worker: "mailer", expiresIn: 3_600_000 });
 * const claims = await verifyToken(secret, token);
 * console.assert(claims.worker === "mailer" && claims.producer === "emails");
 * ```
 */
export async function signToken(secret: TokenSecret, options: SignTokenOptions): Promise<string> {
  const now = options.now ?? Date.now();
  if (!Number.isFinite(options.expiresIn) || options.expiresIn <= 0) {
    throw new RangeError(
      `Cannot sign a token: expiresIn must be a positive number of milliseconds, got ${options.expiresIn}`,
    );
  }
  const claims: TokenClaims = {
    producer: options.producer,
    ...(options.worker === undefined ? {} : { worker: options.worker }),
    exp: Math.floor((now + options.expiresIn) / 1000),
  };
  const checked = v.safeParse(Claims, claims);
  if (!checked.success) {
    throw new TypeError(`Cannot sign a token: ${checked.issues[0].message}`);
  }
  const signed = `${VERSION}.${base64url(encoder.encode(JSON.stringify(claims)))}`;
  const key = await keyFor(secret);
  const signature = await crypto.subtle.sign("HMAC", key, encoder.encode(signed));
  return `${signed}.${base64url(new Uint8Array(signature))}`;
}

/**
 * Verify a token and return its claims. Rejects with a {@linkcode TokenError} that says why:
 * `malformed`, `bad-signature` (also a token signed with another key) or `expired`.
 *
 * @example
 * ```ts
 * import { signToken, TokenError, verifyToken } from "./token.ts";
 * const secret = "a-secret-of-at-least-32-bytes-length!";
 * const token = await signToken(secret, { producer: "jobs", expiresIn: 1000, now: 0 });
 * const error = await verifyToken(secret, token).catch((e) => e);
 * console.assert(error instanceof TokenError && error.reason === "expired");
 * ```
 */
export async function verifyToken(
  secret: TokenSecret,
  token: string,
  options: VerifyTokenOptions = {},
): Promise<TokenClaims> {
  if (typeof token !== "string" || token.length > MAX_TOKEN_LENGTH) {
    throw new TokenError("malformed", "the token is not a string of acceptable length");
  }
  const parts = token.split(".");
  if (parts.length !== 3 || parts[0] !== VERSION) {
    throw new TokenError("malformed", `the token is not a ${VERSION} token`);
  }
  const claimsBytes = fromBase64url(parts[1]);
  const signature = fromBase64url(parts[2]);
  if (!claimsBytes || !signature) {
    throw new TokenError("malformed", "the token is not base64url");
  }
  const key = await keyFor(secret);
  const valid = await crypto.subtle.verify(
    "HMAC",
    key,
    signature,
    encoder.encode(`${parts[0]}.${parts[1]}`),
  );
  if (!valid) throw new TokenError("bad-signature", "the token signature does not match");
  let json: unknown;
  try {
    json = JSON.parse(new TextDecoder("utf-8", { fatal: true }).decode(claimsBytes));
  } catch {
    throw new TokenError("malformed", "the token claims are not JSON");
  }
  const parsed = v.safeParse(Claims, json);
  if (!parsed.success) {
    throw new TokenError("malformed", `the token claims are invalid: ${parsed.issues[0].message}`);
  }
  const now = options.now ?? Date.now();
  if (parsed.output.exp * 1000 <= now) {
    throw new TokenError(
      "expired",
      `the token expired at ${new Date(parsed.output.exp * 1000).toISOString()}`,
    );
  }
  return parsed.output;
}

function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

function fromBase64url(text: string): Uint8Array<ArrayBuffer> | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(text)) return undefined;
  try {
    const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  } catch {
    return undefined;
  }
}
