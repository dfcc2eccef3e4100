/**
 * `--kv-latency COMMIT/READ` and `--kv-faults RATE` (with `--instances N`, N ≥ 2): each instance
 * process reaches the shared KV file through a `RemoteKv` (`testing.ts`), a hosted KV's round
 * trips and per-commit faults:
 * - `lost-answer`: the commit lands, then the call rejects (its outcome is unknown to the
 *   instance, which must read back what it holds before its next call);
 * - `locked`: the call rejects with `TypeError("database is locked")` and nothing lands
 *   (retried);
 * - `slow`: the round trip takes ten times as long.
 *
 * A commit meets a fault with probability RATE, a third of it for each kind. The draws are
 * seeded: each instance incarnation (slot and restart number) gets its own seed from `--seed`,
 * so the n-th commit of the k-th incarnation of slot i2 meets the same fault in every run of
 * that seed (which commit is the n-th still depends on timing). Every fault is journaled by the
 * instance that met it (`kv-fault`, at the `commit()` call), so the verdict can count them.
 *
 * @module
 */

import { RemoteKv, type RemoteKvBackend, type RemoteKvFault } from "../../testing.ts";
import { hash, prng } from "./random.ts";

/** The kinds of KV fault, in the order of their share of the rate. */
export const KV_FAULT_KINDS: readonly RemoteKvFault[] = ["lost-answer", "locked", "slow"];

/** What an instance process is told about its `RemoteKv`. */
export interface RemoteKvSettings {
  /** The round trip of a commit, ms. */
  readonly commitLatency: number;
  /** The round trip of a read (a `getMany`, a `get`, a list batch), ms. */
  readonly readLatency: number;
  /** The probability that a commit meets a fault (0..1), split evenly between the kinds. */
  readonly faultRate: number;
  /** The seed of this incarnation's fault draws (see {@linkcode incarnationSeed}). */
  readonly seed: number;
}

/** The seed of the fault draws of the `incarnation`-th process (1, 2, ...) of a slot. */
export function incarnationSeed(seed: number, slot: string, incarnation: number): number {
  return hash(seed ^ 0x6b7f, `${slot}#${incarnation}`);
}

/**
 * The fault hook of `settings`: for each commit, one seeded draw; below the rate it is a fault,
 * the kind by which third of the rate it falls in.
 */
export function faultDraw(
  faultRate: number,
  seed: number,
): () => RemoteKvFault | undefined {
  const random = prng(seed);
  return () => {
    const draw = random();
    if (!(draw < faultRate)) return undefined;
    return KV_FAULT_KINDS[Math.min(2, Math.floor(draw / (faultRate / 3)))];
  };
}

/** `local` behind the round trips and faults of `settings`; `onFault` hears of each fault. */
export function remoteKv(
  local: RemoteKvBackend,
  settings: RemoteKvSettings,
  onFault: (fault: RemoteKvFault, commit: number) => void,
): RemoteKv {
  const draw = faultDraw(settings.faultRate, settings.seed);
  return new RemoteKv(local, {
    commitLatency: settings.commitLatency,
    readLatency: settings.readLatency,
    faults: settings.faultRate > 0
      ? ({ commit }) => {
        const fault = draw();
        if (fault !== undefined) onFault(fault, commit);
        return fault;
      }
      : undefined,
  });
}
