/**
 * An `EventTarget` whose listeners cannot hurt the emitter: a listener that throws is caught and
 * reported to the emitter's logger (by default `console.error`), so it can neither corrupt the emitter's state nor (on Deno)
 * escape as an uncaught exception that ends the process.
 *
 * @module
 */

import { defaultLogger, type Logger } from "./logger.ts";

/** A listener function or object. */
export type Listener = EventListenerOrEventListenerObject;

/**
 * `EventTarget` with exception-safe listeners, typed by an event map `M` (event name to
 * event class) for the emitter's own events.
 *
 * @example
 * ```ts
 * import { SafeEventTarget } from "./safe_event_target.ts";
 * const target = new SafeEventTarget<{ ping: Event }>();
 * target.addEventListener("ping", () => { throw new Error("listener bug"); });
 * target.dispatchEvent(new Event("ping")); // logged, not thrown
 * ```
 */
// deno-lint-ignore ban-types -- {} is the empty event map: no typed events, any name allowed.
export class SafeEventTarget<M extends object = {}> extends EventTarget {
  readonly #wrapped = new Map<string, Map<Listener, EventListener>>();
  #logger: Logger = defaultLogger;

  /** Report listeners' exceptions to `logger` (the emitter's own) from now on. */
  protected reportTo(logger: Logger): void {
    this.#logger = logger;
  }

  /**
   * Whether a listener for `type` may be registered: an emitter skips building events nobody
   * hears. It can say yes for a `once` listener that ran or one removed by its signal, never no
   * for a registered one.
   */
  protected listens(type: string): boolean {
    return (this.#wrapped.get(type)?.size ?? 0) > 0;
  }

  /** Listen for one of this target's typed events; the listener is guarded. */
  override addEventListener<K extends keyof M & string>(
    type: K,
    listener: ((event: M[K]) => void) | null,
    options?: boolean | AddEventListenerOptions,
  ): void;
  /** Like `EventTarget.addEventListener`, with the listener guarded. */
  override addEventListener(
    type: string,
    listener: Listener | null,
    options?: boolean | AddEventListenerOptions,
  ): void;
  override addEventListener(
    type: string,
    listener: Listener | ((event: never) => void) | null,
    options?: boolean | AddEventListenerOptions,
  ): void {
    if (!listener) return;
    let byListener = this.#wrapped.get(type);
    if (!byListener) this.#wrapped.set(type, byListener = new Map());
    let guarded = byListener.get(listener as Listener);
    if (!guarded) {
      guarded = (event: Event) => {
        const report = (error: unknown) =>
          this.#logger.error(`a "${type}" event listener threw`, error);
        try {
          const result: unknown = typeof listener === "function"
            ? (listener as EventListener).call(this, event)
            : listener.handleEvent(event);
          // An async listener's rejection must not become an unhandled rejection.
          if (result instanceof Promise) result.catch(report);
        } catch (error) {
          report(error);
        }
      };
      byListener.set(listener as Listener, guarded);
    }
    super.addEventListener(type, guarded, options);
  }

  /** Stop listening for one of this target's typed events. */
  override removeEventListener<K extends keyof M & string>(
    type: K,
    listener: ((event: M[K]) => void) | null,
    options?: boolean | EventListenerOptions,
  ): void;
  /** Like `EventTarget.removeEventListener`. */
  override removeEventListener(
    type: string,
    listener: Listener | null,
    options?: boolean | EventListenerOptions,
  ): void;
  override removeEventListener(
    type: string,
    listener: Listener | ((event: never) => void) | null,
    options?: boolean | EventListenerOptions,
  ): void {
    if (!listener) return;
    const guarded = this.#wrapped.get(type)?.get(listener as Listener);
    if (!guarded) return;
    super.removeEventListener(type, guarded, options);
    this.#wrapped.get(type)?.delete(listener as Listener);
  }
}
