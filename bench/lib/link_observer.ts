/**
 * Watch the frames of every link a controller is given, for the tools that time the controller's
 * side (`tools/round_trips.ts`, `tools/timeline.ts`): install before any worker connects.
 *
 * @module
 */

import type { Link, LinkIdentity, LinkReceiver, WorkPullingController } from "../../mod.ts";

/** What one link's observer is told, in the controller's turn. */
export interface LinkObserver {
  /** A frame arrived and is about to be handed to the controller. */
  received(frame: unknown): void;
  /** The controller returned from handling it. */
  handled(): void;
  /** The controller is about to send `frame` on the link. */
  sent(frame: string): void;
}

/** Give each link the controller is attached to (numbered from 0) the observer `observe` makes. */
export function observeLinks(
  controller: WorkPullingController,
  observe: (socket: number) => LinkObserver,
): void {
  const attach = controller.attach.bind(controller);
  let sockets = 0;
  controller.attach = (link: Link, identity?: LinkIdentity): LinkReceiver => {
    const observer = observe(sockets++);
    const observed: Link = {
      runtime: link.runtime,
      send(frame) {
        observer.sent(frame);
        link.send(frame);
      },
      close: (code, reason) => link.close(code, reason),
    };
    const receiver = attach(observed, identity);
    return {
      receive(frame) {
        observer.received(frame);
        receiver.receive(frame);
        observer.handled();
      },
      closed: (code, reason) => receiver.closed(code, reason),
      refuse: receiver.refuse?.bind(receiver),
    };
  };
}
