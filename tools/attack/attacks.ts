/**
 * The attacks of the soak, one function each, every one bounded by a deadline and run against
 * 127.0.0.1 only. Each reproduces one weakness of the hostile-input issue and returns counts of
 * what it did and what the server answered; `attacker.ts` runs one in its own process.
 *
 * @module
 */

import net from "node:net";
import { signToken } from "../../server.ts";
import { RawSocket } from "./raw_socket.ts";

/** Where and how hard to attack. */
export interface AttackContext {
  readonly port: number;
  readonly secret: string;
  /** Stop by this time (Date.now() ms). */
  readonly until: number;
  /** 1 for the full soak; smaller for the short CI run. */
  readonly scale: number;
  /** The server's body deadline (`bodyTimeout`), ms. */
  readonly bodyTimeout: number;
  /** The server's head deadline (`headTimeout`), ms. */
  readonly headTimeout: number;
}

/** What an attack did and saw, by counter name. */
export type AttackCounts = Record<string, number>;

/** One attack. */
export type Attack = (context: AttackContext) => Promise<AttackCounts>;

const sleep = (ms: number) => new Promise((resolve) => setTimeout(resolve, ms));
const count = (
  counts: AttackCounts,
  key: string,
  by = 1,
) => (counts[key] = (counts[key] ?? 0) + by);
const alive = (context: AttackContext) => Date.now() < context.until;

function workerToken(context: AttackContext, worker: string, expiresIn = 600_000) {
  return signToken(context.secret, { producer: "jobs", worker, expiresIn });
}

function clientToken(context: AttackContext) {
  return signToken(context.secret, { producer: "jobs", expiresIn: 600_000 });
}

/** A standard WebSocket to the workers route that resolves once open (or undefined if refused). */
function openSocket(context: AttackContext, token: string): Promise<WebSocket | undefined> {
  return new Promise((resolve) => {
    const socket = new WebSocket(`ws://127.0.0.1:${context.port}/workers`, ["workpull.v1", token]);
    const timer = setTimeout(() => (socket.close(), resolve(undefined)), 5000);
    socket.onopen = () => (clearTimeout(timer), resolve(socket));
    socket.onerror = () => {};
    socket.onclose = () => (clearTimeout(timer), resolve(undefined));
  });
}

/** Register `name` on `socket`; resolves with the session and nonce, or undefined. */
function register(
  socket: WebSocket,
  name: string,
  timeout = 5000,
): Promise<{ session: string; nonce: string } | undefined> {
  const nonce = crypto.randomUUID();
  return new Promise((resolve) => {
    const timer = setTimeout(() => done(undefined), timeout);
    const done = (value: { session: string; nonce: string } | undefined) => {
      clearTimeout(timer);
      socket.removeEventListener("message", onMessage);
      socket.removeEventListener("close", onClose);
      resolve(value);
    };
    const onMessage = (event: MessageEvent) => {
      const frame = JSON.parse(String(event.data));
      if (frame.type === "registered" && frame.nonce === nonce) {
        done({ session: frame.session, nonce });
      }
    };
    const onClose = () => done(undefined);
    socket.addEventListener("message", onMessage);
    socket.addEventListener("close", onClose);
    socket.send(JSON.stringify({
      type: "register",
      producer: "jobs",
      worker: name,
      incarnation: crypto.randomUUID(),
      nonce,
      resendInterval: 2000,
    }));
  });
}

/**
 * Idle TCP connections that never send a byte (weakness 1): `1,000 × scale` of them, reopened
 * when the server closes one, held until the deadline.
 */
export const idleSockets: Attack = async (context) => {
  const counts: AttackCounts = {};
  const target = Math.max(20, Math.round(1000 * context.scale));
  const sockets = new Set<net.Socket>();
  const open = () => {
    const socket = net.connect(context.port, "127.0.0.1");
    sockets.add(socket);
    count(counts, "opened");
    socket.on("error", () => {});
    socket.on("close", () => {
      sockets.delete(socket);
      if (alive(context)) count(counts, "closedByServer");
    });
  };
  while (alive(context)) {
    while (sockets.size < target && alive(context)) open();
    await sleep(200);
  }
  for (const socket of sockets) socket.destroy();
  return counts;
};

/**
 * `POST /jobs` bodies of 8 MiB holding a million invalid items (weakness 2), two at a time.
 */
