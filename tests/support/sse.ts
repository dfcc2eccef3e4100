/**
 * Reads a server-sent event stream (a `fetch` response body) event by event, for tests.
 * Comment lines (heartbeats) are counted, not returned.
 */

import { within } from "./waiting.ts";

/** One event. */
export interface ServerEvent {
  readonly event: string;
  readonly data: string;
}

/** Events of one response, in order. */
export class EventReader {
  readonly #reader: ReadableStreamDefaultReader<string>;
  #buffer = "";
  #done = false;
  /** Comment lines seen (heartbeats). */
  comments = 0;

  constructor(response: Response) {
    this.#reader = response.body!.pipeThrough(new TextDecoderStream()).getReader();
  }

  /** The next event, or undefined when the stream ended. */
  async next(): Promise<ServerEvent | undefined> {
    for (;;) {
      const end = this.#buffer.indexOf("\n\n");
      if (end >= 0) {
        const block = this.#buffer.slice(0, end);
        this.#buffer = this.#buffer.slice(end + 2);
        let event = "message";
        const data: string[] = [];
        for (const line of block.split("\n")) {
          if (line.startsWith(":")) this.comments += 1;
          else if (line.startsWith("event:")) event = line.slice(6).trim();
          else if (line.startsWith("data:")) data.push(line.slice(5).replace(/^ /, ""));
        }
        if (data.length > 0) return { event, data: data.join("\n") };
        continue;
      }
      if (this.#done) return undefined;
      const { value, done } = await this.#reader.read();
      if (done) this.#done = true;
      else this.#buffer += value;
    }
  }

  /** The first event `accept` takes (events before it are dropped), within `timeout` ms. */
  async until<T>(
    accept: (event: ServerEvent) => T | undefined,
    what: string,
    timeout = 10_000,
  ): Promise<T> {
    return await within(
      (async () => {
        for (;;) {
          const event = await this.next();
          if (!event) throw new Error(`the stream ended before ${what}`);
          const taken = accept(event);
          if (taken !== undefined) return taken;
        }
      })(),
      what,
      timeout,
    );
  }

  /** Read to the end; resolves with the events left. */
  async rest(timeout = 10_000): Promise<ServerEvent[]> {
    return await within(
      (async () => {
        const events: ServerEvent[] = [];
        for (let event = await this.next(); event; event = await this.next()) events.push(event);
        return events;
      })(),
      "the stream to end",
      timeout,
    );
  }

  /** Stop reading (the connection closes). */
  async cancel(): Promise<void> {
    await this.#reader.cancel().catch(() => {});
  }
}
