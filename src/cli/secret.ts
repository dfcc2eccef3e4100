/**
 * The signing secret of a `workpull` server and of the tokens it accepts: `WORKPULL_SECRET` when
 * it is set, else the file `.workpull/secret` (or `--secret-file`), which `serve` and `token`
 * create once with 32 random bytes, readable by its owner only (mode 0600), saying so on
 * standard error. Clients on the same machine sign their own short-lived tokens with it.
 *
 * @module
 */

import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { dirname } from "node:path";
import process from "node:process";
import { MIN_SECRET_BYTES, signToken } from "../net/token.ts";
import { CliError, EXIT } from "./exit.ts";
import { programName } from "./runtime.ts";

/** Where the secret file is by default. */
export const DEFAULT_SECRET_FILE = ".workpull/secret";

/** Where a secret came from, and the secret. */
export interface Secret {
  readonly secret: string;
  /** `WORKPULL_SECRET`, or the file's path. */
  readonly source: string;
}

/**
 * The secret: `WORKPULL_SECRET`, else the file at `path`; with `create`, a missing file is
 * created (a line on standard error says so). Undefined when there is none and `create` is
 * false.
 */
export function loadSecret(path: string, create: boolean): Secret | undefined {
  const fromEnv = process.env.WORKPULL_SECRET;
  if (fromEnv !== undefined && fromEnv !== "") {
    checkLength(fromEnv, "WORKPULL_SECRET");
    return { secret: fromEnv, source: "WORKPULL_SECRET" };
  }
  if (existsSync(path)) {
    const secret = readFileSync(path, "utf8").trim();
    checkLength(secret, path);
    if ((statSync(path).mode & 0o077) !== 0 && process.platform !== "win32") {
      console.error(`workpull: ${path} is readable by others; chmod 600 ${path}`);
    }
    return { secret, source: path };
  }
  if (!create) return undefined;
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  const secret = btoa(String.fromCharCode(...bytes)).replace(
    /[+/=]/g,
    (c) => c === "+" ? "-" : c === "/" ? "_" : "",
  );
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  writeFileSync(path, secret + "\n", { mode: 0o600, flag: "wx" });
  chmodSync(path, 0o600); // whatever the umask
  console.error(
    `workpull: generated a signing secret in ${path} (mode 0600); tokens signed with it stay ` +
      "valid until they expire or the file changes (set WORKPULL_SECRET to use your own)",
  );
  return { secret, source: path };
}

/** The secret, or an error telling how to get one. */
export function requireSecret(path: string, what: string): Secret {
  const found = loadSecret(path, false);
  if (found) return found;
  throw new CliError(
    `${what}: there is no signing secret here (WORKPULL_SECRET is unset and ${path} does not ` +
      `exist). Pass --token (made on the server's machine with ${programName()} token), or set ` +
      "WORKPULL_SECRET to the server's secret",
    EXIT.usage,
  );
}

/**
 * The token a client command uses: `--token`, else `WORKPULL_TOKEN`, else one signed here with
 * the local secret (a client token when `worker` is undefined), valid for an hour.
 */
export async function tokenFor(
  given: string | undefined,
  flow: string,
  secretFile: string,
  worker?: string,
): Promise<string> {
  const token = given ?? process.env.WORKPULL_TOKEN;
  if (token !== undefined && token !== "") return token;
  const { secret } = requireSecret(secretFile, "no --token given");
  return await signToken(secret, { producer: flow, worker, expiresIn: 3_600_000 });
}

function checkLength(secret: string, source: string): void {
  if (new TextEncoder().encode(secret).length < MIN_SECRET_BYTES) {
    throw new CliError(
      `the secret in ${source} is shorter than ${MIN_SECRET_BYTES} bytes; use a longer one ` +
        "(for example: openssl rand -base64 32)",
      EXIT.usage,
    );
  }
}