export const bodyBomb: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await clientToken(context);
  const body = `{"jobs":[${'{"x":1},'.repeat(1_048_000)}{"x":1}]}`;
  const post = async () => {
    while (alive(context)) {
      try {
        const response = await fetch(`http://127.0.0.1:${context.port}/jobs`, {
          method: "POST",
          headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
          body,
        });
        await response.body?.cancel();
        count(counts, `status${response.status}`);
      } catch {
        count(counts, "failed");
        await sleep(50);
      }
    }
  };
  await Promise.all([post(), post()]);
  return counts;
};

/** `POST /jobs` with a payload nested 100,000 deep (weakness 9). */
export const deepJson: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await clientToken(context);
  const depth = 100_000;
  const body = `{"payload":${"[".repeat(depth)}${"]".repeat(depth)}}`;
  while (alive(context)) {
    try {
      const response = await fetch(`http://127.0.0.1:${context.port}/jobs`, {
        method: "POST",
        headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
        body,
      });
      await response.body?.cancel();
      count(counts, `status${response.status}`);
    } catch {
      count(counts, "failed");
      await sleep(50);
    }
  }
  return counts;
};

/**
 * Valid frames as fast as the sender can write them from one worker token (weakness 3), on
 * `4 × scale` connections (at least 1), reconnecting whenever the server closes one.
 */
export const frameFlood: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await workerToken(context, "flooder");
  const flood = async (slot: number) => {
    while (alive(context)) {
      const socket = await openSocket(context, token);
      if (!socket) {
        count(counts, "refused");
        await sleep(100);
        continue;
      }
      count(counts, "connections");
      const closed = new Promise<number>((resolve) => {
        socket.addEventListener("close", (event) => resolve(event.code));
      });
      let open = true;
      closed.then((code) => (open = false, count(counts, `closed${code}`)));
      const session = await register(socket, `flooder#${slot}`);
      const frame = JSON.stringify({
        type: "ack",
        session: session?.session ?? "s",
        nonce: session?.nonce ?? "n",
        confirmed: 0,
      });
      while (open && alive(context)) {
        for (let i = 0; i < 2000 && socket.readyState === WebSocket.OPEN; i++) socket.send(frame);
        count(counts, "frames", 2000);
        // Yield so the close can arrive; keep the socket's own buffer from growing without end.
        await sleep(socket.bufferedAmount > 4 << 20 ? 5 : 0);
      }
      socket.close();
    }
  };
  await Promise.all(
    Array.from({ length: Math.max(1, Math.round(4 * context.scale)) }, (_, i) => flood(i)),
  );
  return counts;
};

/**
 * Fresh endpoint names `churn#<i>` registered as fast as the server answers (weakness 4): each
 * connection registers a name, ends its binding with an illegal demand, and registers the next.
 */
export const nameChurn: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await workerToken(context, "churn");
  let next = 0;
  const churn = async () => {
    while (alive(context)) {
      const socket = await openSocket(context, token);
      if (!socket) {
        count(counts, "refused");
        await sleep(100);
        continue;
      }
      while (socket.readyState === WebSocket.OPEN && alive(context)) {
        const registered = await register(socket, `churn#${next++}`);
        if (!registered) break;
        count(counts, "names");
        socket.send(JSON.stringify({
          type: "request",
          session: registered.session,
          nonce: registered.nonce,
          confirmed: 0,
          upTo: 1_000_000, // out of range: the binding ends, the connection stays
          resend: false,
        }));
      }
      socket.close();
    }
  };
  await Promise.all(Array.from({ length: 8 }, churn));
  return counts;
};

/**
 * 100 endpoints from one worker token that take jobs, heartbeat and never confirm (weakness 5).
 * Each holds a window of `200 × scale` jobs.
 */
export const hoard: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await workerToken(context, "hoarder");
  const window = Math.max(10, Math.round(200 * context.scale));
  const sockets: WebSocket[] = [];
  const timers: ReturnType<typeof setInterval>[] = [];
  await Promise.all(Array.from({ length: 100 }, async (_, i) => {
    const socket = await openSocket(context, token);
    if (!socket) return void count(counts, "refused");
    sockets.push(socket);
    count(counts, "endpoints");
    socket.addEventListener("message", (event) => {
      const frame = JSON.parse(String(event.data));
      if (frame.type === "jobs") count(counts, "jobsHeld", frame.jobs.length);
    });
    const session = await register(socket, `hoarder#${i}`);
    if (!session) return;
    const send = (type: "request" | "ack") =>
      socket.send(JSON.stringify({
        type,
        session: session.session,
        nonce: session.nonce,
        confirmed: 0,
        ...(type === "request" ? { upTo: window, resend: false } : {}),
      }));
    send("request");
    timers.push(setInterval(() => socket.readyState === WebSocket.OPEN && send("ack"), 1000));
  }));
  while (alive(context)) await sleep(100);
  for (const timer of timers) clearInterval(timer);
  for (const socket of sockets) socket.close();
  return counts;
};

