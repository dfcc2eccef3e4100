/**
 * Bounded waits and a seeded PRNG shared by the integration tests. A wait that runs out fails the
 * test with what it was waiting for; nothing here waits a fixed time.
 */

/** Poll `condition` (every 5 ms) until it holds; fail after `timeout` ms naming `what`. */
export async function waitFor(
  condition: () => boolean | Promise<boolean>,
  what: string | (() => string),
  timeout = 10_000,
): Promise<void> {
  const deadline = performance.now() + timeout;
  while (!(await condition())) {
    if (performance.now() > deadline) {
      const described = typeof what === "function" ? what() : what;
      throw new Error(`timed out after ${timeout} ms waiting for ${described}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 5));
  }
}

/** Resolve `promise`, or fail after `timeout` ms naming `what`. */
export async function within<T>(promise: Promise<T>, what: string, timeout = 10_000): Promise<T> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  try {
    return await Promise.race([
      promise,
      new Promise<never>((_, reject) => {
        timer = setTimeout(
          () => reject(new Error(`timed out after ${timeout} ms waiting for ${what}`)),
          timeout,
        );
      }),
    ]);
  } finally {
    clearTimeout(timer);
  }
}

/** Deterministic PRNG (mulberry32): a function returning numbers in [0, 1). */
export function prng(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}
