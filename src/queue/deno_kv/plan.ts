/**
 * The pure decision behind one write of the Deno KV work queue: given the retained jobs and a
 * batch of stores, accepts and confirms, compute the results, the new append cursor and the
 * writes, or throw {@linkcode QueueConflictError} having decided nothing.
 *
 * Operations apply in the order stores, accepts, confirms, exactly as if called one by one.
 * Compaction (dropping a job that is both accepted and confirmed) happens once, at the end of the
 * batch, so a MessageID repeated inside one batch is a repeat, never an unknown ID. Confirming a
 * MessageID that is not retained (compacted already, or never stored) is a no-op.
 *
 * Acceptance is recorded per run, not per job: the jobs a batch accepts, by consecutive
 * sequences, get one `accepted` range record each run (a handshake's jobs are stored at
 * consecutive sequences, so usually one a batch). The record is deleted with the last of its
 * jobs to be compacted. A flags record remains only for a job confirmed before it was accepted,
 * and for jobs accepted by format version 1, which wrote one per job.
 *
 * @module
 */

import { QueueConflictError, type StoreResult } from "../work_queue.ts";

/** What the adapter keeps in memory about one retained job. */
export interface KvJobInfo {
  /** The store sequence. */
  readonly seq: number;
  /** How many continuation parts its payload has. */
  readonly parts: number;
  /** Accepted by the producer. */
  readonly accepted: boolean;
  /** Confirmed by a worker. */
  readonly confirmed: boolean;
  /** The first sequence of the `accepted` range that holds it; 0 when it has none. */
  readonly range: number;
}

/** A job to store, with its sizes and part count already computed. */
export interface PlannedStore {
  /** The stable deduplication key. */
  readonly messageId: string;
  /** The MessageID's UTF-8 length. */
  readonly messageIdBytes: number;
  /** The payload's JSON text. */
  readonly payload: string;
  /** The payload's UTF-8 length. */
  readonly payloadBytes: number;
  /** Continuation parts its payload needs. */
  readonly parts: number;
}

/** The input of {@linkcode planBatch}. */
export interface PlanInput {
  /** The append cursor before the batch. */
  readonly currentSeq: number;
  /** Retained jobs by MessageID before the batch. */
  readonly jobs: ReadonlyMap<string, KvJobInfo>;
  /** The sequence proposed for the first new job. */
  readonly firstSeq: number;
  /** Jobs to store, in order. */
  readonly store: readonly PlannedStore[];
  /** MessageIDs to accept. */
  readonly accept: readonly string[];
  /** MessageIDs to confirm. */
  readonly confirm: readonly string[];
  /** The persisted payloads of retained jobs that `store` repeats. */
  readonly storedPayloads: ReadonlyMap<string, string>;
  /** Retained jobs in each `accepted` range, by the range's first sequence, before the batch. */
  readonly ranges: ReadonlyMap<number, number>;
}

/** One write the adapter must perform. */
export type PlannedWrite =
  | {
    readonly kind: "create";
    readonly seq: number;
    /** The job as stored: its MessageID, payload and their UTF-8 lengths. */
    readonly job: PlannedStore;
    readonly flags: { readonly accepted: boolean; readonly confirmed: boolean } | undefined;
  }
  | {
    readonly kind: "flags";
    readonly seq: number;
    readonly flags: { readonly accepted: boolean; readonly confirmed: boolean };
  }
  | {
    readonly kind: "compact";
    readonly messageId: string;
    readonly seq: number;
    readonly parts: number;
    readonly hadFlags: boolean;
    /** Whether its job key exists (false: stored, accepted and confirmed in this batch). */
    readonly written: boolean;
  }
  /** Write the `accepted` range record of the jobs at `first..last`. */
  | { readonly kind: "range"; readonly first: number; readonly last: number }
  /** Delete the `accepted` range record at `first`: its last job was compacted. */
  | { readonly kind: "unrange"; readonly first: number };

/** The output of {@linkcode planBatch}. */
export interface BatchPlan {
  /** One result per stored job, in order. */
  readonly stored: readonly StoreResult[];
  /** The append cursor after the batch. */
  readonly currentSeq: number;
  /** The writes, at most one per touched job. */
  readonly writes: readonly PlannedWrite[];
  /** The retained-jobs changes to apply once the writes are durable (undefined: dropped). */
  readonly updates: ReadonlyMap<string, KvJobInfo | undefined>;
  /** The range changes to apply with them: retained jobs per range (undefined: deleted). */
  readonly ranges: ReadonlyMap<number, number | undefined>;
}

interface Draft {
  seq: number;
  parts: number;
  accepted: boolean;
  confirmed: boolean;
  range: number;
  readonly initial: KvJobInfo | undefined;
  /** The job this batch stores (undefined: retained before the batch). */
  readonly job: PlannedStore | undefined;
}

/**
 * Decides one batch; throws {@linkcode QueueConflictError} for a wrong `firstSeq` or an accept of
 * an unknown MessageID.
 *
 * @example Store and accept in one batch
 * ```ts
 * import { planBatch } from "./plan.ts";
 *
 * const plan = planBatch({
 *   currentSeq: 0,
 *   jobs: new Map(),
 *   firstSeq: 1,
 *   store: [{ messageId: "a", messageIdBytes: 1, payload: "1", payloadBytes: 1, parts: 0 }],
 *   accept: ["a"],
 *   confirm: [],
 *   storedPayloads: new Map(),
 *   ranges: new Map(),
 * });
 * console.assert(plan.currentSeq === 1 && plan.writes[0].kind === "create");
 * ```
 */