/**
 * Frames far over the limit (weakness 6): rounds of `8 × scale` connections (at least 2), each
 * sending one frame of `16 MiB × scale` (at least 1 MiB) at the same time.
 */
export const oversizedFrames: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await workerToken(context, "bigframes");
  const frame = "x".repeat(Math.max(1, Math.round(16 * context.scale)) * 1024 * 1024);
  const parallel = Math.max(2, Math.round(8 * context.scale));
  while (alive(context)) {
    await Promise.all(Array.from({ length: parallel }, async () => {
      const socket = await openSocket(context, token);
      if (!socket) return void count(counts, "refused");
      const closed = new Promise<number>((resolve) => {
        socket.addEventListener("close", (event) => resolve(event.code));
      });
      socket.send(frame);
      count(counts, "frames");
      const code = await Promise.race([closed, sleep(10_000).then(() => -1)]);
      count(counts, `closed${code}`);
      socket.close();
    }));
  }
  return counts;
};

/**
 * Peers that register, ask for jobs, keep heartbeating and never read what the server sends
 * (weakness 7): `20 × scale` of them (at least 2), each with a window of 200.
 */
export const noRead: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await workerToken(context, "sloth");
  const peers: RawSocket[] = [];
  const timers: ReturnType<typeof setInterval>[] = [];
  await Promise.all(
    Array.from({ length: Math.max(2, Math.round(20 * context.scale)) }, async (_, i) => {
      const registered = await registeredPeer(context, token, `sloth#${i}`, counts, peers);
      if (!registered || registered === "refused") return;
      const { peer, session, nonce } = registered;
      count(counts, "registered");
      peer.send(JSON.stringify({
        type: "request",
        session,
        nonce,
        confirmed: 0,
        upTo: 200,
        resend: false,
      }));
      peer.stopReading();
      timers.push(setInterval(() => {
        peer.send(JSON.stringify({ type: "ack", session, nonce, confirmed: 0 }));
      }, 1000));
    }),
  );
  while (alive(context)) await sleep(100);
  for (const timer of timers) clearInterval(timer);
  count(counts, "closedByServer", peers.filter((peer) => peer.closed).length);
  for (const peer of peers) peer.destroy();
  return counts;
};

/**
 * Token spellings and request forms that must all be refused (weakness 8): forged, tampered,
 * non-canonical, expired and wrong-kind tokens on the upgrade; `text/plain` and a foreign Origin
 * on `POST /jobs`. Counts `accepted` (must stay 0).
 */
export const badCredentials: Attack = async (context) => {
  const counts: AttackCounts = {};
  const good = await workerToken(context, "w");
  const [version, claims, signature] = good.split(".");
  const last = signature.at(-1)!;
  const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
  // The last character of a 32-byte signature holds 4 bits of it and 2 unused bits: three other
  // characters spell the same signature when the unused bits are ignored.
  const siblings = [...alphabet].filter((c) =>
    c !== last && (alphabet.indexOf(c) >> 2) === (alphabet.indexOf(last) >> 2)
  );
  const tokens = [
    ...siblings.map((c) => `${version}.${claims}.${signature.slice(0, -1)}${c}`),
    // Tampered: two other characters (one signature in 1,024 ends in "AA" itself).
    `${version}.${claims}.${signature.slice(0, -2)}${signature.endsWith("AA") ? "AE" : "AA"}`,
    await signToken("another-secret-of-at-least-32-bytes!", {
      producer: "jobs",
      worker: "w",
      expiresIn: 60_000,
    }),
    await signToken(context.secret, {
      producer: "jobs",
      worker: "w",
      expiresIn: 1000,
      now: Date.now() - 10_000,
    }),
    await clientToken(context),
    await signToken(context.secret, { producer: "other", worker: "w", expiresIn: 60_000 }),
  ];
  const client = await clientToken(context);
  while (alive(context)) {
    for (const token of tokens) {
      const upgrade = await RawSocket.connect(context.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
      upgrade.socket?.destroy();
      count(counts, upgrade.status === 101 ? "accepted" : `status${upgrade.status}`);
    }
    const plain = await fetch(`http://127.0.0.1:${context.port}/jobs`, {
      method: "POST",
      headers: { authorization: `Bearer ${client}`, "content-type": "text/plain" },
      body: JSON.stringify({ payload: 1 }),
    });
    await plain.body?.cancel();
    count(counts, plain.status === 200 ? "accepted" : `status${plain.status}`);
  }
  return counts;
};

/**
 * Open a raw socket with `token` and register `name` on it: the peer, its session and nonce,
 * "refused" (counted as `status<code>`), or undefined when the registration was not answered.
 */
async function registeredPeer(
  context: AttackContext,
  token: string,
  name: string,
  counts: AttackCounts,
  peers: RawSocket[],
): Promise<{ peer: RawSocket; session: string; nonce: string } | "refused" | undefined> {
  const upgrade = await RawSocket.connect(context.port, "/workers", {
    "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
  });
  if (!upgrade.socket) {
    count(counts, `status${upgrade.status}`);
    return "refused";
  }
  const peer = upgrade.socket;
  peers.push(peer);
  const nonce = crypto.randomUUID();
  const session = await registerRaw(peer, name, nonce);
  return session ? { peer, session, nonce } : undefined;
}

/** Register `name` over a raw socket; resolves with the session, or undefined. */
async function registerRaw(peer: RawSocket, name: string, nonce: string) {
  peer.send(JSON.stringify({
    type: "register",
    producer: "jobs",
    worker: name,
    incarnation: crypto.randomUUID(),
    nonce,
    resendInterval: 2000,
  }));
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline && !peer.closed) {
    for (const message of peer.messages) {
      const frame = JSON.parse(message);
      if (frame.type === "registered") return frame.session as string;
    }
    await sleep(10);
  }
  return undefined;
}

