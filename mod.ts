/**
 * workpull: a reliable work-pulling job dispatcher for Web-standard runtimes.
 *
 * One producer hands a stream of jobs to a {@linkcode WorkPullingController}; a dynamic pool of
 * {@linkcode WorkerEndpoint}s pulls them at their own pace through their own demand windows.
 * Each job goes to one worker at a time, delivery is at-least-once with the MessageID as the
 * dedupe key, and a lost worker's unconfirmed jobs go to a survivor. Attach a
 * {@linkcode DurableWorkQueue} and every accepted job survives a controller crash.
 *
 * This entry point is runtime-agnostic (Web APIs only): the controller, the producer, the worker
 * endpoint, the protocol, in-process transports and the in-memory queue.
 *
 * @example Dispatch jobs to two in-process workers
 * ```ts
 * import { BufferedProducer, connectInProcess, WorkerEndpoint, WorkPullingController } from "./mod.ts";
 *
 * const producer = new BufferedProducer<{ n: number }>();
 * const controller = new WorkPullingController({ name: "jobs", producer, deliveryConfirmation: true });
 * await controller.start();
 * for (const name of ["w1", "w2"]) {
 *   connectInProcess(controller, new WorkerEndpoint<{ n: number }>({
 *     producer: "jobs",
 *     name,
 *     handler: ({ payload }) => console.log(name, payload.n),
 *   }));
 * }
 * const receipt = await producer.submit({ n: 1 });
 * await receipt.confirmed;
 * await controller.close();
 * ```
 *
 * @module
 */

export { type Clock, systemClock, type TimerHandle, wallClock } from "./src/core/clock.ts";
export {
  createLogger,
  defaultLogger,
  type Logger,
  type LoggerOptions,
  type LogLevel,
} from "./src/core/logger.ts";
export {
  type ConfirmationWatcher,
  type ControllerState,
  type ControllerStats,
  type LinkIdentity,
  type WorkerStats,
  WorkPullingController,
} from "./src/controller/controller.ts";
export type { WorkPullingControllerOptions } from "./src/controller/options.ts";
export type { ProducerEndpoint, ProducerPort } from "./src/controller/producer_contract.ts";
export {
  type ControllerEventMap,
  ControllerRestartedEvent,
  type ControllerRole,
  type FailureStage,
  FrameRejectedEvent,
  ProgressEvent,
  type RejectReason,
  ReliableDeliveryFailedEvent,
  RequeuedEvent,
  type UnbindReason,
  WorkerBoundEvent,
  WorkerUnboundEvent,
} from "./src/controller/events.ts";
export {
  BufferedProducer,
  type BufferedProducerOptions,
  type Receipt,
  type SubmitManyOptions,
  type SubmitOptions,
} from "./src/producer/buffered_producer.ts";
export {
  BoundEvent,
  type Delivery,
  HandlerErrorEvent,
  RefusedEvent,
  RegistrationRefusedError,
  WorkerEndpoint,
  type WorkerEndpointEventMap,
  type WorkerEndpointOptions,
} from "./src/worker/worker_endpoint.ts";
export { CloseCode, type Link, type LinkReceiver } from "./src/transport/link.ts";
export { type Listener, SafeEventTarget } from "./src/core/safe_event_target.ts";
export {
  attachPort,
  connectInProcess,
  type InProcessConnection,
  type LinkAcceptor,
} from "./src/transport/in_process.ts";
export {
  type Accepted,
  type AckFrame,
  type CancelFrame,
  type ControllerFrame,
  type DeliveryConfirmed,
  type DoneFrame,
  type FailFrame,
  type Feature,
  FEATURES,
  type HeardFrame,
  type JobsFrame,
  MAX_ID_LENGTH,
  MAX_SEQ,
  MAX_WINDOW,
  type Produced,
  type ProducedJob,
  type ProgressFrame,
  REFUSAL_REASONS,
  type RefusalReason,
  type RefusedFrame,
  type RegisteredFrame,
  type RegisterFrame,
  type ReleaseFrame,
  type RequestFrame,
  type RequestNext,
  type ResetFrame,
  type Stored,
  type StoredAck,
  SUBPROTOCOL,
  UNBOUND_REASONS,
  type UnboundFrame,
  type WireJob,
  type WireJobError,
  type WorkerFrame,
} from "./src/protocol/schemas.ts";
export {
  decodeControllerFrame,
  type DecodeFailure,
  type DecodeFailureReason,
  type DecodeResult,
  decodeWorkerFrame,
  type EncodedJob,
  encodeFrame,
  encodeJobsFrame,
} from "./src/protocol/codec.ts";
export { JsonText } from "./src/protocol/json_text.ts";
export {
  JobChangedEvent,
  JobFailedError,
  JobQueue,
  type JobQueueEventMap,
  type JobQueueOptions,
  type JobQueueStats,
  type JobReceipt,
  type JobWatcher,
  type NewJobInput,
  PauseChangedEvent,
} from "./src/backlog/job_queue.ts";
export {
  MAX_SCHEDULE_KEY,
  type ScheduledJob,
  type ScheduleInfo,
} from "./src/schedule/scheduler.ts";
export { MAX_EVERY, MIN_EVERY, type ScheduleWhen } from "./src/schedule/recurrence.ts";
export {
  type BacklogCounts,
  BacklogFullError,
  type DeadLetterPage,
  type EnqueueResult,
  type JobStore,
  type JobStoreListener,
  type JobStoreSettings,
  type NewJob,
  type ReadyJob,
} from "./src/backlog/job_store.ts";
export { MemoryJobStore, type MemoryJobStoreOptions } from "./src/backlog/memory_job_store.ts";
export {
  type Active,
  JobStoreEngine,
  type JobStoreEngineOptions,
  type Journal,
  type JournalChange,
  type JournalEntry,
  type JournalSnapshot,
  MEMORY_JOURNAL,
} from "./src/backlog/job_store_engine.ts";
export type { StoreSettingsOptions } from "./src/backlog/store_settings.ts";
export { BacklogProducer } from "./src/backlog/backlog_producer.ts";
export type {
  Backoff,
  JobOptions,
  JobPlan,
  LifecycleDefaults,
  ResolvedBackoff,
  ResolvedDefaults,
} from "./src/lifecycle/job_options.ts";
export type {
  JobError,
  JobInfo,
  JobOutcome,
  JobRecord,
  JobState,
} from "./src/lifecycle/job_record.ts";
export * from "./src/queue/work_queue.ts";
export { MemoryWorkQueue } from "./src/queue/memory_queue.ts";
