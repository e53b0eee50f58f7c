/**
 * Jobs without Redis: a FIFO in this process, one job at a time, the same states, progress and cancellation as the
 * BullMQ queue (as the Punica server runs its engine in-process when no cluster is configured).
 */
import { HmiConflictError, JobCancelledError, UnknownJobError } from '../errors.js';
import { clampProgress, type JobError, type JobFinished, type JobProcessor, type JobQueue, type JobSpec, type JobView } from './queue.js';

interface Entry {
  view: JobView;
  spec: JobSpec;
  controller: AbortController;
}

/** Finished jobs kept for GET /v1/jobs/:id (oldest forgotten first). */
const KEEP_FINISHED = 10_000;

export class InProcessJobQueue implements JobQueue {
  readonly mode = 'in-process' as const;
  private readonly jobs = new Map<string, Entry>();
  private readonly waiting: Entry[] = [];
  private running: Entry | null = null;
  private processor: JobProcessor | null = null;
  private onFinished: JobFinished | undefined;
  private nextId = 1;
  private finishedOrder: string[] = [];
  private closed = false;
  private idle: Promise<void> = Promise.resolve();

  constructor(private readonly describe: (err: unknown) => JobError) {}

  async start(processor: JobProcessor, onFinished?: JobFinished): Promise<void> {
    this.processor = processor;
    this.onFinished = onFinished;
    this.pump();
  }

  async add(spec: JobSpec): Promise<JobView> {
    if (this.closed) throw new HmiConflictError('TESSERA_HMI_BUSY', 'the server is shutting down');
    const id = String(this.nextId++);
    const entry: Entry = {
      view: { id, op: spec.op, target: spec.target, state: 'queued', progress: 0, result: null, error: null, createdAt: new Date().toISOString(), finishedAt: null },
      spec,
      controller: new AbortController(),
    };
    this.jobs.set(id, entry);
    this.waiting.push(entry);
    this.pump();
    return { ...entry.view };
  }

  async get(id: string): Promise<JobView | null> {
    const e = this.jobs.get(id);
    return e ? { ...e.view } : null;
  }

  async cancel(id: string): Promise<JobView> {
    const e = this.jobs.get(id);
    if (!e) throw new UnknownJobError(id);
    if (e.view.state === 'queued') {
      this.waiting.splice(this.waiting.indexOf(e), 1);
      this.finish(e, 'cancelled', null, { message: `job ${id} was cancelled`, code: 'job_cancelled' });
    } else if (e.view.state === 'running') {
      e.controller.abort(new JobCancelledError(id));
      // The processor stops at its next check; the job is then 'cancelled' (finish() in run()).
      await this.idle;
    } else {
      throw new HmiConflictError('TESSERA_HMI_JOB_FINISHED', `job ${id} already finished (${e.view.state})`, { job: id, state: e.view.state });
    }
    return { ...e.view };
  }

  async counts(): Promise<{ queued: number; running: number }> {
    return { queued: this.waiting.length, running: this.running ? 1 : 0 };
  }

  async close(): Promise<void> {
    this.closed = true;
    for (const e of this.waiting.splice(0)) this.finish(e, 'cancelled', null, { message: 'the server shut down', code: 'job_cancelled' });
    this.running?.controller.abort(new JobCancelledError(this.running.view.id));
    await this.idle;
  }

  private pump(): void {
    if (this.running || !this.processor || this.closed) return;
    const next = this.waiting.shift();
    if (!next) return;
    this.running = next;
    next.view.state = 'running';
    this.idle = this.run(next);
  }

  private async run(e: Entry): Promise<void> {
    // Start on a later turn: the submitter gets the job's id before anything of it runs.
    await new Promise((r) => setImmediate(r));
    const ctx = {
      id: e.view.id,
      signal: e.controller.signal,
      progress: async (p: number) => {
        e.view.progress = clampProgress(p);
      },
    };
    try {
      const result = await this.processor!(e.spec, ctx);
      if (e.controller.signal.aborted) this.finish(e, 'cancelled', null, { message: `job ${e.view.id} was cancelled`, code: 'job_cancelled' });
      else this.finish(e, 'done', result, null);
    } catch (err) {
      if (e.controller.signal.aborted) this.finish(e, 'cancelled', null, { message: `job ${e.view.id} was cancelled`, code: 'job_cancelled' });
      else this.finish(e, 'failed', null, this.describe(err));
    } finally {
      this.running = null;
      // The next job starts on a later turn, so a caller awaiting this one sees its final state first.
      setImmediate(() => this.pump());
    }
  }

  private finish(e: Entry, state: 'done' | 'failed' | 'cancelled', result: unknown, error: JobError | null): void {
    e.view.state = state;
    if (state === 'done') e.view.progress = 1;
    e.view.result = result;
    e.view.error = error;
    e.view.finishedAt = new Date().toISOString();
    this.finishedOrder.push(e.view.id);
    if (this.finishedOrder.length > KEEP_FINISHED) {
      for (const id of this.finishedOrder.splice(0, this.finishedOrder.length - KEEP_FINISHED)) this.jobs.delete(id);
    }
    this.onFinished?.({ ...e.view });
  }
}