/**
 * Whether the server closed `peer`'s TCP connection: resume reading, and wait up to `ms` for
 * the end of the stream or a reset (a peer that was not reading sees neither until it reads).
 */
function closedByServer(peer: RawSocket, ms: number): Promise<boolean> {
  if (peer.closed) return Promise.resolve(true);
  return new Promise((resolve) => {
    const timer = setTimeout(() => resolve(false), ms);
    peer.tcp.once("close", () => (clearTimeout(timer), resolve(true)));
    peer.tcp.resume();
  });
}

/**
 * Never-reading sockets from one worker token that ask for their jobs again and again (issue
 * 56): `100 × scale` of them (at least 10) register, take a window of `200 / scale` (at most
 * 2,000: fewer sockets, as much to resend) and send `request { resend: true }` every 50 ms
 * without reading a byte. The server must drop them,
 * TCP connection and all: at the end each is checked from this side (`stillOpen` must be 0).
 */
export const resendSpam: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await workerToken(context, "spammer");
  const peers: RawSocket[] = [];
  const timers: ReturnType<typeof setInterval>[] = [];
  await Promise.all(
    Array.from({ length: Math.max(10, Math.round(100 * context.scale)) }, async (_, i) => {
      const registered = await registeredPeer(context, token, `spammer#${i}`, counts, peers);
      if (registered === "refused") return;
      if (!registered) return void count(counts, "unregistered");
      const { peer, session, nonce } = registered;
      count(counts, "registered");
      peer.stopReading();
      const request = JSON.stringify({
        type: "request",
        session,
        nonce,
        confirmed: 0,
        upTo: Math.min(2000, Math.round(200 / Math.max(context.scale, 0.1))),
        resend: true,
      });
      timers.push(setInterval(() => peer.send(request), 50));
    }),
  );
  while (alive(context)) await sleep(100);
  for (const timer of timers) clearInterval(timer);
  count(counts, "closedDuring", peers.filter((peer) => peer.closed).length);
  const closed = await Promise.all(peers.map((peer) => closedByServer(peer, 3000)));
  count(counts, "stillOpen", closed.filter((c) => !c).length);
  for (const peer of peers) peer.destroy();
  return counts;
};

/**
 * `500 × scale` upgrades (at least 20) at once with one worker token (issue 56): at most the
 * credential's cap may be served (`status101`), the rest refused with 429; held until the end.
 */
export const upgradeStorm: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await workerToken(context, "stormer");
  const peers: RawSocket[] = [];
  await Promise.all(
    Array.from({ length: Math.max(20, Math.round(500 * context.scale)) }, async () => {
      const upgrade = await RawSocket.connect(context.port, "/workers", {
        "Sec-WebSocket-Protocol": `workpull.v1, ${token}`,
      });
      count(counts, `status${upgrade.status}`);
      if (upgrade.socket) peers.push(upgrade.socket);
    }),
  );
  while (alive(context)) await sleep(100);
  for (const peer of peers) peer.destroy();
  return counts;
};

