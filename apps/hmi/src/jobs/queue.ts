/**
 * The manager's job interface (hmi.md §1.11: FPT and FT are offline work, so every operation a–e is a job with a
 * status, a progress and a result). Two implementations with the same behaviour: `InProcessJobQueue` when no Redis
 * is configured, `BullJobQueue` (a BullMQ queue and worker on Redis) when one is.
 *
 * Jobs run one at a time, in submission order. A job's processor receives an AbortSignal; cancelling a queued job
 * drops it, cancelling a running one aborts the signal, and the processor stops at its next check without
 * registering anything (the manager commits a job's effect in one synchronous step at its very end).
 */

export type JobState = 'queued' | 'running' | 'done' | 'failed' | 'cancelled';

export interface JobError {
  message: string;
  /** The API code of a typed error (e.g. `domain_in_use`), or null. */
  code: string | null;
}

export interface JobView {
  id: string;
  /** The operation: create_domain, update_domain, create_tenant, update_tenant, delete_tenant, delete_domain. */
  op: string;
  /** The domain or tenant it works on. */
  target: string;
  state: JobState;
  /** 0 … 1. */
  progress: number;
  result: unknown;
  error: JobError | null;
  createdAt: string;
  finishedAt: string | null;
}

export interface JobContext {
  readonly id: string;
  readonly signal: AbortSignal;
  /** Reports progress in [0, 1]. */
  progress(fraction: number): Promise<void>;
}

export interface JobSpec {
  op: string;
  target: string;
  /** JSON-serialisable input of the operation. */
  data: unknown;
}

export type JobProcessor = (spec: JobSpec, ctx: JobContext) => Promise<unknown>;

/** Called when a job leaves the queue for good (done, failed or cancelled), with its final view. */
export type JobFinished = (view: JobView) => void;

export interface JobQueue {
  readonly mode: 'in-process' | 'bullmq';
  /** Starts running jobs with `processor`. */
  start(processor: JobProcessor, onFinished?: JobFinished): Promise<void>;
  add(spec: JobSpec): Promise<JobView>;
  get(id: string): Promise<JobView | null>;
  /** Cancels a queued or running job; UnknownJobError, or a conflict when it already finished. */
  cancel(id: string): Promise<JobView>;
  counts(): Promise<{ queued: number; running: number }>;
  /** Cancels what runs, stops the worker and closes connections. */
  close(): Promise<void>;
}

/** The API wording of an error a processor threw. */
export function jobErrorOf(err: unknown, describe: (err: unknown) => string | null): JobError {
  return { message: err instanceof Error ? err.message : String(err), code: describe(err) };
}

export const clampProgress = (p: number): number => (Number.isFinite(p) ? Math.min(1, Math.max(0, p)) : 0);
