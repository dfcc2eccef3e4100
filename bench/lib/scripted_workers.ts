/**
 * Scripted workers for the in-process bench tools: each speaks the worker's raw frames to a
 * controller (register, `request` with a window, a top-up at half the window as
 * `WorkerEndpoint` does, else an `ack`) and spends almost nothing per job (it counts the jobs of
 * each jobs frame in its text). What a tool measures beside them is the controller's cost alone,
 * without sockets and without real workers.
 *
 * They answer each jobs frame in a microtask, or with `answerIn: "macrotask"` in a later task
 * (`setImmediate`), so that the controller's turns end between frames as they do with sockets.
 *
 * @module
 */

import { setImmediate } from "node:timers";
import type { Link, WorkPullingController } from "../../mod.ts";

/** Options of {@linkcode attachScriptedWorkers}. */
export interface ScriptedWorkerOptions {
  /** How many workers (default 4). */
  readonly count?: number;
  /** Each worker's window (default 100). */
  readonly window?: number;
  /** Announce feature `outcomes` (job-queue mode). */
  readonly outcomes?: boolean;
  /** Answer a jobs frame in a microtask (default) or in a later macrotask. */
  readonly answerIn?: "microtask" | "macrotask";
}

/** The scripted workers of a controller, counted together. */
export interface ScriptedWorkers {
  /** Jobs they have confirmed so far. */
  readonly confirmed: number;
  /** Resolves once they have confirmed `total` jobs in all. */
  confirmedAll(total: number): Promise<void>;
}

/**
 * Register scripted workers with `controller`; each then confirms every job it is sent.
 *
 * @example Four workers, and a wait for 1,000 confirmations
 * ```ts ignore
 * const workers = attachScriptedWorkers(controller);
 * await workers.confirmedAll(workers.confirmed + 1000);
 * ```
 */
export function attachScriptedWorkers(
  controller: WorkPullingController,
  options: ScriptedWorkerOptions = {},
): ScriptedWorkers {
  let confirmedTotal = 0;
  let wanted = Infinity;
  let reached: () => void = () => {};
  const window = options.window ?? 100;
  // `setImmediate`, not `setTimeout(…, 0)`: nested timers are clamped to 4 ms.
  const later = options.answerIn === "macrotask"
    ? (answer: () => void) => void setImmediate(answer)
    : queueMicrotask;
  for (let w = 0; w < (options.count ?? 4); w++) {
    let session = "";
    let confirmed = 0;
    let received = 0;
    let requested = 0;
    const nonce = `n${w}`;
    const request = () =>
      receiver.receive(
        `{"type":"request","session":"${session}","nonce":"${nonce}","confirmed":${confirmed},"upTo":${requested},"resend":false}`,
      );
    const link: Link = {
      send(frame) {
        if (frame.startsWith('{"type":"registered"')) {
          session = JSON.parse(frame).session;
          requested = window;
          queueMicrotask(request);
          return;
        }
        // A jobs frame: count its jobs without parsing it.
        let count = 0;
        for (let i = frame.indexOf('{"id":'); i >= 0; i = frame.indexOf('{"id":', i + 6)) count++;
        received += count;
        later(() => {
          // "Process" every job, then confirm as WorkerEndpoint does: top-up at half the window.
          confirmed = received;
          if (requested - confirmed <= window / 2) {
            requested = confirmed + window;
            request();
          } else {
            receiver.receive(
              `{"type":"ack","session":"${session}","nonce":"${nonce}","confirmed":${confirmed}}`,
            );
          }
          confirmedTotal += count;
          if (confirmedTotal >= wanted) reached();
        });
      },
      close() {},
    };
    const receiver = controller.attach(link);
    const features = options.outcomes ? ',"features":["outcomes"]' : "";
    receiver.receive(
      `{"type":"register","producer":"bench","worker":"w${w}","incarnation":"i${w}","nonce":"${nonce}","resendInterval":2000${features}}`,
    );
  }
  return {
    get confirmed() {
      return confirmedTotal;
    },
    confirmedAll(total) {
      if (confirmedTotal >= total) return Promise.resolve();
      wanted = total;
      return new Promise<void>((resolve) => (reached = resolve));
    },
  };
}
