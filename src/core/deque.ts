/**
 * A double-ended queue on a growable ring buffer: O(1) push and pop at both ends, which the
 * pending pool needs (new jobs at the tail, requeued jobs at the head).
 *
 * @module
 */

/**
 * A ring-buffer deque.
 *
 * @example
 * ```ts
 * import { Deque } from "./deque.ts";
 * const deque = new Deque<number>();
 * deque.pushBack(2);
 * deque.pushFront(1);
 * deque.pushBack(3);
 * console.assert(deque.pop() === 3);
 * console.assert(deque.shift() === 1 && deque.shift() === 2);
 * ```
 */
export class Deque<T> {
  #items: (T | undefined)[];
  #head = 0;
  #length = 0;

  /** Creates an empty deque with room for `capacity` items before it grows. */
  constructor(capacity = 16) {
    this.#items = new Array(Math.max(4, capacity));
  }

  /** The number of items. */
  get length(): number {
    return this.#length;
  }

  /** Append at the tail. */
  pushBack(item: T): void {
    if (this.#length === this.#items.length) this.#grow();
    this.#items[(this.#head + this.#length) % this.#items.length] = item;
    this.#length += 1;
  }

  /** Insert at the head. */
  pushFront(item: T): void {
    if (this.#length === this.#items.length) this.#grow();
    this.#head = (this.#head - 1 + this.#items.length) % this.#items.length;
    this.#items[this.#head] = item;
    this.#length += 1;
  }

  /** Remove and return the head, or `undefined` when empty. */
  shift(): T | undefined {
    if (this.#length === 0) return undefined;
    const item = this.#items[this.#head];
    this.#items[this.#head] = undefined;
    this.#head = (this.#head + 1) % this.#items.length;
    this.#length -= 1;
    return item;
  }

  /** Remove and return the tail, or `undefined` when empty. */
  pop(): T | undefined {
    if (this.#length === 0) return undefined;
    const index = (this.#head + this.#length - 1) % this.#items.length;
    const item = this.#items[index];
    this.#items[index] = undefined;
    this.#length -= 1;
    return item;
  }

  /** The head without removing it. */
  peek(): T | undefined {
    return this.#length === 0 ? undefined : this.#items[this.#head];
  }

  /** The item at position `index` from the head. */
  at(index: number): T | undefined {
    if (index < 0 || index >= this.#length) return undefined;
    return this.#items[(this.#head + index) % this.#items.length];
  }

  /** Remove every item. */
  clear(): void {
    this.#items = new Array(16);
    this.#head = 0;
    this.#length = 0;
  }

  /** Iterate from head to tail. */
  *[Symbol.iterator](): IterableIterator<T> {
    for (let i = 0; i < this.#length; i++) yield this.at(i) as T;
  }

  #grow(): void {
    const next = new Array<T | undefined>(this.#items.length * 2);
    for (let i = 0; i < this.#length; i++) next[i] = this.at(i);
    this.#items = next;
    this.#head = 0;
  }
}
