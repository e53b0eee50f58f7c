/**
 * The Task Manager (pets.md §3.2–3.4, §9 behaviours 1–3): registration validated against the shared config
 * without loading it, unique ids, the shared model loaded once, all-or-nothing loads, unload / unregister.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { type EncoderConfig, encoderLinearModules, generateModel } from '@tessera/engine';
import { allocatorStats, getBackend, setBudget } from '@tessera/native';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  DeviceBudgetError,
  PET_TYPES,
  PetConfigError,
  PetShapeError,
  TaskManager,
  TaskStateError,
  UnknownPetTypeError,
  UnknownSharedModelError,
  UnknownTaskError,
  diffTensorNames,
  generatePetParams,
} from '../src/index.js';

let dir: string;
let gen: { dir: string; config: EncoderConfig };
const managers: TaskManager[] = [];

beforeAll(() => {
  dir = mkdtempSync(join(tmpdir(), 'pet-tasks-'));
  gen = generateModel(join(dir, 'tiny'), { family: 'encoder', size: 'tiny', seed: 21 });
});
afterAll(() => rmSync(dir, { recursive: true, force: true }));
afterEach(() => {
  for (const m of managers.splice(0)) m.dispose();
});

function manager(options: ConstructorParameters<typeof TaskManager>[0] = {}): TaskManager {
  const m = new TaskManager(options);
  managers.push(m);
  m.addSharedModel('bert-tiny', { dir: gen.dir });
  return m;
}

const params = (type: (typeof PET_TYPES)[number], seed = 1) => generatePetParams(type, gen.config, { seed });
const inUse = () => allocatorStats(getBackend()).inUse;

describe('registerTask', () => {
  it('returns unique ids that resolve to <tag, type>, without loading the shared model', () => {
    const m = manager();
    const before = inUse();
    const ids = PET_TYPES.map((t, i) => m.registerTask(t, 'bert-tiny', params(t, i), { name: `${t} task` }));
    expect(new Set(ids).size).toBe(7);
    expect(inUse()).toBe(before);
    for (const [i, id] of ids.entries()) {
      const info = m.task(id);
      expect(info).toMatchObject({ id, type: PET_TYPES[i], sharedModelTag: 'bert-tiny', state: 'registered', deviceBytes: null, name: `${PET_TYPES[i]} task` });
      expect(info.labels).toEqual(gen.config.labels);
      expect(info.storedBytes).toBeGreaterThan(0);
    }
    expect(m.tasks().map((t) => t.id)).toEqual(ids);
    expect(m.memory()).toMatchObject({ sharedBytes: 0, petBytes: 0, loadedTasks: 0, registeredTasks: 7, budgetBytes: null });
    expect(m.registerTask('diff', 'bert-tiny', params('diff'), { id: 'my-task' })).toBe('my-task');
    expect(() => m.registerTask('diff', 'bert-tiny', params('diff'), { id: 'my-task' })).toThrow(TaskStateError);
  });

  it('stores MaskBert and Diff compressed: a bit per weight, CSR of the non-zeros', () => {
    const m = manager();
    const weights = gen.config.numLayers * (4 * 64 * 64 + 2 * 64 * 128);
    const mask = m.task(m.registerTask('maskbert', 'bert-tiny', params('maskbert')));
    expect(mask.storedBytes).toBe(weights / 8 + (3 * 64 + 3) * 4);
    const diff = m.task(m.registerTask('diff', 'bert-tiny', params('diff')));
    expect(diff.storedBytes).toBeLessThan(0.05 * weights * 4);
  });

  it('rejects unknown types and tags, type mismatches and bad shapes, registering nothing', () => {
    const m = manager();
    expect(() => m.registerTask('ia3' as 'diff', 'bert-tiny', params('diff'))).toThrow(UnknownPetTypeError);
    expect(() => m.registerTask('diff', 'bert-huge', params('diff'))).toThrow(UnknownSharedModelError);
    expect(() => m.registerTask('bitfit', 'bert-tiny', params('diff'))).toThrow(PetConfigError);
    const p = params('diff');
    const name = diffTensorNames(encoderLinearModules(gen.config, 1).ffn_in).biasDiff;
    const bad = { ...p, tensors: new Map([...p.tensors, [name, { dtype: 'f32' as const, shape: [64], data: new Float32Array(64) }]]) };
    expect(() => m.registerTask('diff', 'bert-tiny', bad)).toThrow(PetShapeError);
    expect(() => m.registerTask('diff', 'bert-tiny', bad)).toThrow(new RegExp(`${name.replaceAll('.', '\\.')}: expected f32 \\[128\\], got f32 \\[64\\]`));
    expect(m.tasks()).toEqual([]);
    expect(() => m.addSharedModel('bert-tiny', { dir: gen.dir })).toThrow(TaskStateError);
  });

  it('keeps its own copy of the parameters', () => {
    const m = manager();
    const p = params('bitfit');
    const id = m.registerTask('bitfit', 'bert-tiny', p);
    (p.tensors.get('classifier.bias')!.data as Float32Array).fill(Number.NaN);
    (p.config.labels as string[]).push('extra');
    expect(m.task(id).labels).toEqual(gen.config.labels);
    expect(() => m.loadTasks([id])).not.toThrow();
  });
});

describe('loadTasks', () => {
  it('loads the shared model once, then only PET bytes per task', () => {
    const m = manager();
    const ids = PET_TYPES.map((t, i) => m.registerTask(t, 'bert-tiny', params(t, i)));
    const before = inUse();
    m.loadTasks(ids.slice(0, 3));
    const shared = m.sharedModel('bert-tiny');
    expect(m.loadSharedModel('bert-tiny')).toBe(shared);
    const afterFirst = inUse();
    m.loadTasks(ids.slice(2));
    expect(m.loadedTask(ids[6]!).shared).toBe(shared);
    const mem = m.memory();
    expect(mem.sharedBytes).toBe(shared.bytes);
    expect(mem.loadedTasks).toBe(7);
    expect(inUse() - before).toBe(mem.sharedBytes + mem.petBytes);
    const petBytes = ids.map((id) => m.task(id).deviceBytes!);
    expect(inUse() - afterFirst).toBe(petBytes.slice(3).reduce((a, b) => a + b, 0));
    for (const [i, t] of PET_TYPES.entries()) expect(mem.perType[t]).toEqual({ tasks: 1, bytes: petBytes[i] });
    expect(m.loadedTask(ids[0]!).pet.type).toBe('adapter');
  });

  it('is all-or-nothing: an unknown id loads nothing', () => {
    const m = manager();
    const id = m.registerTask('diff', 'bert-tiny', params('diff'));
    const before = inUse();
    expect(() => m.loadTasks([id, 'nope'])).toThrow(UnknownTaskError);
    expect(inUse()).toBe(before);
    expect(m.task(id).state).toBe('registered');
  });

  it('is all-or-nothing under the native budget: nothing new stays loaded, the shared model included', () => {
    const m = manager();
    const ids = [1, 2, 3].map((s) => m.registerTask('maskbert', 'bert-tiny', params('maskbert', s)));
    const saved = allocatorStats().budget;
    try {
      m.loadTasks([ids[0]!]);
      const one = m.task(ids[0]!).deviceBytes!;
      const base = inUse();
      setBudget(base + one + one / 2);
      let caught: unknown;
      try {
        m.loadTasks(ids);
      } catch (err) {
        caught = err;
      }
      expect(caught).toBeInstanceOf(DeviceBudgetError);
      const e = caught as DeviceBudgetError;
      expect(e.requestedBytes).toBeGreaterThan(0);
      expect(e.freeBytes).toBeLessThan(one);
      expect(e.budgetBytes).toBe(base + one + one / 2);
      expect(inUse()).toBe(base);
      expect(m.tasks().map((t) => t.state)).toEqual(['loaded', 'registered', 'registered']);
      m.unloadTask(ids[0]!);
      m.unloadSharedModel('bert-tiny');
      setBudget(inUse() + 1000);
      expect(() => m.loadTasks([ids[1]!])).toThrow(DeviceBudgetError);
      expect(m.memory().sharedBytes).toBe(0);
      setBudget(saved);
      m.loadTasks(ids);
      expect(m.memory().loadedTasks).toBe(3);
    } finally {
      setBudget(saved);
    }
  });

  it("respects the manager's own cap", () => {
    const probe = manager();
    const id = probe.registerTask('diff', 'bert-tiny', params('diff'));
    probe.loadTasks([id]);
    const { sharedBytes, petBytes } = probe.memory();
    probe.dispose();
    const m = manager({ deviceBudgetBytes: sharedBytes + 2 * petBytes + 100 });
    const ids = [1, 2, 3].map((s) => m.registerTask('diff', 'bert-tiny', params('diff', s)));
    const before = inUse();
    expect(() => m.loadTasks(ids)).toThrow(DeviceBudgetError);
    expect(inUse()).toBe(before);
    m.loadTasks(ids.slice(0, 2));
    expect(() => m.loadTasks([ids[2]!])).toThrow(/did not fit the device budget/);
    expect(m.memory()).toMatchObject({ loadedTasks: 2, budgetBytes: sharedBytes + 2 * petBytes + 100 });
    expect(() => manager({ deviceBudgetBytes: 10 }).loadSharedModel('bert-tiny')).toThrow(DeviceBudgetError);
  });
});

describe('unload and unregister', () => {
  it('give the device bytes back; state errors are typed', () => {
    const m = manager();
    const a = m.registerTask('adapter', 'bert-tiny', params('adapter'));
    const b = m.registerTask('lora', 'bert-tiny', params('lora'));
    m.loadSharedModel('bert-tiny');
    const base = inUse();
    m.loadTasks([a, b]);
    expect(() => m.unloadSharedModel('bert-tiny')).toThrow(TaskStateError);
    const bBytes = m.task(b).deviceBytes!;
    m.unloadTask(a);
    expect(inUse() - base).toBe(bBytes);
    expect(m.task(a).state).toBe('registered');
    expect(() => m.unloadTask(a)).toThrow(TaskStateError);
    expect(() => m.loadedTask(a)).toThrow(TaskStateError);
    m.unregisterTask(b);
    expect(inUse()).toBe(base);
    expect(() => m.task(b)).toThrow(UnknownTaskError);
    expect(() => m.unregisterTask(b)).toThrow(UnknownTaskError);
    expect(m.memory()).toMatchObject({ loadedTasks: 0, registeredTasks: 1, petBytes: 0 });
    m.unloadSharedModel('bert-tiny');
    expect(() => m.sharedModel('bert-tiny')).toThrow(TaskStateError);
  });

  it('dispose frees everything', () => {
    const before = inUse();
    const m = manager();
    m.loadTasks([m.registerTask('prefix', 'bert-tiny', params('prefix'))]);
    expect(inUse()).toBeGreaterThan(before);
    m.dispose();
    expect(inUse()).toBe(before);
    expect(m.tasks()).toEqual([]);
  });
});

describe('shared model sources', () => {
  it('a config plus a weights file works like the directory', () => {
    const m = new TaskManager();
    managers.push(m);
    m.addSharedModel('file', { config: gen.config, weights: join(gen.dir, 'model.safetensors') });
    m.addSharedModel('dir', { config: gen.config, weights: gen.dir });
    m.addSharedModel('full', { dir: gen.dir });
    expect(m.sharedModelTags()).toEqual(['file', 'dir', 'full']);
    const a = m.loadSharedModel('file');
    const b = m.loadSharedModel('dir');
    const c = m.loadSharedModel('full');
    expect(a.bytes).toBe(b.bytes);
    expect(a.tokenizer).toBeNull();
    expect(c.tokenizer).not.toBeNull();
    expect(a.hostWeight('classifier.bias')).toEqual(c.hostWeight('classifier.bias'));
    expect(() => m.addSharedModel('', { dir: gen.dir })).toThrow(PetConfigError);
    expect(() => m.addSharedModel('bare', { config: { ...gen.config, architecture: 'BertModel', numLabels: 0, labels: [] }, weights: gen.dir })).toThrow(/pooler/);
  });
});
