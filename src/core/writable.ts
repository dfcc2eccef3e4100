/**
 * `Writable<T>`: `T` without its `readonly` modifiers, for building an object of a readonly type
 * field by field.
 *
 * Why: the hot paths make one object a job (records, ready jobs, store results) whose optional
 * fields are present only when set. Assigning them after the literal costs a store each;
 * spreading a temporary object (`...(x ? { x } : {})`) cost 3-10x that in V8, and object rest
 * (`const { a, ...rest } = o`) 5-20x a plain spread.
 *
 * @module
 */

/**
 * `T` with every property writable.
 *
 * @example
 * ```ts
 * import type { Writable } from "./writable.ts";
 * interface Point { readonly x: number; readonly label?: string }
 * const point: Writable<Point> = { x: 1 };
 * point.label = "a";
 * const done: Point = point;
 * console.assert(done.label === "a");
 * ```
 */
export type Writable<T> = { -readonly [K in keyof T]: T[K] };
