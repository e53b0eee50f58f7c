/**
 * PetsHost through its own API, without HTTP or a worker thread: register from a parameter file's bytes, load,
 * unload, delete, classify (unbatched, and through batcher's WindowPipeline attached over the host's executor),
 * memory notices, drained stats, the temporary profiling tasks, start-up tasks that name a bad file, the demo.
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

import { systemClock, WindowPipeline } from '@tessera/batcher';
import { type EncoderConfig, generateModel } from '@tessera/engine';
import { Registry } from 'prom-client';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';

import {
  type ClassifyResult,
  type EncodedInput,
  ensurePetsDemo,
  generatePetParams,
  type MemorySummary,
  PET_TYPES,
  type PetType,
  PETS_DEMO_TASKS,
  PetsHost,
  PetsHostMetrics,
  PetTypeMismatchError,
  TaskStateError,
  UnknownTaskError,
  writePetParams,
} from '../src/index.js';

const TAG = 'bert-tiny';
let dir: string;
let config: EncoderConfig;
const hosts: PetsHost[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'pets-host-'));
  config = generateModel(join(dir, TAG), { family: 'encoder', size: 'tiny', seed: 31 }).config;
}, 30_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(async () => {
  for (const h of hosts.splice(0)) await h.close();
});

function host(budgetBytes = 64 << 20): PetsHost {
  const h = new PetsHost({ modelDir: join(dir, TAG), tag: TAG, budgetBytes, threads: 1 });
  hosts.push(h);
  return h;
}

const bytes = (type: PetType, seed: number, labels = ['no', 'yes']) => writePetParams(generatePetParams(type, config, { seed, labels }));
const register = (h: PetsHost, id: string, type: PetType, seed: number, load = false) =>
  h.registerTask({ petType: type, sharedModel: TAG, params: bytes(type, seed), source: 'upload', id, load });
const inputs = (lengths: number[], seed = 1): EncodedInput[] =>
  lengths.map((n, i) => ({ ids: Array.from({ length: n }, (_, j) => (seed * 31 + i * 7 + j * 13) % config.vocabSize) }));

describe('PetsHost', () => {
  it('reports the shared model and its memory', () => {
    const h = host();
    expect(h.model).toMatchObject({ tag: TAG, hiddenSize: config.hiddenSize, maxPositions: config.maxPositions, petTypes: [...PET_TYPES] });
    expect(h.memory()).toMatchObject({ budgetBytes: 64 << 20, loadedTasks: 0, registeredTasks: 0 });
    expect(h.memory().sharedBytes).toBeGreaterThan(0);
    expect(h.tasks()).toEqual([]);
  });

  it('registers from bytes, loads, unloads and deletes, telling the memory listener of every change', async () => {
    const h = host();
    const seen: MemorySummary[] = [];
    h.onMemoryChange((m) => seen.push(m));
    const t = await register(h, 'sentiment', 'adapter', 1);
    expect(t).toMatchObject({ id: 'sentiment', petType: 'adapter', sharedModel: TAG, labels: ['no', 'yes'], state: 'registered', deviceBytes: null });
    expect(seen.at(-1)).toMatchObject({ registeredTasks: 1, loadedTasks: 0 });

    const loaded = await h.loadTask('sentiment');
    expect(loaded.state).toBe('loaded');
    expect(loaded.deviceBytes).toBeGreaterThan(0);
    expect(seen.at(-1)).toMatchObject({ loadedTasks: 1 });
    expect(h.memory().petBytes).toBeGreaterThan(0);
    const count = seen.length;
    await h.loadTask('sentiment'); // already loaded: no change, no notice
    expect(seen.length).toBe(count);

    expect((await h.unloadTask('sentiment')).state).toBe('registered');
    expect(h.memory()).toMatchObject({ loadedTasks: 0, petBytes: 0 });

    await h.loadTask('sentiment');
    const deleted = await h.deleteTask('sentiment');
    expect(deleted.state).toBe('loaded'); // its summary before deletion
    expect(h.tasks()).toEqual([]);
    expect(seen.at(-1)).toMatchObject({ registeredTasks: 0, loadedTasks: 0 });
    await expect(h.loadTask('sentiment')).rejects.toBeInstanceOf(UnknownTaskError);
  });

  it('refuses a file that holds another PET type, and a duplicate id, changing nothing', async () => {
    const h = host();
    await expect(h.registerTask({ petType: 'adapter', sharedModel: TAG, params: bytes('bitfit', 2), source: 'upload', load: false })).rejects.toBeInstanceOf(PetTypeMismatchError);
    await register(h, 'a', 'bitfit', 2);
    await expect(register(h, 'a', 'bitfit', 3)).rejects.toBeInstanceOf(TaskStateError);
    expect(h.tasks().map((t) => t.id)).toEqual(['a']);
  });

  it('a registration whose load does not fit the budget is unregistered again', async () => {
    const h = host();
    const room = h.memory().sharedBytes + 1024;
    const tight = host(room);
    await expect(register(tight, 'big', 'diff', 4, true)).rejects.toMatchObject({ kind: 'capacity' });
    expect(tight.tasks()).toEqual([]);
  });

  it('classifies without a pipeline: loads the task on demand, one result per input with the task’s labels', async () => {
    const h = host();
    await register(h, 'topic', 'maskbert', 5);
    const results = await h.classify('topic', inputs([6, 11, 3]));
    expect(results).toHaveLength(3);
    for (const r of results) {
      expect(['no', 'yes']).toContain(r.label);
      expect(r.logits).toHaveLength(2);
      expect(r.labelIndex).toBe(r.logits.indexOf(Math.max(...r.logits)));
    }
    expect(h.task('topic').state).toBe('loaded');
    const stats = h.stats();
    expect(stats).toMatchObject({ pendingQueries: 0, queriesClassified: 3, plans: [] });
    expect(stats.batches).toEqual([expect.objectContaining({ queries: 3, segments: 1, tasks: 1, maxLength: 11 })]);
    expect(h.stats().batches).toEqual([]); // drained
  });

  it('classifies through an attached WindowPipeline: concurrent tasks share macro-batches, same results as alone', async () => {
    const h = host();
    await register(h, 'x', 'adapter', 6, true);
    await register(h, 'y', 'lora', 7);
    const alone = { x: await h.classify('x', inputs([5, 8], 2)), y: await h.classify('y', inputs([7], 3)) };
    h.stats();
    h.attach(
      new WindowPipeline<EncodedInput, ClassifyResult>({
        executor: h.executor,
        strategy: 'cb',
        cost: { alpha: (n, l) => n * l + 1, beta: (_t, n, l) => 0.1 * n * l + 0.5 },
        windowMs: 50,
        windowQueries: 8,
        clock: systemClock,
        maxMini: 32,
        maxMacro: 128,
        onPlan: (plan, queries) => h.recordPlan({ strategy: plan.strategy, queries, batches: plan.batches.length }),
      }),
    );
    const [x, y] = await Promise.all([h.classify('x', inputs([5, 8], 2)), h.classify('y', inputs([7], 3))]);
    for (const [got, want] of [[x, alone.x], [y, alone.y]] as const) {
      expect(got.map((r) => r.label)).toEqual(want.map((r) => r.label));
      got.forEach((r, i) => r.logits.forEach((v, j) => expect(v).toBeCloseTo(want[i]!.logits[j]!, 4)));
    }
    const stats = h.stats();
    expect(stats.queriesClassified).toBe(3);
    expect(stats.plans).toEqual([{ strategy: 'cb', queries: 3, batches: stats.batches.length }]);
    expect(stats.batches.reduce((n, b) => n + b.queries, 0)).toBe(3);
    // Admin work waits for the classifies that use the task, then runs alone on it.
    const pending = h.classify('x', inputs([4]));
    const unloaded = await h.unloadTask('x');
    expect(unloaded.state).toBe('registered');
    expect(await pending).toHaveLength(1);
  });

  it('profiles with one temporary task of every PET type, removed afterwards', async () => {
    const h = host();
    await register(h, 'kept', 'bitfit', 8);
    const during = await h.withProfilingTasks(async (target) => {
      target.runShared(2, 8);
      expect(target.runPet('adapter', 2, 8)).toBeGreaterThanOrEqual(1);
      return { types: [...target.petTypes], loaded: h.memory().loadedTasks };
    });
    expect(during).toEqual({ types: [...PET_TYPES], loaded: PET_TYPES.length });
    expect(h.tasks().map((t) => t.id)).toEqual(['kept']);
    await expect(h.withProfilingTasks(() => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
    expect(h.tasks().map((t) => t.id)).toEqual(['kept']);
  });

  it('registers start-up tasks from files; a bad one fails naming its file', async () => {
    const h = host();
    const good = join(dir, 'good.safetensors');
    const bad = join(dir, 'bad.safetensors');
    writeFileSync(good, bytes('prefix', 9));
    writeFileSync(bad, 'not a safetensors file');
    const done = await h.registerStartupTasks([{ path: good, petType: 'prefix', id: 'formality', load: true }]);
    expect(done).toEqual([expect.objectContaining({ id: 'formality', state: 'loaded' })]);
    await expect(h.registerStartupTasks([{ path: bad, petType: 'adapter', id: 'broken', load: false }])).rejects.toThrow(`start-up task broken (${bad})`);
    expect(h.tasks().map((t) => t.id)).toEqual(['formality']);
  });
});

describe('ensurePetsDemo', () => {
  it('generates the demo once (a model and one task per demo entry) that a host serves, and reuses it', async () => {
    const root = join(dir, 'demo');
    const lines: string[] = [];
    const demo = ensurePetsDemo(root, (l) => lines.push(l));
    expect(demo.generated).toBe(true);
    expect(lines.length).toBeGreaterThan(PETS_DEMO_TASKS.length);
    expect(ensurePetsDemo(root).generated).toBe(false);
    const h = new PetsHost({ modelDir: demo.modelDir, tag: demo.modelName, budgetBytes: 64 << 20, threads: 1 });
    hosts.push(h);
    const tasks = await h.registerStartupTasks(demo.tasks);
    expect(tasks.map((t) => [t.id, t.petType, t.state])).toEqual(PETS_DEMO_TASKS.map((t) => [t.id, t.petType, 'loaded']));
    const [r] = await h.classify('sentiment', inputs([6]));
    expect(PETS_DEMO_TASKS[0]!.labels).toContain(r!.label);
  }, 60_000);
});

describe('PetsHostMetrics', () => {
  it('advances its counters by a host’s drained stats and sets the gauges', async () => {
    const registry = new Registry();
    const metrics = new PetsHostMetrics(registry);
    const memory = { budgetBytes: 1000, sharedBytes: 300, petBytes: 50, loadedTasks: 1, registeredTasks: 2 };
    const batch = { queries: 3, segments: 2, tasks: 2, maxLength: 8, totalMs: 4, petMs: 1, sharedMs: 3, rows: 24, paddingRows: 5 };
    metrics.observeClassify(0.02);
    metrics.onStats({ memory, pendingQueries: 4, queriesClassified: 3, batches: [batch], plans: [{ strategy: 'cb', queries: 3, batches: 1 }] });
    metrics.onStats({ memory, pendingQueries: 0, queriesClassified: 5, batches: [], plans: [] });
    const text = await registry.metrics();
    const value = (series: string) => Number(text.split('\n').find((l) => l.startsWith(`${series} `))?.split(' ')[1]);
    expect(value('tessera_pets_queries_classified_total')).toBe(5);
    expect(value('tessera_pets_macro_batches_total')).toBe(1);
    expect(value('tessera_pets_plans_total{strategy="cb"}')).toBe(1);
    expect(value('tessera_pets_plans_total{strategy="fixed"}')).toBe(0);
    expect(value('tessera_pets_pet_time_share')).toBe(0.25);
    expect(value('tessera_pets_padding_rows_total')).toBe(5);
    expect(value('tessera_pets_tasks{state="registered"}')).toBe(2);
    expect(value('tessera_pets_device_budget_bytes')).toBe(1000);
    expect(value('tessera_pets_pending_queries')).toBe(0);
    expect(value('tessera_pets_classify_seconds_count')).toBe(1);
  });
});
