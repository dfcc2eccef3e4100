/**
 * `workpull serve --schedule JSON`: a repeating job declared on the command line, as
 * `JobQueue.schedule` takes it. One JSON object a flag:
 * `{"key":"nightly","cron":"0 3 * * *","timezone":"Europe/Berlin","payload":{...}}` or
 * `{"key":"tick","every":"1m","payload":{...}}` (`every`: ms, or a duration like `30s`, `1h`),
 * with the job options `priority`, `attempts`, `backoff`, `timeout` beside them, and `flow` to pick
 * the flow when the server serves several (default: the first). The queue checks the rest; this
 * module only takes the JSON apart, so that every mistake is a usage error naming the flag.
 *
 * @module
 */

import { type FlagSpec, parseDuration, UsageError } from "./args.ts";
import type { ScheduledJob } from "../schedule/scheduler.ts";
import type { ScheduleWhen } from "../schedule/recurrence.ts";

export const scheduleFlag: FlagSpec = {
  kind: "string",
  value: "JSON",
  repeatable: true,
  help: 'a repeating job: {"key":"nightly","cron":"0 3 * * *","timezone":"Europe/Berlin",' +
    '"payload":{...}} or {"key":"tick","every":"1m","payload":{...}}; also priority, attempts, ' +
    'backoff, timeout, and "flow" (default the first)',
};

/** One `--schedule`, taken apart. */
export interface ScheduleArg {
  readonly flow: string;
  readonly key: string;
  readonly when: ScheduleWhen;
  readonly job: ScheduledJob;
}

const WHEN_FIELDS = new Set(["every", "cron", "timezone"]);
const JOB_FIELDS = new Set(["payload", "priority", "attempts", "backoff", "timeout"]);

/** Take one `--schedule` value apart; `flows` are the flows served (the first is the default). */
export function parseSchedule(text: string, flows: readonly string[]): ScheduleArg {
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    throw new UsageError(`--schedule must be a JSON object, got ${JSON.stringify(text)}`);
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    throw new UsageError(`--schedule must be a JSON object, got ${JSON.stringify(text)}`);
  }
  const fields = value as Record<string, unknown>;
  const { key, flow = flows[0] } = fields;
  if (typeof key !== "string") throw new UsageError(`--schedule needs a "key" (a string)`);
  const where = `--schedule ${key}`;
  if (typeof flow !== "string" || !flows.includes(flow)) {
    throw new UsageError(`${where}: "flow" must be a flow served (${flows.join(", ")})`);
  }
  if (!("payload" in fields)) throw new UsageError(`${where}: "payload" is missing`);
  const when: Record<string, unknown> = {};
  const job: Record<string, unknown> = {};
  for (const [name, field] of Object.entries(fields)) {
    if (WHEN_FIELDS.has(name)) when[name] = field;
    else if (JOB_FIELDS.has(name)) job[name] = field;
    else if (name !== "key" && name !== "flow") {
      throw new UsageError(
        `${where}: "${name}" is not a field (key, flow, every, cron, timezone, payload, ` +
          "priority, attempts, backoff, timeout)",
      );
    }
  }
  if (typeof when.every === "string") {
    const ms = parseDuration(when.every);
    if (ms === undefined) {
      throw new UsageError(`${where}: "every" must be ms or a duration like 30s or 1h`);
    }
    when.every = ms;
  }
  return { flow, key, when: when as ScheduleWhen, job: job as unknown as ScheduledJob };
}
