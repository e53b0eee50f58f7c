/**
 * Starting a server's instances and profiling them. Real instances start one after another (each loads the model
 * and runs a warm-up batch before the next starts: the native kernels' process-wide thread pool is created once,
 * with TESSERA_THREADS=1, before two workers use it); instances past `workers` are emulated executors.
 */
import { type MeasuredRuntimeProfile, profileRuntimes } from '@tessera/length-scheduler';

import { EmulatedRuntime, type Runtime, type RuntimeKind } from './runtime.js';
import { ThreadRuntime } from './thread-runtime.js';

export { checkBatch, EmulatedRuntime, type InferOutput, type Runtime, type RuntimeKind, RuntimeInputError, RuntimeUnavailableError } from './runtime.js';
export { ThreadRuntime, type ThreadRuntimeOptions } from './thread-runtime.js';

export interface StartInstancesOptions {
  kind: RuntimeKind;
  modelDir: string;
  /** The initial length of each instance (its count is the instance count). */
  placement: readonly number[];
  /** How many of them are real worker threads (the rest are emulated). */
  workers: number;
  maxBatch: number;
  /** Instance ids (default i0, i1, …). */
  ids?: readonly string[];
}

/** Starts the real instances; returns them and a factory for the emulated ones (they need the profile first). */
export async function startInstances(options: StartInstancesOptions): Promise<{ real: ThreadRuntime[]; emulate: (serviceMs: (length: number) => number) => Runtime[] }> {
  // One intra-op thread per instance (the native pool is process-wide: set before the first worker loads the addon).
  if (options.kind === 'native') process.env.TESSERA_THREADS = '1';
  const ids = options.ids ?? options.placement.map((_, k) => `i${k}`);
  const real: ThreadRuntime[] = [];
  try {
    for (let k = 0; k < Math.min(options.workers, options.placement.length); k++) {
      real.push(await ThreadRuntime.start({ id: ids[k]!, kind: options.kind, modelDir: options.modelDir, length: options.placement[k]!, maxBatch: options.maxBatch }));
    }
  } catch (err) {
    await Promise.allSettled(real.map((r) => r.close()));
    throw err;
  }
  const emulate = (serviceMs: (length: number) => number) =>
    options.placement.slice(real.length).map((length, j) => new EmulatedRuntime(ids[real.length + j]!, length, options.maxBatch, serviceMs));
  return { real, emulate };
}

/** One measured point of the profile: a runtime length at a batch size. */
export type ProfilePoint = { length: number; batch: number; meanMs: number; p50Ms: number; p99Ms: number };

/**
 * The offline profiler (arlo.md §4) through length-scheduler's `profileRuntimes`, on one real instance: each
 * length × batch, timed by the worker's clock. Returns the batch-1 profiles (Arlo's runtimes run batch 1) and the
 * whole table.
 */
export async function profileInstance(
  runtime: ThreadRuntime,
  options: { lengths: readonly number[]; sloMs: number; reps: number; batches?: readonly number[]; overheadMs?: number },
): Promise<{ profiles: MeasuredRuntimeProfile[]; table: ProfilePoint[] }> {
  const batches = options.batches ?? [1];
  const table: ProfilePoint[] = [];
  let profiles: MeasuredRuntimeProfile[] = [];
  for (const batch of batches) {
    const measured = await profileRuntimes({
      lengths: options.lengths,
      measure: (length, b) => runtime.measure(length, b),
      sloMs: options.sloMs,
      batch,
      warmup: Math.min(10, options.reps),
      reps: options.reps,
      ...(options.overheadMs === undefined ? {} : { overheadMs: options.overheadMs }),
    });
    for (const p of measured) table.push({ length: p.maxLength, batch, meanMs: p.meanMs, p50Ms: p.p50Ms, p99Ms: p.p99Ms });
    if (batch === 1 || profiles.length === 0) profiles = measured;
  }
  return { profiles, table };
}