/**
 * Bodies trickled a byte at a time (issue 56): `200 × scale` (at least 10) `POST /jobs` with a
 * valid client token that declare 10,000 bytes and send one every second. Each must be closed
 * by the server within its body deadline (`context.bodyTimeout`, the server's `bodyTimeout`) plus
 * 2 s: `closedInTime`, else `closedLate` or `stillOpen`.
 */
export const trickleBodies: Attack = async (context) => {
  const counts: AttackCounts = {};
  const token = await clientToken(context);
  const deadline = context.bodyTimeout + 2000;
  await Promise.all(
    Array.from(
      { length: Math.max(10, Math.round(200 * context.scale)) },
      () =>
        new Promise<void>((resolve) => {
          const started = Date.now();
          const socket = net.connect(context.port, "127.0.0.1");
          let answer = "";
          const timer = setInterval(() => socket.write("x"), 1000);
          let finished = false;
          const done = (key: string) => {
            if (finished) return;
            finished = true;
            clearInterval(timer);
            clearTimeout(giveUp);
            count(counts, key);
            socket.destroy();
            resolve();
          };
          const giveUp = setTimeout(() => done("stillOpen"), Math.max(deadline + 1000, 0));
          socket.on("error", () => {});
          socket.on("data", (chunk: Uint8Array) => (answer += new TextDecoder().decode(chunk)));
          socket.on("close", () => {
            const status = answer.match(/^HTTP\/1\.1 (\d+)/)?.[1] ?? "none";
            if (!finished) count(counts, `status${status}`);
            done(Date.now() - started <= deadline ? "closedInTime" : "closedLate");
          });
          socket.on("connect", () => {
            socket.write(
              `POST /jobs HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer ${token}\r\n` +
                "Content-Type: application/json\r\nContent-Length: 10000\r\n\r\n{",
            );
          });
        }),
    ),
  );
  return counts;
};

/**
 * Heads trickled a line at a time, and silent connections (issue 56): `1,000 × scale` of each
 * (at least 20). A trickler sends an upgrade's request line, then one header line a second. Each
 * must be closed by the server within its head deadline (`context.headTimeout`) plus 3 s
 * (`closedInTime`), or dropped at once when the server's budget of pending heads is spent (also
 * `closedInTime`); else `closedLate` or `stillOpen`; each counted under `trickling.` or `silent.`.
 */
export const trickleHeads: Attack = async (context) => {
  const counts: AttackCounts = {};
  const deadline = context.headTimeout + 3000;
  const each = Math.max(20, Math.round(1000 * context.scale));
  const one = (trickle: boolean) =>
    new Promise<void>((resolve) => {
      const started = Date.now();
      const socket = net.connect(context.port, "127.0.0.1");
      let timer: ReturnType<typeof setInterval> | undefined;
      let finished = false;
      const done = (key: string) => {
        if (finished) return;
        finished = true;
        clearInterval(timer);
        clearTimeout(giveUp);
        count(counts, `${trickle ? "trickling" : "silent"}.${key}`);
        socket.destroy();
        resolve();
      };
      const giveUp = setTimeout(() => done("stillOpen"), deadline + 1000);
      socket.on("error", () => {});
      socket.on("close", () =>
        done(Date.now() - started <= deadline ? "closedInTime" : "closedLate"));
      socket.on("connect", () => {
        if (!trickle) {
          return;
        }
        socket.write("GET /workers HTTP/1.1\r\nHost: 127.0.0.1\r\n");
        let line = 0;
        timer = setInterval(() =>
          socket.write(`X-Trickle-${line++}: 1\r\n`), 1000);
      });
    });
  await Promise.all([
    ...Array.from({ length: each }, () => one(true)),
    ...Array.from({ length: each }, () => one(false)),
  ]);
  return counts;
};

/** No attack at all: calibrates how much throughput and memory drift on their own. */
export const baseline: Attack = async (context) => {
  while (alive(context)) await sleep(100);
  return {};
};

/** Every attack by name, in the order the soak runs them. */
export const ATTACKS: Readonly<Record<string, Attack>> = {
  "idle-sockets": idleSockets,
  "body-bomb": bodyBomb,
  "deep-json": deepJson,
  "frame-flood": frameFlood,
  "name-churn": nameChurn,
  "hoard": hoard,
  "oversized-frames": oversizedFrames,
  "no-read": noRead,
  "bad-credentials": badCredentials,
  "resend-spam": resendSpam,
  "upgrade-storm": upgradeStorm,
  "trickle-bodies": trickleBodies,
  "trickle-heads": trickleHeads,
};

/** Attacks that exist but are not run unless named (`--only`). */
export const EXTRA_ATTACKS: Readonly<Record<string, Attack>> = { baseline };
