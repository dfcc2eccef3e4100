/**
 * A WebSocket client over a raw TCP socket, for attacks the standard `WebSocket` cannot make: it
 * reads the status of a refused upgrade, and it can stop reading while it keeps writing (a peer
 * that never drains what the server sends).
 *
 * @module
 */

import net from "node:net";

/** An open raw WebSocket (after a 101), or the status of a refused upgrade. */
export type RawUpgrade =
  | { readonly status: 101; readonly socket: RawSocket }
  | { readonly status: number; readonly socket?: undefined };

/** A client-side WebSocket written by hand over `node:net`. */
export class RawSocket {
  readonly tcp: net.Socket;
  /** Text frames received, while reading. */
  readonly messages: string[] = [];
  #buffer: Uint8Array = new Uint8Array(0);
  #closed = false;

  private constructor(tcp: net.Socket, rest: Uint8Array) {
    this.tcp = tcp;
    this.#buffer = rest;
    tcp.on("data", (chunk: Uint8Array) => this.#read(chunk));
    tcp.on("close", () => (this.#closed = true));
    this.#read(new Uint8Array(0));
  }

  /** Whether the TCP connection has closed. */
  get closed(): boolean {
    return this.#closed;
  }

  /** Upgrade `path` on 127.0.0.1:`port` with `headers`; resolves within `timeout` ms. */
  static connect(
    port: number,
    path: string,
    headers: Record<string, string>,
    timeout = 10_000,
  ): Promise<RawUpgrade> {
    return new Promise((resolve) => {
      const tcp = net.connect(port, "127.0.0.1");
      tcp.on("error", () => {});
      let head: Uint8Array = new Uint8Array(0);
      const timer = setTimeout(() => finish({ status: 0 }), timeout);
      const finish = (upgrade: RawUpgrade) => {
        clearTimeout(timer);
        tcp.off("data", onData);
        if (upgrade.status !== 101) tcp.destroy();
        resolve(upgrade);
      };
      const onData = (chunk: Uint8Array) => {
        head = concat(head, chunk);
        const end = indexOfHeadEnd(head);
        if (end < 0) return;
        const status = Number(new TextDecoder().decode(head.subarray(0, 12)).split(" ")[1]);
        if (status !== 101) return finish({ status });
        finish({ status: 101, socket: new RawSocket(tcp, head.slice(end + 4)) });
      };
      tcp.on("data", onData);
      tcp.on("close", () => finish({ status: 0 }));
      tcp.on("connect", () => {
        const lines = [
          `GET ${path} HTTP/1.1`,
          `Host: 127.0.0.1:${port}`,
          "Upgrade: websocket",
          "Connection: Upgrade",
          "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==",
          "Sec-WebSocket-Version: 13",
          ...Object.entries(headers).map(([name, value]) => `${name}: ${value}`),
        ];
        tcp.write(lines.join("\r\n") + "\r\n\r\n");
      });
    });
  }

  /** Send one masked text frame. */
  send(text: string): void {
    if (this.#closed) return;
    const payload = new TextEncoder().encode(text);
    const length = payload.length;
    const header = length < 126
      ? Uint8Array.of(0x81, 0x80 | length)
      : length < 65536
      ? Uint8Array.of(0x81, 0x80 | 126, length >> 8, length & 255)
      : Uint8Array.of(
        0x81,
        0x80 | 127,
        0,
        0,
        0,
        0,
        (length >>> 24) & 255,
        (length >>> 16) & 255,
        (length >>> 8) & 255,
        length & 255,
      );
    const mask = Uint8Array.of(0x12, 0x34, 0x56, 0x78);
    for (let i = 0; i < length; i++) payload[i] ^= mask[i & 3];
    this.tcp.write(concat(concat(header, mask), payload));
  }

  /** Stop reading: the server's outbound data piles up in the kernel and then in the server. */
  stopReading(): void {
    this.tcp.pause();
  }

  /** Drop the TCP connection. */
  destroy(): void {
    this.tcp.destroy();
  }

  #read(chunk: Uint8Array): void {
    this.#buffer = concat(this.#buffer, chunk);
    for (;;) {
      const buffer = this.#buffer;
      if (buffer.length < 2) return;
      let length = buffer[1] & 0x7f;
      let offset = 2;
      if (length === 126) {
        if (buffer.length < 4) return;
        length = (buffer[2] << 8) | buffer[3];
        offset = 4;
      } else if (length === 127) {
        if (buffer.length < 10) return;
        length = Number(new DataView(buffer.buffer, buffer.byteOffset + 2, 8).getBigUint64(0));
        offset = 10;
      }
      if (buffer.length < offset + length) return;
      if ((buffer[0] & 0x0f) === 1) {
        this.messages.push(new TextDecoder().decode(buffer.subarray(offset, offset + length)));
        if (this.messages.length > 1000) this.messages.splice(0, 500);
      }
      this.#buffer = buffer.slice(offset + length);
    }
  }
}

function indexOfHeadEnd(bytes: Uint8Array): number {
  for (let i = 0; i + 3 < bytes.length; i++) {
    if (bytes[i] === 13 && bytes[i + 1] === 10 && bytes[i + 2] === 13 && bytes[i + 3] === 10) {
      return i;
    }
  }
  return -1;
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  if (b.length === 0) return a;
  const out = new Uint8Array(a.length + b.length);
  out.set(a, 0);
  out.set(b, a.length);
  return out;
}
