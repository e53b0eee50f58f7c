/**
 * PetS's instance of the host protocol (@tessera/cluster), between the HTTP thread and the engine worker thread
 * (server-kit's WorkerEngineClient ⇄ cluster's serveWorkerHost). A classify request is placed with its inputs'
 * token ids; its events are one `result` item per input (index = the input's position), then `finish`. Admin calls
 * are PetsHost's task calls and stats; the `memory` notice follows every change of the task set or of what is
 * loaded, so /health never waits on a batch. Errors cross as core's serializeError. The records themselves
 * (TaskSummary, MemorySummary, ModelSummary, EncodedInput, ClassifyResult, stats) are @tessera/pet-ops' host types.
 *
 * A parameter file travels as bytes (an upload, or a file the HTTP thread read inside --params-root), transferred,
 * not copied: the worker never opens a path a client named.
 */
import type { ItemEvent } from '@tessera/cluster';
import type { ClassifyResult, EncodedInput, MemorySummary, ModelSummary, PetsHostStats, RegisterTask, StartupTask, TaskSummary } from '@tessera/pet-ops';

export type { ClassifyResult, EncodedInput, MacroBatchRecord, MemorySummary, ModelSummary, PlanRecord, RegisterTask, StartupTask, TaskState, TaskSummary } from '@tessera/pet-ops';

/** How the worker prices batches: which cost model the planner uses. */
export interface CostSummary {
  source: 'analytic' | 'tables' | 'profiled';
  /** The tables file, for 'tables'. */
  file: string | null;
}

/** What /metrics needs from the worker, sampled when scraped (PetsHost's stats). */
export type EngineStats = PetsHostStats;

/** workerData of the engine worker. */
export interface WorkerInit {
  modelDir: string;
  tag: string;
  budgetBytes: number;
  strategy: string;
  layout: 'padded' | 'packed';
  scheduling: { mode: 'intensity' | 'round-robin' | 'sequential'; streams: number | 'dynamic' };
  windowMs: number;
  windowQueries: number;
  /** Cost model: profiled tables (the file's parsed JSON), profile at start, or the analytic default. */
  cost: { kind: 'analytic' } | { kind: 'tables'; file: string; json: unknown } | { kind: 'profile'; out: string | null };
  threads: number | null;
  startupTasks: StartupTask[];
  /** The module to run, for the dev bootstrap (worker-dev.mjs): the TypeScript worker's URL. */
  entry?: string;
}

/** A classify request: a task and its inputs. `id` is the idempotency key. */
export interface ClassifyRequest {
  id: string;
  taskId: string;
  inputs: EncodedInput[];
}

/** What the worker reports when it is ready. */
export interface PetsReady {
  model: ModelSummary;
  cost: CostSummary;
  tasks: TaskSummary[];
  memory: MemorySummary;
}

/** The protocol's types, for WorkerEngineClient and serveWorkerHost. */
export interface PetsProtocol {
  placement: { request: ClassifyRequest; attempt: number };
  item: ItemEvent<'result', { result: ClassifyResult }>;
  result: null;
  notice: { kind: 'memory'; memory: MemorySummary };
  admin: {
    'register-task': { args: RegisterTask; result: TaskSummary };
    'load-task': { args: string; result: TaskSummary };
    'unload-task': { args: string; result: TaskSummary };
    'delete-task': { args: string; result: TaskSummary };
    tasks: { args: null; result: { tasks: TaskSummary[]; memory: MemorySummary } };
    task: { args: string; result: { task: TaskSummary; memory: MemorySummary } };
    stats: { args: null; result: EngineStats };
  };
  ready: PetsReady;
}
