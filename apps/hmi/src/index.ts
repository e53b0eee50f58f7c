/**
 * @tessera/hmi: HMI's multi-tenant classification server (Zhang et al., "HMI: Hierarchical Knowledge Management
 * for Efficient Multi-Tenant Inference in Pretrained Language Models") on Tessera's app kit.
 */
export { buildServer, describeJobError, listen, type ListenOptions, type ServerOptions } from './server.js';
export { DEFAULTS, parseCli, PIPELINES, type CliConfig, type PipelineOption, USAGE, UsageError } from './config.js';
export { bootstrapDemo, defaultDemoDir, DEMO_MODEL_NAME, DEMO_VERSION, type Demo, ensureDemo } from './demo.js';
export { DEMO_DOMAINS, DEMO_LABELS, type DemoDomain, domainCorpus, generalCorpus, tenantTask } from './demo-data.js';
export { type ClassifyResult, HmiEngine, type HmiEngineOptions, softmax } from './engine/hmi-engine.js';
export { HmiRunner, type RunBatch, type RunRequest, type RunnerOptions, type StageTimes } from './engine/runner.js';
export { PLOT_CHUNK, PlotService, PlotSnapshot, type PostMergeParams } from './engine/plot.js';
export { DEFAULT_BASE, type BaseModelOptions, prepareBaseModel } from './engine/base-model.js';
export { fineTuneTenant, furtherPretrain, lowerLayerNames } from './engine/training.js';
export { type DispatchBatch, Dispatcher } from './policy/dispatcher.js';
export { type DomainRecord, Manager, type ManagerSettings, ROOT_DOMAIN } from './manager/manager.js';
export { expectedTenantBytes, type TenantBytes, tenantBytes, type TenantHead, type TenantShape, type TenantState, TenantStore } from './manager/tenant-store.js';
export { type JobContext, type JobError, type JobProcessor, type JobQueue, type JobSpec, type JobState, type JobView } from './jobs/queue.js';
export { InProcessJobQueue } from './jobs/in-process.js';
export { BullJobQueue, MANAGER_QUEUE } from './jobs/bullmq.js';
export { HmiConflictError, HmiError, HmiInputError, hmiErrors, JobCancelledError, UnknownDomainError, UnknownJobError, UnknownTenantError } from './errors.js';
