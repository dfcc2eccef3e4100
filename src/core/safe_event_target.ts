/**
 * An `EventTarget` whose listeners cannot hurt the emitter: a listener that throws is caught and
 * reported through `console.error`, so it can neither corrupt the emitter's state nor (on Deno)
 * escape as an uncaught exception that ends the process.
 *
 * @module
 */

/** A listener function or object. */
export type Listener = EventListenerOrEventListenerObject;

/**
 * `EventTarget` with exception-safe listeners.
 *
 * @example
 * ```ts
 * import { SafeEventTarget } from "./safe_event_target.ts";
 * const target = new SafeEventTarget();
 * target.addEventListener("ping", () => { throw new Error("listener bug"); });
 * target.dispatchEvent(new Event("ping")); // logged, not thrown
 * ```
 */
export class SafeEventTarget extends EventTarget {
  readonly #wrapped = new Map<string, Map<Listener, EventListener>>();

  /** Like `EventTarget.addEventListener`, with the listener guarded. */
  override addEventListener(
    type: string,
    listener: Listener | null,
    options?: boolean | AddEventListenerOptions,
  ): void {
    if (!listener) return;
    let byListener = this.#wrapped.get(type);
    if (!byListener) this.#wrapped.set(type, byListener = new Map());
    let guarded = byListener.get(listener);
    if (!guarded) {
      guarded = (event: Event) => {
        const report = (error: unknown) =>
          console.error(`workpull: a "${type}" event listener threw`, error);
        try {
          const result: unknown = typeof listener === "function"
            ? listener.call(this, event)
            : listener.handleEvent(event);
          // An async listener's rejection must not become an unhandled rejection.
          if (result instanceof Promise) result.catch(report);
        } catch (error) {
          report(error);
        }
      };
      byListener.set(listener, guarded);
    }
    super.addEventListener(type, guarded, options);
  }

  /** Like `EventTarget.removeEventListener`. */
  override removeEventListener(
    type: string,
    listener: Listener | null,
    options?: boolean | EventListenerOptions,
  ): void {
    if (!listener) return;
    const guarded = this.#wrapped.get(type)?.get(listener);
    if (!guarded) return;
    super.removeEventListener(type, guarded, options);
    this.#wrapped.get(type)?.delete(listener);
  }
}
