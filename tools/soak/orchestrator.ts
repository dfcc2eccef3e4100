/**
 * The soak from start to verdict.
 *
 * 1. **Set up**: an output directory, a secret and tokens, a fixed port for the controller (or
 *    for each instance, with `--instances N`), one TCP proxy per worker (see `proxy.ts`); with
 *    instances, worker k goes to instance k mod N.
 *    With `--kv-latency`/`--kv-faults` the instances reach the KV file through a `RemoteKv`
 *    (`remote_kv.ts`).
 * 2. **Start**: the controller or instances (waiting until they are ready), the workers —
 *    alternately Deno and Bun, the first with one endpoint and the others with enough endpoints
 *    between them to run three times the rate — and the producer (which submits to every
 *    instance in turn).
 * 3. **Load and faults** for `--minutes`: the producer submits at `--rate` while `faults.ts`
 *    injects a seeded fault every 1–5 s.
 * 4. **Stop**: no more faults, every stopped worker resumed, the producer told to stop (it
 *    finishes its requests in flight).
 * 5. **Drain** (bounded): until every acknowledged job finished (see `drain.ts`: it fails once
 *    `--drain` seconds pass without any job finishing) and, with instances, every killed instance
 *    was taken over (see `takeovers.ts`).
 * 6. **Shut down**: every process killed and reaped, the proxies closed.
 * 7. **Verify** from the journals (see `verify.ts`), with what the controller's KV file still
 *    holds unconfirmed (see `queued.ts`), and write `summary.json`.
 *
 * An abort (Ctrl-C, SIGTERM) skips to the shutdown from wherever the soak is. The temporary
 * output directory is removed at the end unless `--keep`; a directory given with `--out` is kept.
 *
 * The controller's `reconnectGrace` defaults to 1 s: a worker cut off by a TCP cut reconnects
 * within a few hundred milliseconds (the client's first backoff is 125–250 ms) and resumes its
 * binding, so the soak exercises the resume path rather than turning every cut into a requeue;
 * a killed worker's jobs do not wait for the grace, because its restart registers a new
 * incarnation, which replaces the old binding at once.
 *
 * @module
 */

import { existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { signToken } from "../../server.ts";
import { Cluster, type ControllerSlot, type WorkerSlot } from "./cluster.ts";
import { drain, DRAIN_CAP_FACTOR, type DrainResult } from "./drain.ts";
import { readAcknowledgements } from "./evidence.ts";
import { FaultPlan, injectFaults } from "./faults.ts";
import { awaitTakeovers } from "./takeovers.ts";
import { Journal, JournalTail, readJournal, wallClock } from "./journal.ts";
import type { SoakOptions } from "./options.ts";
import { freePort, WorkerProxy } from "./proxy.ts";
import { readQueued } from "./queued.ts";
import { SoakPaths } from "./records.ts";
import type { Summary } from "./summary.ts";
import { verify } from "./verify.ts";

const FLOW = "soak";
/** A handler takes 10.5 ms on average; provision endpoints for this many times the rate. */
const HEADROOM = 3;
/** 10.5 ms for the short jobs, plus the long ones' share (12.5 s for one job in 1,000). */
const MEAN_HANDLER_MS = 23;
const root = new URL("../../", import.meta.url).pathname;

/** The outcome of a soak. */
export interface SoakOutcome {
  readonly summary: Summary;
  /** The output directory, or undefined when it was removed. */
  readonly out: string | undefined;
}

/** Run a whole soak. */
export async function runSoak(
  options: SoakOptions,
  signal: AbortSignal,
  log: (line: string) => void,
): Promise<SoakOutcome> {
  const bun = findBun();
  const temporary = options.out === undefined;
  const out = options.out ?? mkdtempSync(join(tmpdir(), "workpull-soak-"));
  const paths = new SoakPaths(out);
  if (existsSync(paths.soak)) {
    throw new Error(`Cannot start the soak: ${out} already holds a soak; give an empty --out`);
  }
  for (const dir of [out, paths.controllers, paths.producers, paths.workers, paths.logs]) {
    mkdirSync(dir, { recursive: true });
  }
  mkdirSync(join(out, "kv"), { recursive: true });
  const journal = new Journal(paths.soak);
  const proxies: WorkerProxy[] = [];
  let cluster: Cluster | undefined;
  let completed = false;
  try {
    const secret = crypto.randomUUID() + crypto.randomUUID();
    /** The longest the drain may last, s (it usually ends far sooner; see `drain.ts`). */
    const drainCap = DRAIN_CAP_FACTOR * options.drain;
    const expiresIn = (options.minutes * 60 + drainCap + 3600) * 1000;
    const shared = options.instances > 1;
    const controllers: ControllerSlot[] = [];
    for (let i = 0; i < options.instances; i++) {
      controllers.push({
        name: shared ? `i${i + 1}` : "controller",
        port: await freePort(),
        child: undefined,
        readyPid: undefined,
        resume: undefined,
      });
    }
    const perWorker = Math.max(
      2,
      Math.ceil(
        (Math.ceil(options.rate * MEAN_HANDLER_MS / 1000 * HEADROOM) - 1) / (options.workers - 1),
      ),
    );
    const slots: WorkerSlot[] = [];
    for (let i = 0; i < options.workers; i++) {
      const name = `w${i + 1}`;
      const proxy = await WorkerProxy.start(controllers[i % controllers.length].port);
      proxies.push(proxy);
      slots.push({
        name,
        runtime: i % 2 === 0 ? "deno" : "bun",
        concurrency: i === 0 ? 1 : perWorker,
        token: await signToken(secret, { producer: FLOW, worker: name, expiresIn }),
        proxy,
        child: undefined,
        resume: undefined,
      });
    }
    const remoteKv = shared && (options.kvLatency !== undefined || options.kvFaults > 0)
      ? {
        commitLatency: options.kvLatency?.commit ?? 0,
        readLatency: options.kvLatency?.read ?? 0,
        faultRate: options.kvFaults,
      }
      : undefined;
    const settings: Summary["settings"] = {
      minutes: options.minutes,
      rate: options.rate,
      seed: options.seed,
      workers: slots.map(({ name, runtime, concurrency }) => ({ name, runtime, concurrency })),
      instances: options.instances,
      ...(shared ? { leaseMs: options.lease } : {}),
      ...(remoteKv
        ? {
          remoteKv: {
            commitLatencyMs: remoteKv.commitLatency,
            readLatencyMs: remoteKv.readLatency,
            faultRate: remoteKv.faultRate,
          },
        }
        : {}),
      ackDelayMs: options.ackDelay,
      reconnectGraceMs: options.grace,
      drainDeadlineS: options.drain,
    };
    writeFileSync(join(out, "settings.json"), JSON.stringify(settings, null, 2) + "\n");
    log(
      `soak: ${options.minutes} min at ${options.rate} jobs/s, seed ${options.seed}, workers ` +
        slots.map((s, i) =>
          `${s.name}(${s.runtime}×${s.concurrency}${
            shared ? `→${controllers[i % controllers.length].name}` : ""
          })`
        ).join(" ") +
        (shared ? `, ${options.instances} instances (lease ${options.lease} ms)` : "") +
        (remoteKv
          ? `, KV through RemoteKv (${remoteKv.commitLatency}/${remoteKv.readLatency} ms, ` +
            `faults ${remoteKv.faultRate} a commit)`
          : "") +
        `, reconnectGrace ${options.grace} ms, journals in ${out}`,
    );

    const deadline = Date.now() + (options.minutes * 60 + drainCap + 180) * 1000;
    cluster = new Cluster(
      {
        paths,
        root,
        deno: Deno.execPath(),
        bun,
        journal,
        flow: FLOW,
        leaseTtl: shared ? options.lease : undefined,
        ...(remoteKv ? { remoteKv } : {}),
        secret,
        clientToken: await signToken(secret, { producer: FLOW, expiresIn }),
        grace: options.grace,
        rate: options.rate,
        seed: options.seed,
        deadline,
        log,
      },
      controllers,
      slots,
    );
    const phase = (name: string) => journal.write({ ev: "phase", phase: name, t: wallClock() });

    phase("start");
    for (const slot of controllers) cluster.startController(slot);
    await waitUntil(() => cluster!.controllerReady, "the controller to be ready", 60_000, signal);
    for (const slot of slots) cluster.startWorker(slot);
    cluster.startProducer();

    phase("load");
    const progress = reportProgress(paths, journal, log);
    try {
      await injectFaults(
        cluster,
        new FaultPlan(options.seed, shared ? options.lease : undefined),
        journal,
        wallClock() + options.minutes * 60_000,
        signal,
        log,
      );
    } finally {
      clearInterval(progress);
    }
    abortIf(signal);

    phase("stop");
    cluster.resumeAll();
    await cluster.stopProducer();
    abortIf(signal);

    phase("drain");
    const acks = readAcknowledgements(paths);
    log(
      `drain: waiting for ${acks.count} acknowledged jobs (until none finished for ` +
        `${options.drain} s, at most ${drainCap} s)`,
    );
    const drained: DrainResult = await drain(paths, acks.acked, options.drain * 1000, signal, log);
    journal.write({ ev: "drain", ...drained, t: wallClock() });
    abortIf(signal);
    if (shared && drained.complete) {
      // A kill just before the stop gets its takeover before the shutdown (see takeovers.ts).
      const left = Math.max(0, options.drain * 1000 - drained.ms);
      const wait = await awaitTakeovers(paths, left, signal, log);
      journal.write({ ev: "takeovers", ...wait, t: wallClock() });
      abortIf(signal);
    }

    phase("shutdown");
    await cluster.shutdown();
    phase("verify");
    log("verify: reading the journals and the queue");
    const queued = shared ? undefined : await readQueuedOrSay(paths, log);
    const summary = verify(paths, { settings, drain: drained, queued });
    writeFileSync(paths.summary, JSON.stringify(summary, null, 2) + "\n");
    completed = true;
    return { summary, out: temporary && !options.keep ? undefined : out };
  } finally {
    await cluster?.shutdown();
    await Promise.allSettled(proxies.map((proxy) => proxy.close()));
    journal.close();
    if (temporary && !options.keep) rmSync(out, { recursive: true, force: true });
    else if (!completed) log(`soak: journals kept in ${out}`);
  }
}

/** Verify the journals of a soak kept in `out` again (and what its KV file still holds). */
export async function verifyKept(out: string): Promise<Summary> {
  const paths = new SoakPaths(out);
  const settings = JSON.parse(Deno.readTextFileSync(join(out, "settings.json")));
  let drained: Summary["drain"] = { complete: false, remaining: -1, ms: 0 };
  readJournal(paths.soak, (record) => {
    if (record.ev === "drain") {
      drained = {
        complete: record.complete as boolean,
        remaining: record.remaining as number,
        ms: record.ms as number,
        ...(record.ended === undefined ? {} : { ended: record.ended as "stalled" | "capped" }),
        ...(record.longestQuietMs === undefined
          ? {}
          : { longestQuietMs: record.longestQuietMs as number }),
      };
    }
  });
  const shared = settings.instances !== undefined && settings.instances > 1;
  const queued = shared ? undefined : await readQueuedOrSay(paths, console.error);
  const summary = verify(paths, { settings, drain: drained, queued });
  writeFileSync(paths.summary, JSON.stringify(summary, null, 2) + "\n");
  return summary;
}

/**
 * What the controller's KV file still holds unconfirmed; undefined (every unfinished job then
 * counts as lost) when it cannot be read, which is said.
 */
async function readQueuedOrSay(
  paths: SoakPaths,
  log: (line: string) => void,
): Promise<Set<number> | undefined> {
  try {
    return await readQueued(paths.kv, FLOW);
  } catch (error) {
    log(
      `verify: cannot read the queue in ${paths.kv} (${
        String(error)
      }); unfinished jobs count as lost`,
    );
    return undefined;
  }
}

/** Bun from the project's node_modules (npm ci), else from the PATH. */
function findBun(): string {
  const local = join(root, "node_modules", ".bin", "bun");
  if (existsSync(local)) return local;
  for (const dir of (Deno.env.get("PATH") ?? "").split(":")) {
    if (dir && existsSync(join(dir, "bun"))) return join(dir, "bun");
  }
  throw new Error("Cannot start the soak: Bun is not installed (run npm ci)");
}

/** Every 30 s, one line: acknowledged jobs and faults so far. */
function reportProgress(paths: SoakPaths, journal: Journal, log: (line: string) => void) {
  const tails = new Map<string, JournalTail>();
  const faults = new JournalTail(journal.path);
  let acknowledged = 0;
  let injected = 0;
  const started = wallClock();
  return setInterval(() => {
    for (const file of readdirSync(paths.producers)) {
      const path = join(paths.producers, file);
      if (!tails.has(path)) tails.set(path, new JournalTail(path));
      tails.get(path)!.read((r) => {
        if (r.ev === "ack") acknowledged += (r.to as number) - (r.from as number) + 1;
      });
    }
    faults.read((r) => {
      if (r.ev === "fault") injected += 1;
    });
    const elapsed = Math.round((wallClock() - started) / 1000);
    log(`+${elapsed}s: ${acknowledged} jobs acknowledged, ${injected} faults`);
  }, 30_000);
}

async function waitUntil(
  condition: () => boolean,
  what: string,
  timeout: number,
  signal: AbortSignal,
): Promise<void> {
  const deadline = performance.now() + timeout;
  while (!condition()) {
    abortIf(signal);
    if (performance.now() > deadline) {
      throw new Error(`timed out after ${timeout} ms waiting for ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

function abortIf(signal: AbortSignal): void {
  if (signal.aborted) throw new Error("the soak was interrupted");
}
