/**
 * Signed access tokens: HMAC-SHA256 through Web Crypto, so the same code signs and verifies on
 * Deno, Bun, Node and in browsers.
 *
 * A token is three dot-separated parts, or four when it names its key, every character URL- and
 * subprotocol-safe:
 *
 * ```
 * wp1.<base64url(JSON claims)>.<base64url(HMAC-SHA256(key, "wp1." + claims part))>
 * wp1.<kid>.<base64url(JSON claims)>.<base64url(HMAC-SHA256(keys[kid], "wp1.<kid>." + claims part))>
 * ```
 *
 * The claims name the producer (flow), optionally one worker endpoint, an expiry in Unix seconds
 * and an optional token id (`jti`, for revocation lists). A token **with** a `worker` claim
 * admits that worker to the WebSocket route; a token **without** one is a client token for the
 * HTTP routes (submit jobs, read stats).
 *
 * The key id (`kid`) lets secrets rotate with overlap: the verifier holds every key still in use
 * by id (`{ keys: { "2024-06": old, "2024-09": new } }`), signs new tokens with the newest and
 * drops the old one once the longest-lived token signed with it has expired.
 *
 * Verification is strict: only the canonical base64url spelling of each part is accepted (the
 * unused low bits of the last character must be zero, so no two spellings verify), the signature
 * is checked first (in constant time, through `crypto.subtle.verify`), and only then are the
 * claims parsed, so unsigned input is never interpreted. Only the key id is read before the
 * signature check, to pick the key.
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
/** What a key id may look like: 1 to 64 characters of `A-Z a-z 0-9 _ -`. */
const KID = /^[A-Za-z0-9_-]{1,64}$/;

/** What a token says. */
export interface TokenClaims {
  /** The producer (flow) name the token is for. */
  readonly producer: string;
  /** The worker the token admits (its endpoints `worker#1`, `worker#2`… too); absent: a client token. */
  readonly worker?: string;
  /** Expiry, Unix time in seconds. */
  readonly exp: number;
  /** The token's id, for revocation lists. */
  readonly jti?: string;
  /** The id of the key that signed the token (not a claim on the wire: the token's second part). */
  readonly kid?: string;
}

/** Why a token was refused. */
export type TokenErrorReason = "malformed" | "bad-signature" | "unknown-key" | "expired";

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

/**
 * The keys a verifier accepts: `secret` for tokens without a key id, `keys` by key id for tokens
 * with one. At least one of the two.
 */
export interface TokenKeys {
  /** Verifies tokens that name no key. */
  readonly secret?: TokenSecret;
  /** Verifies tokens that name a key, by key id. */
  readonly keys?: Readonly<Record<string, TokenSecret>>;
}

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
  /** The id of the signing key, written into the token (1..64 of `A-Z a-z 0-9 _ -`). */
  readonly kid?: string;
  /** A token id (`jti` claim) a revocation list can name. Default: none. */
  readonly id?: string;
}

/** Options of {@linkcode verifyToken}. */
export interface VerifyTokenOptions {
  /** The current time in Unix milliseconds. Default: `Date.now()`. */
  readonly now?: number;
}

