/**
 * `workpull stats`: what a flow's server says about it (`GET /stats`): its workers with their
 * windows, jobs in flight and confirmed, the backlog's counts (and whether the flow is paused), its
 * schedules with their next runs, and the controller's totals. As a short summary, or the server's
 * JSON with `--json`.
 *
 * @module
 */

import type { CommandSpec, ParsedArgs } from "./args.ts";
import { clientFlags, clientTarget, jsonFlag } from "./flags.ts";
import { call } from "./http.ts";
import { describeWhen, type ScheduleWhen } from "../schedule/recurrence.ts";

export const statsSpec: CommandSpec = {
  name: "stats",
  summary: "Show a flow's workers, backlog and totals.",
  flags: { ...clientFlags, json: jsonFlag },
};

interface Stats {
  name?: string;
  state?: string;
  pending?: number;
  workers?: { worker: string; window: number; inFlight: number; confirmed: number }[];
  totals?: Record<string, number>;
  backlog?: Record<string, number>;
  paused?: boolean;
  schedules?: { key: string; when: ScheduleWhen; next?: number }[];
}

/** Run `stats`. */
export async function runStats(args: ParsedArgs): Promise<number> {
  const { flow, base, token } = await clientTarget(args);
  const { body } = await call(base, "stats", { token });
  console.log(args.has("json") ? JSON.stringify(body, null, 2) : summary(flow, body as Stats));
  return 0;
}

/** The stats as a few lines; anything unexpected falls back to the JSON. */
export function summary(flow: string, stats: Stats): string {
  if (typeof stats !== "object" || stats === null || !Array.isArray(stats.workers)) {
    return JSON.stringify(stats, null, 2);
  }
  const counts = (record: Record<string, number> | undefined) =>
    Object.entries(record ?? {}).map(([key, value]) => `${value} ${key}`).join(", ");
  const state = [stats.state, stats.paused ? "paused" : undefined].filter(Boolean).join(", ");
  const lines = [`flow ${stats.name ?? flow}${state ? ` (${state})` : ""}`];
  if (stats.backlog) lines.push(`  backlog: ${counts(stats.backlog)}`);
  if (stats.totals) lines.push(`  since the server started: ${counts(stats.totals)}`);
  if (Array.isArray(stats.schedules) && stats.schedules.length > 0) {
    lines.push(`  schedules: ${stats.schedules.length}`);
    for (const schedule of stats.schedules) {
      if (typeof schedule !== "object" || schedule === null) continue;
      const { key, when, next } = schedule;
      const at = typeof next === "number" ? `, next ${new Date(next).toISOString()}` : "";
      const rule = typeof when === "object" && when !== null ? describeWhen(when) : "?";
      lines.push(`    ${key}: ${rule}${at}`);
    }
  }
  lines.push(`  workers: ${stats.workers.length}`);
  if (stats.workers.length > 0) {
    const width = Math.max(6, ...stats.workers.map((w) => w.worker.length));
    lines.push(`    ${"WORKER".padEnd(width)}  WINDOW  IN FLIGHT  CONFIRMED`);
    for (const w of stats.workers) {
      lines.push(
        `    ${w.worker.padEnd(width)}  ${String(w.window).padStart(6)}  ${
          String(w.inFlight).padStart(9)
        }  ${String(w.confirmed).padStart(9)}`,
      );
    }
  }
  return lines.join("\n");
}
