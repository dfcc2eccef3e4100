/**
 * Strict round-robin over a changing list, in insertion order. Removing a member keeps the
 * rotation fair: the cursor shifts with the members after it, so nobody is skipped or served
 * twice in a row because someone else left.
 *
 * @module
 */

/**
 * A fair rotation.
 *
 * @example
 * ```ts
 * import { RoundRobin } from "./round_robin.ts";
 * const rotation = new RoundRobin<string>();
 * ["a", "b", "c"].forEach((m) => rotation.add(m));
 * console.assert(rotation.next(() => true) === "a");
 * rotation.remove("a");
 * console.assert(rotation.next(() => true) === "b");
 * ```
 */
export class RoundRobin<T> {
  readonly #members: T[] = [];
  #cursor = 0;

  /** The members in rotation order. */
  get members(): readonly T[] {
    return this.#members;
  }

  /** Add at the end of the rotation. */
  add(member: T): void {
    this.#members.push(member);
  }

  /** Remove a member, keeping the position of everyone else in the rotation. */
  remove(member: T): void {
    const index = this.#members.indexOf(member);
    if (index < 0) return;
    this.#members.splice(index, 1);
    if (index < this.#cursor) this.#cursor -= 1;
    if (this.#cursor >= this.#members.length) this.#cursor = 0;
  }

  /** The next member, starting at the cursor, that passes `eligible`; each is examined once. */
  next(eligible: (member: T) => boolean): T | undefined {
    const count = this.#members.length;
    for (let examined = 0; examined < count; examined++) {
      if (this.#cursor >= count) this.#cursor = 0;
      const member = this.#members[this.#cursor];
      this.#cursor += 1;
      if (eligible(member)) return member;
    }
    return undefined;
  }
}