export function planBatch(input: PlanInput): BatchPlan {
  const drafts = new Map<string, Draft>();
  const stored: StoreResult[] = [];
  let created = 0;
  for (const job of input.store) {
    const draft = drafts.get(job.messageId);
    const known = draft ?? input.jobs.get(job.messageId);
    if (known) {
      const payload = draft?.job?.payload ?? input.storedPayloads.get(job.messageId);
      if (payload === undefined) throw new Error(`Missing the stored payload of ${job.messageId}`);
      stored.push({ seq: known.seq, alreadyStored: true, payload });
      continue;
    }
    const seq = input.firstSeq + created;
    created += 1;
    drafts.set(job.messageId, {
      seq,
      parts: job.parts,
      accepted: false,
      confirmed: false,
      range: 0,
      initial: undefined,
      job,
    });
    stored.push({ seq, alreadyStored: false, payload: job.payload });
  }
  if (created > 0 && input.firstSeq !== input.currentSeq + 1) {
    throw new QueueConflictError(
      `Cannot store at sequence ${input.firstSeq}: the next sequence is ${input.currentSeq + 1}`,
    );
  }
  for (const id of input.accept) mark(drafts, input.jobs, id, "accepted");
  for (const id of input.confirm) mark(drafts, input.jobs, id, "confirmed");
  return finish(drafts, stored, input.currentSeq + created, input.ranges);
}

function mark(
  drafts: Map<string, Draft>,
  jobs: ReadonlyMap<string, KvJobInfo>,
  messageId: string,
  flag: "accepted" | "confirmed",
): void {
  let draft = drafts.get(messageId);
  if (!draft) {
    const info = jobs.get(messageId);
    if (!info && flag === "confirmed") return; // confirmed and compacted already: a no-op
    if (!info) throw new QueueConflictError(`Cannot accept ${messageId}: unknown MessageID`);
    draft = { ...info, initial: info, job: undefined };
    drafts.set(messageId, draft);
  }
  draft[flag] = true;
}

function finish(
  drafts: Map<string, Draft>,
  stored: StoreResult[],
  currentSeq: number,
  ranges: ReadonlyMap<number, number>,
): BatchPlan {
  const writes: PlannedWrite[] = [];
  const updates = new Map<string, KvJobInfo | undefined>();
  const rangeUpdates = new Map<number, number | undefined>();
  placeInRanges(drafts, writes, rangeUpdates);
  for (const [messageId, draft] of drafts) {
    const { seq, parts, accepted, confirmed, range, initial } = draft;
    const done = accepted && confirmed;
    if (!initial) {
      if (!done) {
        const flags = confirmed ? { accepted, confirmed } : undefined;
        writes.push({ kind: "create", seq, job: draft.job!, flags });
      } else {
        // Never written, but completed all the same: remembered like any other.
        writes.push({ kind: "compact", messageId, seq, parts: 0, hadFlags: false, written: false });
      }
    } else if (done) {
      // A flags record exists for a job confirmed first, or accepted by format version 1.
      const hadFlags = initial.confirmed || initial.accepted && initial.range === 0;
      writes.push({ kind: "compact", messageId, seq, parts, hadFlags, written: true });
      if (initial.range !== 0) leaveRange(initial.range, ranges, writes, rangeUpdates);
    } else if (initial.confirmed !== confirmed) {
      writes.push({ kind: "flags", seq, flags: { accepted, confirmed } });
    } else if (initial.accepted === accepted) {
      continue; // an accept or confirm repeated: nothing changes
    }
    updates.set(messageId, done ? undefined : { seq, parts, accepted, confirmed, range });
  }
  return { stored, currentSeq, writes, updates, ranges: rangeUpdates };
}

/**
 * Puts the jobs this batch accepts, and does not compact, into `accepted` ranges: one a run of
 * consecutive sequences.
 */
function placeInRanges(
  drafts: Map<string, Draft>,
  writes: PlannedWrite[],
  rangeUpdates: Map<number, number | undefined>,
): void {
  let placed: Draft[] | undefined;
  let sorted = true;
  for (const draft of drafts.values()) {
    if (!draft.accepted || draft.confirmed || draft.initial?.accepted) continue;
    placed ??= [];
    if (placed.length > 0 && placed[placed.length - 1].seq > draft.seq) sorted = false;
    placed.push(draft);
  }
  if (!placed) return;
  if (!sorted) placed.sort((a, b) => a.seq - b.seq);
  let start = 0;
  for (let i = 1; i <= placed.length; i++) {
    if (i < placed.length && placed[i].seq === placed[i - 1].seq + 1) continue;
    const first = placed[start].seq;
    writes.push({ kind: "range", first, last: placed[i - 1].seq });
    rangeUpdates.set(first, i - start);
    for (let j = start; j < i; j++) placed[j].range = first;
    start = i;
  }
}

/** One job of the range at `first` is compacted; the last one takes the record with it. */
function leaveRange(
  first: number,
  ranges: ReadonlyMap<number, number>,
  writes: PlannedWrite[],
  rangeUpdates: Map<number, number | undefined>,
): void {
  const held = rangeUpdates.has(first) ? rangeUpdates.get(first) : ranges.get(first);
  if (held === undefined) throw new Error(`The accepted range at seq ${first} is not known`);
  if (held > 1) return void rangeUpdates.set(first, held - 1);
  writes.push({ kind: "unrange", first });
  rangeUpdates.set(first, undefined);
}
