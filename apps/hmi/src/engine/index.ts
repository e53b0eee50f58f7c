/**
 * `@tessera/hmi/engine`: HMI's serving pieces without the HTTP server — the PLOT service, the pipelined runner and
 * the tenant state they read — for benchmarks and embedders that drive batches themselves.
 */
export { HmiRunner, type RunBatch, type RunRequest, type RunnerOptions, type StageTimes } from './runner.js';
export { PLOT_CHUNK, PlotService, PlotSnapshot, type PostMergeParams } from './plot.js';
export { expectedTenantBytes, type TenantBytes, tenantBytes, type TenantHead, type TenantShape, type TenantState, TenantStore } from '../manager/tenant-store.js';
