/**
 * A binary min-heap ordered by a comparison function: O(log n) push and pop, which the backlog
 * needs to hand out the next due job by priority and time among many waiting ones.
 *
 * @module
 */

/**
 * A binary min-heap.
 *
 * @example
 * ```ts
 * import { Heap } from "./heap.ts";
 * const heap = new Heap<number>((a, b) => a - b);
 * for (const n of [5, 1, 3]) heap.push(n);
 * console.assert(heap.pop() === 1 && heap.peek() === 3 && heap.size === 2);
 * ```
 */
export class Heap<T> {
  readonly #items: T[] = [];

  /** Creates an empty heap; `compare(a, b) < 0` puts `a` first. */
  constructor(readonly compare: (a: T, b: T) => number) {}

  /** The number of items. */
  get size(): number {
    return this.#items.length;
  }

  /** The first item without removing it. */
  peek(): T | undefined {
    return this.#items[0];
  }

  /** Add an item. */
  push(item: T): void {
    const items = this.#items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (this.compare(items[i], items[parent]) >= 0) break;
      [items[i], items[parent]] = [items[parent], items[i]];
      i = parent;
    }
  }

  /** Remove and return the first item. */
  pop(): T | undefined {
    const items = this.#items;
    if (items.length === 0) return undefined;
    const top = items[0];
    const last = items.pop()!;
    if (items.length > 0) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const left = 2 * i + 1, right = left + 1;
        let smallest = i;
        if (left < items.length && this.compare(items[left], items[smallest]) < 0) smallest = left;
        if (right < items.length && this.compare(items[right], items[smallest]) < 0) {
          smallest = right;
        }
        if (smallest === i) break;
        [items[i], items[smallest]] = [items[smallest], items[i]];
        i = smallest;
      }
    }
    return top;
  }

  /** Call `visit` with every item, in no particular order. */
  forEach(visit: (item: T) => void): void {
    const items = this.#items;
    for (let i = 0; i < items.length; i++) visit(items[i]);
  }

  /** Remove every item. */
  clear(): void {
    this.#items.length = 0;
  }
}
