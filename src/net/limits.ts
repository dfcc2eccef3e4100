/**
 * The limits the network edge enforces per connection and per credential, with their defaults
 * and their validation: one place, matching the table in the README's "Limits" section and
 * `docs/SECURITY.md`.
 *
 * The defaults are chosen so that an honest worker never meets them. The frame rate, for
 * example: a worker endpoint sends at most one frame per job it completes (its confirmations are
 * cumulative, a held `ack` is dropped when a `request` follows, and it tops up demand at half its
 * window), so about `2 / window` frames a job once its buffer holds work: 4 endpoints with a
 * window of 10,000 running 1 ms jobs measured 5 frames a second in all, and one endpoint with a
 * window of 1 (one frame per job, the worst case) as many frames as jobs. The defaults allow
 * 5,000 a second per connection — 250,000 jobs a second at a window of 100, 25,000 at a window
 * of 10 — and 20,000 per worker credential.
 *
 * @module
 */

import { durationOption, integerOption } from "../core/options.ts";

/** The edge limits, validated, with defaults applied. */
export interface EdgeLimits {
  readonly maxConnections: number;
  readonly maxConnectionsPerIp: number;
  readonly maxEndpointsPerWorker: number;
  readonly frameRate: number;
  readonly frameBurst: number;
  readonly frameRatePerWorker: number;
  readonly floodCooldown: number;
  readonly registrationTimeout: number;
  readonly recheckInterval: number;
  readonly maxPayloadDepth: number;
  readonly bodyTimeout: number;
}

/** The edge-limit options (a subset of the app's options). */
export interface EdgeLimitOptions {
  readonly maxConnections?: number;
  readonly maxConnectionsPerIp?: number;
  readonly maxEndpointsPerWorker?: number;
  readonly frameRate?: number;
  readonly frameBurst?: number;
  readonly frameRatePerWorker?: number;
  readonly floodCooldown?: number;
  readonly registrationTimeout?: number;
  readonly recheckInterval?: number;
  readonly maxPayloadDepth?: number;
  readonly bodyTimeout?: number;
}

/** The default of each edge limit. */
export const EDGE_LIMIT_DEFAULTS: EdgeLimits = {
  maxConnections: 10_000,
  maxConnectionsPerIp: 1_000,
  maxEndpointsPerWorker: 64,
  frameRate: 5_000,
  frameBurst: 5_000,
  frameRatePerWorker: 20_000,
  floodCooldown: 5_000,
  registrationTimeout: 10_000,
  recheckInterval: 60_000,
  maxPayloadDepth: 64,
  bodyTimeout: 10_000,
};

const OWNER = "the workpull app";
const HOUR = 3_600_000;

/**
 * Validate the edge limits of `options` (errors name the option) and apply the defaults.
 *
 * @example
 * ```ts
 * import { resolveEdgeLimits } from "./limits.ts";
 * console.assert(resolveEdgeLimits({}).frameRate === 5_000);
 * ```
 */
export function resolveEdgeLimits(options: EdgeLimitOptions): EdgeLimits {
  const d = EDGE_LIMIT_DEFAULTS;
  return {
    maxConnections: integerOption(
      OWNER,
      "maxConnections",
      options.maxConnections,
      d.maxConnections,
      1,
      10_000_000,
    ),
    maxConnectionsPerIp: integerOption(
      OWNER,
      "maxConnectionsPerIp",
      options.maxConnectionsPerIp,
      d.maxConnectionsPerIp,
      1,
      10_000_000,
    ),
    maxEndpointsPerWorker: integerOption(
      OWNER,
      "maxEndpointsPerWorker",
      options.maxEndpointsPerWorker,
      d.maxEndpointsPerWorker,
      1,
      100_000,
    ),
    frameRate: integerOption(OWNER, "frameRate", options.frameRate, d.frameRate, 1, 1_000_000),
    frameBurst: integerOption(OWNER, "frameBurst", options.frameBurst, d.frameBurst, 1, 10_000_000),
    frameRatePerWorker: integerOption(
      OWNER,
      "frameRatePerWorker",
      options.frameRatePerWorker,
      d.frameRatePerWorker,
      1,
      10_000_000,
    ),
    floodCooldown: durationOption(
      OWNER,
      "floodCooldown",
      options.floodCooldown,
      d.floodCooldown,
      0,
      HOUR,
    ),
    registrationTimeout: durationOption(
      OWNER,
      "registrationTimeout",
      options.registrationTimeout,
      d.registrationTimeout,
      0,
      HOUR,
    ),
    recheckInterval: durationOption(
      OWNER,
      "recheckInterval",
      options.recheckInterval,
      d.recheckInterval,
      0,
      24 * HOUR,
    ),
    maxPayloadDepth: integerOption(
      OWNER,
      "maxPayloadDepth",
      options.maxPayloadDepth,
      d.maxPayloadDepth,
      1,
      10_000,
    ),
    bodyTimeout: durationOption(OWNER, "bodyTimeout", options.bodyTimeout, d.bodyTimeout, 1, HOUR),
  };
}
