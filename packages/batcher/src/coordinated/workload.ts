/**
 * The PetS batching workload (pets.md §7 [ARTIFACT] experiment driver, §8.8): a pool of queries with Gaussian
 * lengths clip(round(N(mean, std)), 1, maxLength), each assigned a uniformly random task, and tasks assigned
 * uniformly random PET types. Seeded, so a pool is the same on every machine.
 */
import { mulberry32 } from '@tessera/core';
import { PlanError } from './errors.js';
import type { CbQuery } from './types.js';

export interface CbPoolOptions {
  /** Queries in the pool (the paper: 1024). */
  queries: number;
  /** Task count (names 'task0', 'task1', ...) or the task names. */
  tasks: number | readonly string[];
  /** Mean length (the paper: 32). */
  meanLength: number;
  /** Length standard deviation (the paper: 1, 2, 4, 8). */
  stdLength: number;
  seed: number;
  /** Lengths are clipped to [1, maxLength]; default 128. */
  maxLength?: number;
}

/** Query i has id i, arrival i, a uniform task and length clip(round(N(mean, std)), 1, maxLength). */
export function generateCbPool(options: CbPoolOptions): CbQuery[] {
  const { queries, meanLength, stdLength, seed } = options;
  const maxLength = options.maxLength ?? 128;
  if (!Number.isInteger(queries) || queries < 0) throw bad(`generateCbPool: queries must be an integer >= 0, got ${String(queries)}`);
  if (!Number.isFinite(meanLength)) throw bad(`generateCbPool: meanLength must be finite, got ${String(meanLength)}`);
  if (!Number.isFinite(stdLength) || stdLength < 0) throw bad(`generateCbPool: stdLength must be a finite number >= 0, got ${String(stdLength)}`);
  if (!Number.isInteger(maxLength) || maxLength < 1) throw bad(`generateCbPool: maxLength must be an integer >= 1, got ${String(maxLength)}`);
  checkSeed('generateCbPool', seed);
  const tasks = cbTaskNames(options.tasks);
  const random = mulberry32(seed);
  const pool: CbQuery[] = new Array<CbQuery>(queries);
  for (let i = 0; i < queries; i++) {
    const task = tasks[Math.floor(random() * tasks.length)]!;
    const length = Math.min(maxLength, Math.max(1, Math.round(meanLength + stdLength * standardNormal(random))));
    pool[i] = { id: i, task, length, arrival: i };
  }
  return pool;
}

/** Each task gets a PET type drawn uniformly from `types` (the artifact's randint over the 4 types). */
export function assignPetTypes(tasks: readonly string[], types: readonly string[], seed: number): Map<string, string> {
  if (!Array.isArray(tasks)) throw bad('assignPetTypes: tasks must be an array of task names');
  if (!Array.isArray(types) || types.length === 0) throw bad('assignPetTypes: types must be a non-empty array');
  checkSeed('assignPetTypes', seed);
  const random = mulberry32(seed);
  const out = new Map<string, string>();
  for (const task of tasks) {
    if (typeof task !== 'string' || task.length === 0) throw bad(`assignPetTypes: task names must be non-empty strings, got ${String(task)}`);
    if (out.has(task)) throw bad(`assignPetTypes: task '${task}' appears twice`);
    out.set(task, types[Math.floor(random() * types.length)]!);
  }
  return out;
}

/** The task names a CbPoolOptions.tasks stands for (a count n gives task0 … task{n−1}). */
export function cbTaskNames(tasks: number | readonly string[]): string[] {
  if (typeof tasks === 'number') {
    if (!Number.isInteger(tasks) || tasks < 1) throw bad(`generateCbPool: tasks must be an integer >= 1 or a list of names, got ${tasks}`);
    return Array.from({ length: tasks }, (_, i) => `task${i}`);
  }
  if (!Array.isArray(tasks) || tasks.length === 0) throw bad('generateCbPool: tasks must be an integer >= 1 or a non-empty list of names');
  for (const t of tasks) if (typeof t !== 'string' || t.length === 0) throw bad(`generateCbPool: task names must be non-empty strings, got ${String(t)}`);
  return [...tasks];
}

function bad(message: string): PlanError {
  return new PlanError('TESSERA_INVALID_PLAN_OPTIONS', message);
}

function checkSeed(where: string, seed: unknown): void {
  if (typeof seed !== 'number' || !Number.isInteger(seed)) throw bad(`${where}: seed must be an integer, got ${String(seed)}`);
}

/** Box–Muller; 1 − u keeps the logarithm's argument in (0, 1]. */
function standardNormal(random: () => number): number {
  const u = 1 - random();
  const v = random();
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * v);
}
