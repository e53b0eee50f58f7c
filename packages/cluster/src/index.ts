/**
 * @tessera/cluster: serving beyond one engine. The Punica scheduler (placement on the busiest host with room,
 * FCFS queue, migration by recompute on KV exhaustion, autoscale signals), engine hosts in-process or as BullMQ
 * workers on Redis, the client stream that turns at-least-once host events into exactly-once tokens, and the
 * EngineLoop that drives one accelerator (a batcher Scheduler plus an injected runner: no engine at run time).
 */
export type {
  AdminCalls,
  AdminHandlers,
  EndEvent,
  EngineHost,
  FinishReason,
  FinishedResult,
  GenerateRequest,
  HostEngine,
  HostEvent,
  HostEventSink,
  HostLoad,
  HostMessage,
  HostPlacement,
  ItemEvent,
  Placement,
  ProtocolEngine,
  ProtocolEvent,
  RequestEventBase,
  SamplingOptions,
  SerializedError,
  StreamEvent,
  TokenEvent,
  FromWorkerHost,
  ToWorkerHost,
} from './types.js';
export {
  ClusterArgumentError,
  ClusterError,
  RedisUnavailableError,
  RemoteError,
  deserializeError,
  serializeError,
} from './errors.js';
export {
  type AutoscaleSignal,
  DEFAULT_SCHEDULER_MAX_BATCH,
  PunicaScheduler,
  type PunicaSchedulerOptions,
  type SchedulerEvents,
  type SchedulerHostView,
  type SchedulerSnapshot,
} from './scheduler/punica-scheduler.js';
export { type ClientEvent, ClientStream } from './client/client-stream.js';
export { EngineLoop, type EngineLoopOptions } from './in-process/engine-loop.js';
export { type BatcherEngineOptions, type BatcherHostEngine, type HeldRequest, type HostSample, type HostableLoop, batcherEngine } from './in-process/batcher-engine.js';
export { type DeliveredItem, EventStream, type StreamOutput } from './client/event-stream.js';
export { serveWorkerHost, type WorkerHostSpec, type WorkerHostStarted } from './worker-thread/serve.js';
export { InProcessEngineHost } from './in-process/in-process-host.js';
export { InProcessCluster, type InProcessClusterOptions } from './in-process/in-process-cluster.js';
export * from './redis/index.js';
