/**
 * Serve workpull on Deno (`Deno.serve` and `Deno.upgradeWebSocket`).
 *
 * @example Serve a controller; a worker joins with a signed token
 * ```ts
 * import { BufferedProducer, WorkPullingController } from "./mod.ts";
 * import { serveDeno } from "./deno.ts";
 * import { signToken } from "./server.ts";
 *
 * const secret = "a-secret-of-at-least-32-bytes-length!";
 * const producer = new BufferedProducer();
 * const controller = new WorkPullingController({ name: "jobs", producer });
 * await controller.start();
 * const server = await serveDeno({ controller, producer, auth: { secret }, port: 0 });
 * const token = await signToken(secret, { producer: "jobs", worker: "w1", expiresIn: 60_000 });
 * console.log(`connectWorker({ url: "${server.workersUrl}", token: "${token}", ... })`);
 * await server.close();
 * await controller.close();
 * ```
 *
 * @module
 */

export { denoUpgrader, type DenoUpgraderOptions, serveDeno } from "./src/net/deno.ts";
export type { MountedAppOptions, ServeOptions, WorkpullServer } from "./src/net/serve.ts";