const Name = v.pipe(v.string(), v.minLength(1), v.maxLength(MAX_ID_LENGTH));
const Claims = v.strictObject({
  producer: Name,
  worker: v.optional(Name),
  exp: v.pipe(v.number(), v.safeInteger(), v.minValue(0)),
  jti: v.optional(Name),
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
  if (typeof secret === "object" && secret !== null && (secret as CryptoKey).type === "secret") {
    return Promise.resolve(secret);
  }
  // Typically an unset environment variable: say so rather than let Web Crypto fail obscurely.
  return Promise.reject(
    new TypeError(
      `Cannot use the token secret: it must be a string or Uint8Array of at least ${MIN_SECRET_BYTES} bytes, or an HMAC CryptoKey, got ${
        secret === undefined ? "undefined (an unset environment variable?)" : typeof secret
      }`,
    ),
  );
}

/**
 * Sign a token. With `worker` it admits that worker endpoint (and its numbered endpoints) to
 * the WebSocket route; without, it is a client token for `POST /jobs` and `GET /stats`. With
 * `kid`, the token names its key, for verifiers holding several (`{ keys }`).
 *
 * @example A worker token valid for one hour
 * ```ts
 * import { signToken, verifyToken } from "./token.ts";
 * const secret = "a-secret-of-at-least-32-bytes-length!";
 * const token = await signToken(secret, { producer: "emails", worker: "mailer", expiresIn: 3_600_000 });
 * const claims = await verifyToken(secret, token);
 * console.assert(claims.worker === "mailer" && claims.producer === "emails");
 * ```
 *
 * @example Sign with a named key; verify with the keys in rotation
 * ```ts
 * import { signToken, verifyToken } from "./token.ts";
 * const next = "the-next-secret-of-at-least-32-bytes!";
 * const token = await signToken(next, { producer: "emails", expiresIn: 60_000, kid: "2024-09" });
 * const claims = await verifyToken({ keys: { "2024-06": "the-old-secret-of-at-least-32-bytes!", "2024-09": next } }, token);
 * console.assert(claims.kid === "2024-09");
 * ```
 */
export async function signToken(secret: TokenSecret, options: SignTokenOptions): Promise<string> {
  const now = options.now ?? Date.now();
  if (!Number.isFinite(options.expiresIn) || options.expiresIn <= 0) {
    throw new RangeError(
      `Cannot sign a token: expiresIn must be a positive number of milliseconds, got ${options.expiresIn}`,
    );
  }
  if (options.kid !== undefined && (typeof options.kid !== "string" || !KID.test(options.kid))) {
    throw new TypeError(
      "Cannot sign a token: kid must be 1 to 64 characters of A-Z, a-z, 0-9, _ and -",
    );
  }
  const claims = {
    producer: options.producer,
    ...(options.worker === undefined ? {} : { worker: options.worker }),
    exp: Math.floor((now + options.expiresIn) / 1000),
    ...(options.id === undefined ? {} : { jti: options.id }),
  };
  const checked = v.safeParse(Claims, claims);
  if (!checked.success) {
    throw new TypeError(`Cannot sign a token: ${checked.issues[0].message}`);
  }
  const prefix = options.kid === undefined ? VERSION : `${VERSION}.${options.kid}`;
  const signed = `${prefix}.${base64url(encoder.encode(JSON.stringify(claims)))}`;
  const key = await keyFor(secret);
  const signature = await crypto.subtle.sign("HMAC", key, encoder.encode(signed));
  return `${signed}.${base64url(new Uint8Array(signature))}`;
}

/**
 * Verify a token and return its claims. Rejects with a {@linkcode TokenError} that says why:
 * `malformed` (including any non-canonical spelling), `bad-signature` (also a token signed with
 * another key), `unknown-key` (a key id the verifier does not hold) or `expired`.
 *
 * `secret` is one secret (for tokens without a key id) or {@linkcode TokenKeys}.
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
  secret: TokenSecret | TokenKeys,
  token: string,
  options: VerifyTokenOptions = {},
): Promise<TokenClaims> {
  if (typeof token !== "string" || token.length > MAX_TOKEN_LENGTH) {
    throw new TokenError("malformed", "the token is not a string of acceptable length");
  }
  const parts = token.split(".");
  if ((parts.length !== 3 && parts.length !== 4) || parts[0] !== VERSION) {
    throw new TokenError("malformed", `the token is not a ${VERSION} token`);
  }
  const kid = parts.length === 4 ? parts[1] : undefined;
  if (kid !== undefined && !KID.test(kid)) {
    throw new TokenError("malformed", "the token's key id is malformed");
  }
  const claimsPart = parts[parts.length - 2];
  const claimsBytes = fromBase64url(claimsPart);
  const signature = fromBase64url(parts[parts.length - 1]);
  if (!claimsBytes || !signature) {
    throw new TokenError("malformed", "the token is not canonical base64url");
  }
  const secretForToken = pickSecret(secret, kid);
  if (secretForToken === undefined) {
    throw new TokenError("unknown-key", "the token's key is not one the verifier holds");
  }
  const key = await keyFor(secretForToken);
  const valid = await crypto.subtle.verify(
    "HMAC",
    key,
    signature,
    encoder.encode(token.slice(0, token.length - parts[parts.length - 1].length - 1)),
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
  return kid === undefined ? parsed.output : { ...parsed.output, kid };
}

/** Whether `value` is a {@linkcode TokenKeys} record rather than one secret. */
export function isTokenKeys(value: TokenSecret | TokenKeys): value is TokenKeys {
  return typeof value === "object" && value !== null && !(value instanceof Uint8Array) &&
    !(typeof CryptoKey !== "undefined" && value instanceof CryptoKey) &&
    ("secret" in value || "keys" in value);
}

function pickSecret(
  secret: TokenSecret | TokenKeys,
  kid: string | undefined,
): TokenSecret | undefined {
  if (!isTokenKeys(secret)) return kid === undefined ? secret : undefined;
  if (kid === undefined) return secret.secret;
  return Object.hasOwn(secret.keys ?? {}, kid) ? secret.keys![kid] : undefined;
}

function base64url(bytes: Uint8Array): string {
  let binary = "";
  for (const byte of bytes) binary += String.fromCharCode(byte);
  return btoa(binary).replaceAll("+", "-").replaceAll("/", "_").replace(/=+$/, "");
}

/**
 * Decode canonical base64url: the alphabet only, no padding, and re-encoding gives the same
 * text (so the unused low bits of the last character are zero and exactly one spelling of
 * each byte string is accepted).
 */
function fromBase64url(text: string): Uint8Array<ArrayBuffer> | undefined {
  if (!/^[A-Za-z0-9_-]+$/.test(text) || text.length % 4 === 1) return undefined;
  let bytes: Uint8Array<ArrayBuffer>;
  try {
    const binary = atob(text.replaceAll("-", "+").replaceAll("_", "/"));
    bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
  } catch {
    return undefined;
  }
  return base64url(bytes) === text ? bytes : undefined;
}
