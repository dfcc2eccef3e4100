/**
 * A priority queue for items that mostly arrive in order: the backlog's due jobs. Jobs added
 * without a priority or a delay come due in the order they were added, so a binary heap spent
 * O(log n) comparisons on each of them — with 100,000 waiting, a tenth of a job queue's CPU.
 *
 * Here an item that sorts at or after the last one of the run so far joins the run (a FIFO, O(1));
 * any other item goes to a binary heap. The first item is the smaller of the run's head and the
 * heap's top. Items that arrive in reverse order cost one comparison more than the heap alone.
 *
 * @module
 */

import { Deque } from "./deque.ts";
import { Heap } from "./heap.ts";

/**
 * A min-priority queue with a fast path for items pushed in order.
 *
 * @example
 * ```ts
 * import { RunHeap } from "./run_heap.ts";
 * const queue = new RunHeap<number>((a, b) => a - b);
 * for (const n of [1, 2, 5, 3, 4]) queue.push(n); // 1, 2, 5 join the run; 3 and 4 the heap
 * const out: number[] = [];
 * while (queue.size > 0) out.push(queue.pop()!);
 * console.assert(out.join() === "1,2,3,4,5");
 * ```
 */
export class RunHeap<T> {
  readonly #run = new Deque<T>();
  readonly #heap: Heap<T>;

  /** Creates an empty queue; `compare(a, b) < 0` puts `a` first. */
  constructor(readonly compare: (a: T, b: T) => number) {
    this.#heap = new Heap(compare);
  }

  /** The number of items. */
  get size(): number {
    return this.#run.length + this.#heap.size;
  }

  /** The first item without removing it. */
  peek(): T | undefined {
    return this.#fromRun() ? this.#run.peek() : this.#heap.peek();
  }

  /** Add an item. */
  push(item: T): void {
    const run = this.#run;
    if (run.length === 0 || this.compare(run.at(run.length - 1)!, item) <= 0) run.pushBack(item);
    else this.#heap.push(item);
  }

  /** Remove and return the first item. */
  pop(): T | undefined {
    return this.#fromRun() ? this.#run.shift() : this.#heap.pop();
  }

  /** Call `visit` with every item, in no particular order. */
  forEach(visit: (item: T) => void): void {
    const run = this.#run;
    for (let i = 0; i < run.length; i++) visit(run.at(i)!);
    this.#heap.forEach(visit);
  }

  /** Remove every item. */
  clear(): void {
    this.#run.clear();
    this.#heap.clear();
  }

  /** Whether the first item is the run's head. */
  #fromRun(): boolean {
    if (this.#run.length === 0) return false;
    return this.#heap.size === 0 || this.compare(this.#run.peek()!, this.#heap.peek()!) <= 0;
  }
}
