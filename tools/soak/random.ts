/**
 * Seeded randomness: the fault schedule and every handler's duration follow from `--seed`.
 *
 * `prng` is mulberry32 (small, fast, good enough for scheduling). A handler's duration depends
 * only on the seed and the job's MessageID, not on which worker runs it or when, so a rerun of
 * the same job takes as long as the first run.
 *
 * @module
 */

/** A deterministic PRNG: a function returning numbers in [0, 1). */
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

/** A 32-bit FNV-1a hash of `text`, mixed with `seed`. */
export function hash(seed: number, text: string): number {
  let h = (0x811c9dc5 ^ seed) >>> 0;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/** One job in this many is a long one (see {@linkcode handlerDelay}). */
export const LONG_JOB_EVERY = 1000;
/** A long job takes this long at least, ms, and at most {@linkcode LONG_JOB_MAX_MS}. */
export const LONG_JOB_MIN_MS = 5000;
/**
 * The longest job, ms: past the controller's silence bound (8 s with the soak's settings), so a
 * drain that went quiet would lose its job, and under the soak workers' 30 s drain time, so a
 * graceful stop lets it finish.
 */
export const LONG_JOB_MAX_MS = 20_000;

/**
 * How long the handler of `messageId` takes, fixed by the seed and the MessageID: 1..20 ms, and
 * for one job in {@linkcode LONG_JOB_EVERY} 5..20 s (a graceful stop, `worker-term`, then usually
 * finds a worker in the middle of one).
 */
export function handlerDelay(seed: number, messageId: string): number {
  const random = prng(hash(seed, messageId));
  const short = 1 + (random() * 20 | 0);
  if (random() * LONG_JOB_EVERY >= 1) return short;
  return LONG_JOB_MIN_MS + (random() * (LONG_JOB_MAX_MS - LONG_JOB_MIN_MS + 1) | 0);
}

/** An integer in [min, max] drawn from `random`. */
export function between(random: () => number, min: number, max: number): number {
  return min + Math.floor(random() * (max - min + 1));
}
